"""The index the agent's rate for one action is counted over (a COUNT at each submission
while policies are in force: approvals/decisions/policies.py). Built CONCURRENTLY on
PostgreSQL, as 0005's are, so a table of millions of plans keeps taking new ones."""

from importlib import import_module

from django.db import migrations, models

# The operation 0005 defines (a module name that starts with a digit is imported so).
AddIndexConcurrently = import_module(
    "approvals.migrations.0005_history_indexes"
).AddIndexConcurrently


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("approvals", "0019_policy_backtest"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="plan",
            index=models.Index(
                fields=["agent", "action", "created_at"], name="plan_agent_action_created"
            ),
        ),
    ]
