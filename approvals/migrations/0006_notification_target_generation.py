"""Notification targets join the catalog generation (actions/generation.py): whether any
is enabled decides if a submission queues a notification task at all."""

from django.db import migrations

from actions import generation

TABLE = "approvals_notificationtarget"


def create(apps, schema_editor):
    for sql in generation.create_sql(schema_editor.connection.vendor, TABLE):
        schema_editor.execute(sql, params=None)


def drop(apps, schema_editor):
    for sql in generation.drop_sql(schema_editor.connection.vendor, TABLE):
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0005_history_indexes"),
        ("actions", "0006_catalog_generation"),
    ]

    operations = [
        migrations.RunPython(create, drop, elidable=False),
    ]
