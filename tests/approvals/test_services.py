"""Guarantee 2 (approval binds to the fingerprint), the state machine, expiry and the
tamper-evident audit trail."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.utils import timezone

from actions.catalog import load_catalog
from actions.lib.audit import audit_verify
from actions.lib.exceptions import (
    ActionChanged,
    AlreadyDecided,
    FingerprintMismatch,
    InvalidInput,
    InvalidTransition,
    NotAllowed,
    NotFound,
)
from actions.lib.models import AuditEvent
from approvals.lifecycle import plan_transition, plans_expire
from approvals.models import TRANSITIONS, Approval, Plan, PlanStatus
from approvals.services import approval_record, plan_cancel
from approvals.wakeups import is_wakeup
from tests.conftest import DEMO_CATALOG


@pytest.fixture
def decide(django_capture_on_commit_callbacks):
    """approval_record without publishing anything to the broker."""

    def decide(plan, reviewer, decision="approve", fingerprint=None, **kw):
        with django_capture_on_commit_callbacks(execute=False):
            return approval_record(
                plan_id=plan.id,
                reviewer=reviewer,
                decision=decision,
                fingerprint_seen=plan.fingerprint if fingerprint is None else fingerprint,
                **kw,
            )

    return decide


def fresh(plan) -> Plan:
    return Plan.objects.get(pk=plan.pk)


def kinds(plan) -> list[str]:
    return list(AuditEvent.objects.filter(plan=plan).values_list("kind", flat=True))


# --- approving -----------------------------------------------------------------------------


def test_it_approves_the_plan_the_reviewer_saw(
    make_plan, reviewer, django_capture_on_commit_callbacks
):
    plan = make_plan()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        approval_record(
            plan_id=plan.id,
            reviewer=reviewer,
            decision="approve",
            fingerprint_seen=plan.fingerprint,
        )
    plan = fresh(plan)
    assert plan.status == PlanStatus.APPROVED
    assert plan.decided_at and plan.enqueued_at
    approval = Approval.objects.get(plan=plan)
    assert approval.reviewer == reviewer
    assert approval.fingerprint == plan.fingerprint
    assert approval.used_at is None
    assert approval.expires_at > timezone.now()
    # The worker's wake-up is published only after commit (and the long-polls' one).
    assert len([c for c in callbacks if not is_wakeup(c)]) == 1
    assert kinds(plan) == ["plan.proposed", "approval.recorded", "plan.approved"]


def test_a_wrong_fingerprint_approves_nothing(make_plan, reviewer, decide):
    plan = make_plan()
    with pytest.raises(FingerprintMismatch):
        decide(plan, reviewer, fingerprint="0" * 64)
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    assert not Approval.objects.exists()
    event = AuditEvent.objects.get(kind="approval.fingerprint_mismatch")
    assert event.plan_id == plan.id
    assert event.actor == "user:rita"
    assert event.data["fingerprint_seen"] == "0" * 64


def test_another_plans_fingerprint_approves_nothing(make_plan, reviewer, decide):
    plan = make_plan()
    other = make_plan(input={"contact_id": "c-1002", "email": "grace@new.example"})
    with pytest.raises(FingerprintMismatch):
        decide(plan, reviewer, fingerprint=other.fingerprint)
    assert not Approval.objects.exists()


def test_a_deny_also_needs_the_right_fingerprint(make_plan, reviewer, decide):
    plan = make_plan()
    with pytest.raises(FingerprintMismatch):
        decide(plan, reviewer, "deny", fingerprint="nope")
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL


@pytest.mark.parametrize(
    "column, value",
    [
        ("input", {"contact_id": "c-1001", "email": "mallory@evil.example"}),
        ("after", {"email": "mallory@evil.example"}),
        ("write_request", {"method": "DELETE", "path": "/contacts/c-1001", "headers": {}}),
    ],
)
def test_a_tampered_plan_cannot_be_approved(make_plan, reviewer, decide, column, value):
    plan = make_plan()
    Plan.objects.filter(pk=plan.pk).update(**{column: value})
    # The reviewer posts the fingerprint on record: the columns no longer produce it.
    with pytest.raises(FingerprintMismatch):
        decide(plan, reviewer)
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    assert not Approval.objects.exists()
    assert AuditEvent.objects.filter(kind="approval.fingerprint_mismatch").count() == 1


def test_the_same_reviewer_cannot_decide_twice(make_plan, reviewer, decide):
    plan = make_plan(action="delete_contact", input={"contact_id": "c-1003"})
    decide(plan, reviewer)
    with pytest.raises(AlreadyDecided):
        decide(plan, reviewer)
    assert Approval.objects.filter(plan=plan).count() == 1
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL


def test_an_outsider_cannot_decide(make_plan, outsider, decide):
    plan = make_plan()
    for decision in ("approve", "deny"):
        with pytest.raises(NotAllowed):
            decide(plan, outsider, decision)
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    assert not Approval.objects.exists()


def test_an_inactive_reviewer_cannot_decide(make_plan, reviewer, decide):
    reviewer.is_active = False
    reviewer.save()
    with pytest.raises(NotAllowed):
        decide(make_plan(), reviewer)


def test_an_unknown_decision_is_refused(make_plan, reviewer, decide):
    with pytest.raises(InvalidInput):
        decide(make_plan(), reviewer, "maybe")


def test_an_unknown_plan_is_not_found(db, reviewer):
    import uuid

    with pytest.raises(NotFound):
        approval_record(
            plan_id=uuid.uuid4(), reviewer=reviewer, decision="approve", fingerprint_seen="x"
        )


def test_deny(make_plan, reviewer, decide):
    plan = make_plan()
    decide(plan, reviewer, "deny", comment="not this one")
    plan = fresh(plan)
    assert plan.status == PlanStatus.DENIED
    assert plan.finished_at is not None
    assert Approval.objects.get(plan=plan).decision == "deny"
    assert kinds(plan)[-1] == "plan.denied"
    with pytest.raises(InvalidTransition):
        decide(plan, reviewer)


def test_a_decided_plan_cannot_be_decided_again(make_plan, reviewer, second_reviewer, decide):
    plan = make_plan()
    decide(plan, reviewer)
    with pytest.raises(InvalidTransition):
        decide(plan, second_reviewer, "deny")
    assert fresh(plan).status == PlanStatus.APPROVED


def test_an_expired_plan_cannot_be_approved(make_plan, reviewer, decide):
    plan = make_plan()
    Plan.objects.filter(pk=plan.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(InvalidTransition, match="expired"):
        decide(plan, reviewer)
    plan = fresh(plan)
    assert plan.status == PlanStatus.EXPIRED
    assert not Approval.objects.exists()
    assert kinds(plan)[-1] == "plan.expired"


def test_irreversible_actions_need_two_distinct_approvers(
    make_plan, reviewer, second_reviewer, decide
):
    plan = make_plan(action="delete_contact", input={"contact_id": "c-1003"})
    assert plan.approvals_required == 2
    decide(plan, reviewer)
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    decide(plan, second_reviewer)
    assert fresh(plan).status == PlanStatus.APPROVED
    assert set(Approval.objects.filter(plan=plan).values_list("reviewer__username", flat=True)) == {
        "rita",
        "sam",
    }


def test_lowering_the_approval_count_column_does_not_lower_the_bar(
    make_plan, reviewer, second_reviewer, decide
):
    """The count that is enforced is the fingerprinted policy's, not a loose column."""
    plan = make_plan(action="delete_contact", input={"contact_id": "c-1003"})
    Plan.objects.filter(pk=plan.pk).update(approvals_required=1)
    decide(plan, reviewer)
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    decide(plan, second_reviewer)
    assert fresh(plan).status == PlanStatus.APPROVED


def test_one_deny_ends_a_two_approver_plan(make_plan, reviewer, second_reviewer, decide):
    plan = make_plan(action="delete_contact", input={"contact_id": "c-1003"})
    decide(plan, reviewer)
    decide(plan, second_reviewer, "deny")
    assert fresh(plan).status == PlanStatus.DENIED


def test_an_action_redefined_after_the_preview_cannot_be_approved(make_plan, reviewer, decide):
    plan = make_plan()
    document = yaml.safe_load(DEMO_CATALOG.read_text())
    document["actions"]["update_contact_email"]["title"] = "Update an email (v2)"
    load_catalog(yaml.safe_dump(document))
    with pytest.raises(ActionChanged):
        decide(plan, reviewer)
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    assert not Approval.objects.exists()
    assert "approval.action_changed" in kinds(plan)


def test_an_action_definition_edited_in_place_cannot_be_approved(make_plan, reviewer, decide):
    """Editing the stored definition without a new version/digest is caught: the digest
    in the fingerprint must be the digest of the definition that will be used."""
    plan = make_plan()
    action = plan.action.__class__.objects.get(pk=plan.action_id)
    definition = {**action.definition, "read": {"path": "/contacts/c-1002"}}
    action.__class__.objects.filter(pk=action.pk).update(definition=definition)
    with pytest.raises(ActionChanged):
        decide(plan, reviewer)
    assert not Approval.objects.exists()


def test_a_disabled_action_cannot_be_approved(make_plan, reviewer, decide):
    plan = make_plan()
    plan.action.__class__.objects.filter(pk=plan.action_id).update(enabled=False)
    with pytest.raises(ActionChanged):
        decide(plan, reviewer)


def test_a_redefined_action_can_still_be_denied(make_plan, reviewer, decide):
    plan = make_plan()
    document = yaml.safe_load(DEMO_CATALOG.read_text())
    document["actions"]["update_contact_email"]["title"] = "Update an email (v2)"
    load_catalog(yaml.safe_dump(document))
    decide(plan, reviewer, "deny")
    assert fresh(plan).status == PlanStatus.DENIED


# --- the state machine ---------------------------------------------------------------------


def test_illegal_transitions_raise(make_plan):
    plan = make_plan()
    with pytest.raises(InvalidTransition):
        plan_transition(plan, to=PlanStatus.COMPLETED, actor="test", event="test")
    with pytest.raises(InvalidTransition):
        plan_transition(plan, to=PlanStatus.EXECUTING, actor="test", event="test")
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    assert kinds(plan) == ["plan.proposed"]


def test_terminal_states_have_no_way_out(make_plan):
    plan = make_plan()
    terminal = [s for s in PlanStatus.values if not TRANSITIONS.get(s)]
    assert set(terminal) == {
        "completed",
        "already_in_desired_state",
        "rejected",
        "not_applied",
        "stale",
        "refused",
        "denied",
        "expired",
        "cancelled",
    }
    for status in terminal:
        Plan.objects.filter(pk=plan.pk).update(status=status)
        plan = fresh(plan)
        for target in PlanStatus.values:
            with pytest.raises(InvalidTransition):
                plan_transition(plan, to=target, actor="test", event="test")
    assert kinds(plan) == ["plan.proposed"]


def test_a_transition_from_a_stale_copy_fails(make_plan):
    """The conditional UPDATE: a copy that still says awaiting cannot overwrite a change."""
    plan = make_plan()
    copy = fresh(plan)
    plan_transition(plan, to=PlanStatus.CANCELLED, actor="test", event="plan.cancelled")
    with pytest.raises(InvalidTransition, match="no longer"):
        plan_transition(copy, to=PlanStatus.APPROVED, actor="test", event="plan.approved")
    assert fresh(plan).status == PlanStatus.CANCELLED
    assert kinds(plan).count("plan.approved") == 0


def test_every_transition_is_audited(make_plan):
    plan = make_plan()
    plan_transition(plan, to=PlanStatus.DENIED, actor="user:x", event="plan.denied")
    event = AuditEvent.objects.filter(plan=plan).last()
    assert event.kind == "plan.denied"
    assert event.data == {"from": "awaiting_approval", "to": "denied"}
    assert event.fingerprint == plan.fingerprint


def test_cancel_only_by_its_agent_and_only_while_awaiting(make_plan, other_agent, agent):
    plan = make_plan()
    with pytest.raises(NotFound):
        plan_cancel(agent=other_agent[0], plan_id=plan.id)
    plan_cancel(agent=agent, plan_id=plan.id)
    assert fresh(plan).status == PlanStatus.CANCELLED
    with pytest.raises(InvalidTransition):
        plan_cancel(agent=agent, plan_id=plan.id)


# --- expiry --------------------------------------------------------------------------------


def test_plans_expire_expires_only_past_due_plans(make_plan):
    due = make_plan()
    not_due = make_plan(input={"contact_id": "c-1002", "email": "grace@new.example"})
    decided = make_plan(input={"contact_id": "c-1003", "email": "alan@new.example"})
    past = timezone.now() - timedelta(seconds=1)
    Plan.objects.filter(pk__in=[due.pk, decided.pk]).update(expires_at=past)
    Plan.objects.filter(pk=decided.pk).update(status=PlanStatus.DENIED)
    assert plans_expire() == 1
    assert fresh(due).status == PlanStatus.EXPIRED
    assert fresh(due).finished_at is not None
    assert fresh(not_due).status == PlanStatus.AWAITING_APPROVAL
    assert fresh(decided).status == PlanStatus.DENIED
    assert plans_expire() == 0


def test_plans_expire_accepts_a_clock(make_plan):
    plan = make_plan()
    assert plans_expire(now=plan.expires_at - timedelta(seconds=1)) == 0
    assert plans_expire(now=plan.expires_at) == 1


# --- the audit trail -----------------------------------------------------------------------


def _a_whole_flow(make_plan, reviewer, second_reviewer, decide):
    one = make_plan(action="delete_contact", input={"contact_id": "c-1003"})
    decide(one, reviewer)
    decide(one, second_reviewer)
    two = make_plan()
    decide(two, reviewer, "deny")
    with pytest.raises(FingerprintMismatch):
        decide(make_plan(), reviewer, fingerprint="f" * 64)


def test_the_audit_chain_verifies_after_a_flow(make_plan, reviewer, second_reviewer, decide):
    _a_whole_flow(make_plan, reviewer, second_reviewer, decide)
    checked, broken = audit_verify()
    assert broken is None
    assert checked == AuditEvent.objects.count() > 8
    call_command("verify_audit")


def test_every_event_links_to_the_one_before(make_plan, reviewer, second_reviewer, decide):
    _a_whole_flow(make_plan, reviewer, second_reviewer, decide)
    events = list(AuditEvent.objects.order_by("id"))
    assert events[0].prev_hash == "0" * 64
    for before, after in zip(events, events[1:], strict=False):
        assert after.prev_hash == before.hash


@contextmanager
def tampering_as_owner():
    """An attacker with the table owner's rights: the append-only trigger (PostgreSQL)
    is switched off, so what is left to catch the forgery is the hash chain."""
    from django.db import connection

    if connection.vendor != "postgresql":
        yield
        return

    def alter(action: str) -> None:
        with connection.cursor() as cursor:
            # ALTER TABLE refuses while deferred FK checks are pending: run them now.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(f"ALTER TABLE approvals_auditevent {action} TRIGGER USER")
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")

    alter("DISABLE")
    try:
        yield
    finally:
        alter("ENABLE")


def test_editing_an_event_is_detected(make_plan, reviewer, second_reviewer, decide):
    _a_whole_flow(make_plan, reviewer, second_reviewer, decide)
    target = AuditEvent.objects.filter(kind="plan.denied").get()
    with tampering_as_owner():
        AuditEvent.objects.filter(pk=target.pk).update(
            data={"from": "awaiting_approval", "to": "approved"}
        )
    _, broken = audit_verify()
    assert broken is not None and broken.pk == target.pk
    with pytest.raises(CommandError, match=f"broken at event {target.pk}"):
        call_command("verify_audit")


@pytest.mark.parametrize("field", ["actor", "kind", "fingerprint"])
def test_editing_any_field_is_detected(make_plan, reviewer, decide, field):
    plan = make_plan()
    decide(plan, reviewer)
    target = AuditEvent.objects.get(kind="approval.recorded")
    with tampering_as_owner():
        AuditEvent.objects.filter(pk=target.pk).update(**{field: "forged"})
    assert audit_verify()[1].pk == target.pk


def test_deleting_an_event_is_detected(make_plan, reviewer, second_reviewer, decide):
    _a_whole_flow(make_plan, reviewer, second_reviewer, decide)
    events = list(AuditEvent.objects.order_by("id"))
    victim = events[len(events) // 2]
    with tampering_as_owner():
        AuditEvent.objects.filter(pk=victim.pk).delete()
    _, broken = audit_verify()
    assert broken is not None and broken.pk == events[len(events) // 2 + 1].pk
    with pytest.raises(CommandError):
        call_command("verify_audit")


def test_rehashing_one_event_still_breaks_the_next(make_plan, reviewer, second_reviewer, decide):
    """A forger who recomputes the edited row's own hash breaks the following link."""
    from actions.lib.audit import event_hash

    _a_whole_flow(make_plan, reviewer, second_reviewer, decide)
    events = list(AuditEvent.objects.order_by("id"))
    target = events[3]
    data = {**target.data, "forged": True}
    new_hash = event_hash(
        prev_hash=target.prev_hash,
        at=target.at.isoformat(),
        kind=target.kind,
        actor=target.actor,
        plan_id=str(target.plan_id or ""),
        fingerprint=target.fingerprint,
        data=data,
    )
    with tampering_as_owner():
        AuditEvent.objects.filter(pk=target.pk).update(data=data, hash=new_hash)
    assert audit_verify()[1].pk == events[4].pk
