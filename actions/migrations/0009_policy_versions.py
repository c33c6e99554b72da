from django.db import migrations, models

from actions import generation

TABLE = "actions_policyversion"


def create_triggers(apps, schema_editor):
    # The set in force is compiled once per catalog generation (actions/policy/versions.py).
    for sql in generation.create_sql(schema_editor.connection.vendor, TABLE):
        schema_editor.execute(sql, params=None)


def drop_triggers(apps, schema_editor):
    for sql in generation.drop_sql(schema_editor.connection.vendor, TABLE):
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):

    dependencies = [
        ("actions", "0008_decision_rules"),
    ]

    operations = [
        migrations.CreateModel(
            name="PolicyVersion",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("number", models.PositiveIntegerField(unique=True)),
                ("enforce", models.TextField(blank=True)),
                ("shadow", models.TextField(blank=True)),
                ("hash", models.CharField(max_length=64)),
                ("policies", models.JSONField(blank=True, default=dict)),
                ("diff", models.TextField(blank=True)),
                ("created_by", models.CharField(blank=True, max_length=200)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["-number"],
            },
        ),
        migrations.RunPython(create_triggers, drop_triggers, elidable=False),
    ]
