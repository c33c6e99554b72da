"""The catalog generation (actions/generation.py): a one-row table and the triggers
that change its value on every write to the tables the hot paths cache."""

import uuid

from django.db import migrations, models

from actions import generation

# Table -> the columns whose UPDATE counts (empty: any UPDATE). An agent's last-use
# time is written at most once a minute per agent and changes nothing cached.
TABLES = {
    "actions_connector": (),
    "actions_credential": (),
    "actions_action": (),
    "actions_agent": (
        "id",
        "name",
        "token_prefix",
        "token_hash",
        "is_active",
        "expires_at",
        "revoked_at",
        "attributes",
        "created_by_id",
        "created_at",
    ),
    "actions_agent_actions": (),
    "actions_agentscope": (),
}


def create(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    apps.get_model("actions", "CatalogState").objects.update_or_create(
        id=1, defaults={"generation": uuid.uuid4().hex}
    )
    if vendor == "postgresql":
        schema_editor.execute(generation.PG_CREATE_FUNCTION, params=None)
    for table, columns in TABLES.items():
        for sql in generation.create_sql(vendor, table, columns):
            schema_editor.execute(sql, params=None)


def drop(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for table in TABLES:
        for sql in generation.drop_sql(vendor, table):
            schema_editor.execute(sql, params=None)
    if vendor == "postgresql":
        schema_editor.execute(generation.PG_DROP_FUNCTION, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("actions", "0005_credential_oauth2"),
    ]

    operations = [
        migrations.CreateModel(
            name="CatalogState",
            fields=[
                (
                    "id",
                    models.PositiveSmallIntegerField(
                        default=1, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("generation", models.CharField(max_length=64)),
            ],
            options={
                "verbose_name": "catalog state",
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("id", 1)), name="catalog_state_singleton"
                    )
                ],
            },
        ),
        migrations.RunPython(create, drop, elidable=False),
    ]
