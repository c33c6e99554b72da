"""The audit trail is append-only in the database (PostgreSQL trigger), and what an owner
who switches the trigger off does is still caught by the hash chain."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from actions.lib.audit import audit_record, audit_verify
from actions.lib.models import AuditEvent

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
    assert audit_verify() == (1, None)


def test_appending_still_works(event):
    with transaction.atomic():
        audit_record(kind="test.event", actor="tester", data={"n": 2})
    assert audit_verify() == (2, None)


def test_public_may_not_truncate_update_or_delete(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT has_table_privilege('public', 'approvals_auditevent', 'TRUNCATE'),"
            " has_table_privilege('public', 'approvals_auditevent', 'UPDATE'),"
            " has_table_privilege('public', 'approvals_auditevent', 'DELETE')"
        )
        assert cursor.fetchone() == (False, False, False)
