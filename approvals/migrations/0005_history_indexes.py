"""Indexes for a long history: the queue's "all" views and the dashboard window on plans;
the audit log's actor, kind and time filters (EXPLAIN figures in docs/reliability.md).

On PostgreSQL they are built CONCURRENTLY, so adding them to a table of millions of
plans does not stop new plans and audit events from being written meanwhile (hence a
non-atomic migration). Elsewhere (SQLite) they are ordinary CREATE INDEX.
"""

from django.db import migrations, models


class AddIndexConcurrently(migrations.AddIndex):
    """AddIndex, built without a write lock where the database can."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.add_index(model, self.index, concurrently=True)
        else:
            schema_editor.add_index(model, self.index)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        model = from_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.remove_index(model, self.index, concurrently=True)
        else:
            schema_editor.remove_index(model, self.index)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("approvals", "0004_session_grants_notifications"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="auditevent",
            index=models.Index(fields=["actor", "id"], name="audit_actor"),
        ),
        AddIndexConcurrently(
            model_name="auditevent",
            index=models.Index(fields=["kind", "id"], name="audit_kind"),
        ),
        AddIndexConcurrently(
            model_name="auditevent",
            index=models.Index(fields=["at"], name="audit_at"),
        ),
        AddIndexConcurrently(
            model_name="plan",
            index=models.Index(fields=["-created_at", "-id"], name="plan_created"),
        ),
        AddIndexConcurrently(
            model_name="plan",
            index=models.Index(fields=["expires_at", "id"], name="plan_expires"),
        ),
    ]
