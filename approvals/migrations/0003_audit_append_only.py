"""The audit trail is append-only in the database itself, not only in the code.

On PostgreSQL a trigger refuses every UPDATE and DELETE of approvals_auditevent, and
TRUNCATE/UPDATE/DELETE are revoked from PUBLIC. The table's OWNER can still TRUNCATE
(privileges do not bind the owner; TRUNCATE fires no row triggers) and can disable the
trigger: that is what the test suite's flushes rely on, and why production should run
the application as a role that does not own the tables (migrations run as the owner,
the app as a role granted only SELECT/INSERT on this table). Whatever a role with owner
rights does anyway, the hash chain still makes it detectable (``manage.py verify_audit``).

No-op on SQLite (embedded mode): there the hash chain is the protection.
"""

from django.db import migrations

TRIGGER = "approvals_auditevent_append_only"

CREATE = f"""
CREATE OR REPLACE FUNCTION {TRIGGER}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only: % of approvals_auditevent refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
DROP TRIGGER IF EXISTS {TRIGGER} ON approvals_auditevent;
CREATE TRIGGER {TRIGGER} BEFORE UPDATE OR DELETE ON approvals_auditevent
    FOR EACH ROW EXECUTE FUNCTION {TRIGGER}();
REVOKE TRUNCATE, UPDATE, DELETE ON approvals_auditevent FROM PUBLIC;
"""

DROP = f"""
DROP TRIGGER IF EXISTS {TRIGGER} ON approvals_auditevent;
DROP FUNCTION IF EXISTS {TRIGGER}();
"""


def _run(sql: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0002_plan_revision_of"),
    ]

    operations = [
        migrations.RunPython(_run(CREATE), _run(DROP), elidable=False),
    ]
