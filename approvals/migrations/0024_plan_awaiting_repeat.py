"""The index a repeated proposal is looked up by (services._awaiting_repeat: the agent's
awaiting plan with a repeat key), built CONCURRENTLY on PostgreSQL, as 0005's are; the
fingerprint's index it replaces is dropped."""

from importlib import import_module

from django.db import migrations, models

# The operation 0005 defines (a module name that starts with a digit is imported so).
AddIndexConcurrently = import_module(
    "approvals.migrations.0005_history_indexes"
).AddIndexConcurrently


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("approvals", "0023_plan_repeat_key"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="plan",
            index=models.Index(
                condition=models.Q(("status", "awaiting_approval")),
                fields=["agent", "repeat_key"],
                name="plan_awaiting_repeat",
            ),
        ),
        migrations.RemoveIndex(model_name="plan", name="plan_awaiting_fingerprint"),
    ]
