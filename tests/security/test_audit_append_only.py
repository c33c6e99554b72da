"""The audit trail and its checkpoints are append-only in the database (PostgreSQL
triggers); what an owner who switches them off does is caught by verify_audit
(tests/actions/test_audit_tree.py)."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from actions.lib.audit import audit_record
from actions.lib.checkpoints import audit_seal, audit_verify
from actions.lib.models import AuditCheckpoint, AuditEvent

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the trigger exists on PostgreSQL only"
)


@pytest.fixture
def event(db):
    with transaction.atomic():
        return audit_record(kind="test.event", actor="tester", data={"n": 1})


def test_an_update_is_refused(event):
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).update(actor="forged")
    assert AuditEvent.objects.get(pk=event.pk).actor == "tester"


def test_a_save_is_refused(event):
    event.kind = "forged"
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        event.save()


def test_a_delete_is_refused(event):
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).delete()
    assert AuditEvent.objects.filter(pk=event.pk).exists()
    report = audit_verify()
    assert report.ok and report.events == 1


def test_appending_still_works(event):
    with transaction.atomic():
        audit_record(kind="test.event", actor="tester", data={"n": 2})
    report = audit_verify()
    assert report.ok and report.events == 2


def test_a_checkpoint_cannot_be_changed_or_removed(event, sealer_key):
    audit_seal()
    checkpoint = AuditCheckpoint.objects.get()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditCheckpoint.objects.filter(pk=checkpoint.pk).update(root_hash="0" * 64)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditCheckpoint.objects.filter(pk=checkpoint.pk).delete()
    assert audit_verify().ok


def test_public_may_not_truncate_update_or_delete(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT has_table_privilege('public', 'approvals_auditevent', 'TRUNCATE'),"
            " has_table_privilege('public', 'approvals_auditevent', 'UPDATE'),"
            " has_table_privilege('public', 'approvals_auditevent', 'DELETE'),"
            " has_table_privilege('public', 'lib_auditcheckpoint', 'UPDATE'),"
            " has_table_privilege('public', 'lib_auditcheckpoint', 'DELETE')"
        )
        assert cursor.fetchone() == (False, False, False, False, False)
