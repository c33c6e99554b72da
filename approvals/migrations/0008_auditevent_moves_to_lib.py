# The audit trail's model moves to the lowest layer (actions.lib) with its table, which
# keeps its name, rows, indexes and append-only triggers: only Django's state changes.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0007_check_due_heartbeat"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="auditevent", name="audit_plan"),
                migrations.RemoveIndex(model_name="auditevent", name="audit_actor"),
                migrations.RemoveIndex(model_name="auditevent", name="audit_kind"),
                migrations.RemoveIndex(model_name="auditevent", name="audit_at"),
                migrations.DeleteModel(name="AuditEvent"),
            ],
            database_operations=[],
        ),
    ]
