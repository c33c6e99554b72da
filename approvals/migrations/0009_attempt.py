# The attempt's model, moved here from executors (0004 there) with its existing table
# executors_attempt: nothing changes in the database.

import uuid

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0008_auditevent_moves_to_lib"),
        ("executors", "0004_attempt_moves_to_approvals"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Attempt",
                    fields=[
                        (
                            "id",
                            models.UUIDField(
                                default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                            ),
                        ),
                        ("idempotency_key", models.CharField(max_length=64, unique=True)),
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("prepared", "Prepared"),
                                    ("sending", "Sending"),
                                    ("answered", "Answered"),
                                    ("not_sent", "Not Sent"),
                                    ("lost", "Lost"),
                                ],
                                default="prepared",
                                max_length=16,
                            ),
                        ),
                        ("tries", models.PositiveSmallIntegerField(default=0)),
                        ("request", models.JSONField(default=dict)),
                        ("response_status", models.PositiveSmallIntegerField(blank=True, null=True)),
                        ("response_headers", models.JSONField(default=dict)),
                        ("response_body", models.TextField(blank=True)),
                        ("error", models.TextField(blank=True)),
                        ("sends", models.PositiveSmallIntegerField(default=0)),
                        ("status_path", models.CharField(blank=True, max_length=500)),
                        ("status_checks", models.PositiveSmallIntegerField(default=0)),
                        ("reconcile_checks", models.PositiveSmallIntegerField(default=0)),
                        ("reconciliation", models.JSONField(blank=True, default=dict)),
                        ("revalidation", models.JSONField(default=dict)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("sent_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        ("duration_ms", models.PositiveIntegerField(blank=True, null=True)),
                        (
                            "plan",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="attempt",
                                to="approvals.plan",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "executors_attempt",
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("state__in", ["prepared", "sending", "answered", "not_sent", "lost"])
                                ),
                                name="attempt_state_valid",
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
