# The audit trail's model, moved here from approvals (0008 there) with its existing table
# approvals_auditevent: nothing changes in the database.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("approvals", "0008_auditevent_moves_to_lib"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AuditEvent",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("at", models.DateTimeField()),
                        ("kind", models.CharField(max_length=64)),
                        ("actor", models.CharField(max_length=200)),
                        ("fingerprint", models.CharField(blank=True, max_length=64)),
                        ("data", models.JSONField(default=dict)),
                        ("prev_hash", models.CharField(max_length=64)),
                        ("hash", models.CharField(max_length=64, unique=True)),
                        (
                            "plan",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="events",
                                to="approvals.plan",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "approvals_auditevent",
                        "ordering": ["id"],
                        "indexes": [
                            models.Index(fields=["plan", "id"], name="audit_plan"),
                            models.Index(fields=["actor", "id"], name="audit_actor"),
                            models.Index(fields=["kind", "id"], name="audit_kind"),
                            models.Index(fields=["at"], name="audit_at"),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
