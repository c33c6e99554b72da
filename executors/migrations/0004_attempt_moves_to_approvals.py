# The attempt's model moves to approvals (0009 there), beside the plan it belongs to,
# with its table, which keeps its name and rows: only Django's state changes.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("executors", "0003_reconcile_checks"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name="attempt", name="attempt_state_valid"),
                migrations.DeleteModel(name="Attempt"),
            ],
            database_operations=[],
        ),
    ]
