"""A decision's approval written in the statement that comes next on PostgreSQL
(approvals/services/deciding.py): an approval's in the read of the approvals that count
it, a denial's in the plan's move. The row is the one Model.save wrote and the events
are the same, byte for byte. Whether the reviewer decided already is read with the
locked plan, and judged where it always was: before every other refusal of a reviewer.
A second decision by the same reviewer that slips past that read (committed while this
one waited for the plan's lock) is refused as the read refuses it, with nothing written."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from actions.lib.audit import event_entry
from actions.lib.canonical import sha256_hex
from actions.lib.checkpoints import audit_seal, audit_verify
from actions.lib.exceptions import AlreadyDecided
from actions.lib.models import AuditEvent
from approvals.models import Approval, Plan, PlanStatus
from approvals.services import approval_record, deciding

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the approval in the next statement is PostgreSQL's"
)

KINDS = ("approval.recorded", "plan.approved", "plan.denied")


def _decide(plan: Plan, reviewer, decision: str = "approve", **kw) -> Plan:
    return approval_record(
        plan_id=plan.id,
        reviewer=reviewer,
        decision=decision,
        fingerprint_seen=plan.fingerprint,
        comment="ünïcode — ✓",
        **kw,
    )


def _written(plan: Plan) -> tuple[list[dict], list[tuple]]:
    """The plan's approvals (but their random ids) and its decision's events, as
    (kind, actor, data, bytes without the number each drew)."""
    rows = [
        {k: v for k, v in row.items() if k != "id"}
        for row in Approval.objects.filter(plan=plan).values()
    ]
    events = [
        (e.kind, e.actor, e.data, e.body.removesuffix(f',"seq":{e.id}}}'))
        for e in AuditEvent.objects.filter(plan=plan, kind__in=KINDS).order_by("id")
    ]
    return rows, events


@pytest.mark.parametrize(
    ("decision", "first"),
    [("approve", "WITH new_approval AS (INSERT"), ("deny", "WITH along0 AS (INSERT")],
)
def test_the_approval_and_its_events_are_those_the_orm_wrote(
    decision, first, make_plan, reviewer, monkeypatch, sealer_key,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    plan = make_plan()
    at = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: at)

    # The ORM's INSERT on its own, rolled back afterwards.
    with transaction.atomic(), django_capture_on_commit_callbacks(execute=False):
        with monkeypatch.context() as orm_only:
            orm_only.setattr(deciding, "row_insert_sql", lambda instance: None)
            with CaptureQueriesContext(connection) as ctx:
                _decide(plan, reviewer, decision)
        two_step = _written(plan)
        transaction.set_rollback(True)
    assert [q["sql"].split()[0] for q in ctx.captured_queries].count("INSERT") == 1
    assert not Approval.objects.filter(plan=plan).exists()

    with (
        django_capture_on_commit_callbacks(execute=False),
        CaptureQueriesContext(connection) as ctx,
    ):
        _decide(plan, reviewer, decision)
    statements = [q["sql"] for q in ctx.captured_queries]
    assert not [sql for sql in statements if sql.startswith("INSERT")], statements
    assert [sql for sql in statements if "INSERT" in sql][0].startswith(first)

    one = _written(plan)
    assert one == two_step
    assert len(one[0]) == 1 and one[0][0]["created_at"] == at
    assert [kind for kind, *_ in one[1]] == (
        ["approval.recorded", "plan.approved"] if decision == "approve" else ["plan.denied"]
    )
    for event in AuditEvent.objects.filter(plan=plan):
        assert event.hash == sha256_hex(event_entry(event))
    assert audit_seal()["events"] >= 1
    assert audit_verify().ok


def test_an_approval_that_is_not_the_last_is_read_with_the_others(
    make_plan, reviewer, second_reviewer, django_capture_on_commit_callbacks
):
    """An irreversible plan needs two: the second approval's read counts the first (from
    the table) and itself (from the statement's INSERT)."""
    plan = make_plan("delete_contact", {"contact_id": "c-1002"})
    with django_capture_on_commit_callbacks(execute=False):
        _decide(plan, reviewer)
        assert Plan.objects.get(id=plan.id).status == PlanStatus.AWAITING_APPROVAL
        _decide(plan, second_reviewer)
    assert Plan.objects.get(id=plan.id).status == PlanStatus.APPROVED
    recorded = AuditEvent.objects.filter(plan=plan, kind="approval.recorded").order_by("id")
    assert [e.data["approvals"] for e in recorded] == [1, 2]


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_second_decision_past_the_read_is_refused_and_writes_nothing(
    decision, make_plan, reviewer, monkeypatch, django_capture_on_commit_callbacks
):
    """As if the reviewer's first decision committed while this one waited for the lock:
    the read said no, the constraint says yes, and the refusal is the read's."""
    plan = make_plan("delete_contact", {"contact_id": "c-1002"})
    with django_capture_on_commit_callbacks(execute=False):
        _decide(plan, reviewer)
    events = AuditEvent.objects.count()
    locked = deciding._locked_undecided

    def read_before_it_committed(*args, **kwargs):
        found = locked(*args, **kwargs)
        assert found.reviewer_decided
        found.reviewer_decided = False
        return found

    monkeypatch.setattr(deciding, "_locked_undecided", read_before_it_committed)
    with (
        django_capture_on_commit_callbacks(execute=False) as callbacks,
        pytest.raises(AlreadyDecided, match="you have already decided on this plan"),
    ):
        _decide(plan, reviewer, decision)
    assert not callbacks
    assert Approval.objects.filter(plan=plan).count() == 1
    assert AuditEvent.objects.count() == events
    assert Plan.objects.get(id=plan.id).status == PlanStatus.AWAITING_APPROVAL


def test_having_decided_is_refused_before_any_other_refusal(
    make_plan, reviewer, monkeypatch, django_capture_on_commit_callbacks
):
    """The order of a reviewer's refusals holds: one who decided already is told so,
    even where a later refusal (audited) would apply too, and nothing is audited."""
    plan = make_plan("delete_contact", {"contact_id": "c-1002"})
    with django_capture_on_commit_callbacks(execute=False):
        _decide(plan, reviewer)
    # Approvals of the plan must now be signed, and this one comes with no signature.
    monkeypatch.setattr(deciding, "plan_needs_signature", lambda plan: True)
    events = AuditEvent.objects.count()
    with pytest.raises(AlreadyDecided):
        _decide(plan, reviewer)
    assert AuditEvent.objects.count() == events
    monkeypatch.undo()
    with pytest.raises(AlreadyDecided):
        _decide(plan, reviewer, "deny")
    assert Plan.objects.get(id=plan.id).status == PlanStatus.AWAITING_APPROVAL
