"""Guarantee 2 (approval binds to the fingerprint), the state machine, expiry and the
tamper-evident audit trail."""

from __future__ import annotations

import base64
import hashlib
import json
from contextlib import contextmanager
from datetime import timedelta

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.db import transaction
from django.utils import timezone

from actions.catalog import load_catalog
from actions.lib.audit import audit_record, event_bytes
from actions.lib.checkpoints import (
    audit_seal,
    audit_verify,
    checkpoint_json,
    checkpoint_note,
    read_export,
    signing_key,
    verify_export,
    verify_keys,
)
from actions.lib.exceptions import (
    ActionChanged,
    AlreadyDecided,
    FingerprintMismatch,
    InvalidInput,
    InvalidTransition,
    NotAllowed,
    NotFound,
)
from actions.lib.models import AuditCheckpoint, AuditEvent
from approvals.lifecycle import plan_transition, plans_expire
from approvals.models import TRANSITIONS, Approval, Plan, PlanStatus
from approvals.services import approval_record, plan_cancel
from approvals.wakeups import is_wakeup
from tests.conftest import demo_catalog_text


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
    document = yaml.safe_load(demo_catalog_text())
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
    document = yaml.safe_load(demo_catalog_text())
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


def _problems() -> list[str]:
    return [str(p) for p in audit_verify().problems]


def test_the_audit_trail_verifies_after_a_flow(
    make_plan, reviewer, second_reviewer, decide, sealer_key
):
    _a_whole_flow(make_plan, reviewer, second_reviewer, decide)
    report = audit_verify()
    assert report.ok and report.unsealed == report.events == AuditEvent.objects.count() > 8
    sealed = audit_seal()
    assert sealed["events"] == report.events
    report = audit_verify()
    assert report.ok and report.sealed == report.events and report.unsealed == 0
    call_command("verify_audit")


def test_every_event_carries_its_own_bytes_and_number(make_plan, reviewer, decide):
    decide(make_plan(), reviewer)
    for event in AuditEvent.objects.order_by("id"):
        assert json.loads(event.body)["seq"] == event.id
        assert hashlib.sha256(event.body.encode()).hexdigest() == event.hash
        assert event.prev_hash == ""


@contextmanager
def tampering_as_owner(table: str = "approvals_auditevent"):
    """An attacker with the table owner's rights: the append-only trigger (PostgreSQL)
    is switched off, so what is left to catch the forgery is the tree and its signed
    checkpoints."""
    from django.db import connection

    if connection.vendor != "postgresql":
        yield
        return

    def alter(action: str) -> None:
        with connection.cursor() as cursor:
            # ALTER TABLE refuses while deferred FK checks are pending: run them now.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(f"ALTER TABLE {table} {action} TRIGGER USER")
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")

    alter("DISABLE")
    try:
        yield
    finally:
        alter("ENABLE")


@pytest.fixture
def sealed_flow(make_plan, reviewer, second_reviewer, decide, sealer_key, settings):
    """A flow sealed in two checkpoints, so tampering has a checkpoint before and after."""
    settings.COUNTERSIGN_SEAL_BATCH = 6
    _a_whole_flow(make_plan, reviewer, second_reviewer, decide)
    audit_seal()
    assert AuditCheckpoint.objects.count() >= 2 and audit_verify().ok
    return list(AuditEvent.objects.order_by("id"))


def _sql(statement: str, params=()) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def test_editing_an_event_is_detected_at_its_position(sealed_flow):
    target = next(e for e in sealed_flow if e.kind == "plan.denied")
    position = sealed_flow.index(target)
    with tampering_as_owner():
        _sql(
            "UPDATE approvals_auditevent SET data = %s WHERE id = %s",
            ['{"from": "awaiting_approval", "to": "approved"}', target.id],
        )
    assert _problems() == [
        f"position {position}, event {target.id}: its fields differ from its bytes: edited"
    ]
    with pytest.raises(CommandError, match="NOT intact: 1 problems"):
        call_command("verify_audit")


@pytest.mark.parametrize("field", ["actor", "kind", "fingerprint", "at"])
def test_editing_any_field_is_detected(sealed_flow, field):
    target = sealed_flow[2]
    value = "2001-01-01T00:00:00+00:00" if field == "at" else "forged"
    with tampering_as_owner():
        _sql(f"UPDATE approvals_auditevent SET {field} = %s WHERE id = %s", [value, target.id])
    assert _problems() == [
        f"position 2, event {target.id}: its fields differ from its bytes: edited"
    ]


def test_deleting_an_event_is_detected_at_its_position(sealed_flow):
    victim = sealed_flow[len(sealed_flow) // 2]
    with tampering_as_owner():
        _sql("DELETE FROM approvals_auditevent WHERE id = %s", [victim.id])
    problems = _problems()
    assert problems[0] == (
        f"position {len(sealed_flow) // 2}, event {victim.id}: missing: deleted after it was sealed"
    )
    assert all("missing" in p or "do not give" in p for p in problems), problems


def test_deleting_the_newest_sealed_events_is_detected(sealed_flow):
    last = sealed_flow[-1]
    with tampering_as_owner():
        _sql("DELETE FROM approvals_auditevent WHERE id = %s", [last.id])
    assert f"event {last.id}: missing: deleted after it was sealed" in " ".join(_problems())


def test_swapping_two_events_is_detected_at_both_positions(sealed_flow):
    a, b = sealed_flow[1], sealed_flow[4]
    columns = "at, kind, actor, plan_id, fingerprint, data, prev_hash, body, hash"
    with tampering_as_owner():
        _sql(
            f"UPDATE approvals_auditevent AS e SET ({columns}) = "
            f"(SELECT {columns} FROM approvals_auditevent o WHERE o.id = "
            f"CASE e.id WHEN %s THEN %s ELSE %s END) WHERE e.id IN (%s, %s)",
            [a.id, b.id, a.id, a.id, b.id],
        )
    assert _problems() == [
        f"position 1, event {a.id}: its bytes name event {b.id}: moved or copied here",
        f"position 4, event {b.id}: its bytes name event {a.id}: moved or copied here",
    ]


def test_a_forged_event_in_an_unused_number_is_detected(db, reviewer, sealer_key):
    """A number rolled back before sealing is recorded as unused: an event that appears
    there later, bytes and hash forged to match, was inserted."""
    with transaction.atomic():
        audit_record(kind="test.one", actor="tester")
    with pytest.raises(RuntimeError), transaction.atomic():
        audit_record(kind="test.rolled_back", actor="tester")
        raise RuntimeError
    with transaction.atomic():
        audit_record(kind="test.two", actor="tester")
    audit_seal()
    one, two = AuditEvent.objects.order_by("id")
    assert two.id == one.id + 2
    (checkpoint,) = AuditCheckpoint.objects.all()
    assert [one.id + 1, one.id + 1] in checkpoint.gaps
    assert audit_verify().ok
    forged_id = one.id + 1
    body = event_bytes(
        seq=forged_id,
        at=one.at.isoformat(),
        kind="approval.recorded",
        actor=f"user:{reviewer.username}",
        plan_id="",
        fingerprint="",
        data={},
    )
    AuditEvent.objects.create(
        id=forged_id,
        at=one.at,
        kind="approval.recorded",
        actor=f"user:{reviewer.username}",
        body=body.decode(),
        hash=hashlib.sha256(body).hexdigest(),
    )
    assert _problems() == [
        f"position 1, event {forged_id}: "
        "inserted: its number was recorded as unused when it was sealed"
    ]


def test_a_consistent_rewrite_is_caught_by_the_checkpoint(sealed_flow):
    """A forger who rewrites an event's fields, bytes and hash alike still changes the
    tree: the checkpoint covering it no longer verifies."""
    target = sealed_flow[2]
    body = json.loads(target.body)
    body["data"] = {**body["data"], "forged": True}
    forged = event_bytes(
        seq=target.id,
        at=body["at"],
        kind=body["kind"],
        actor=body["actor"],
        plan_id=body["plan"],
        fingerprint=body["fingerprint"],
        data=body["data"],
    )
    with tampering_as_owner():
        _sql(
            "UPDATE approvals_auditevent SET data = %s, body = %s, hash = %s WHERE id = %s",
            [
                json.dumps(body["data"]),
                forged.decode(),
                hashlib.sha256(forged).hexdigest(),
                target.id,
            ],
        )
    first = AuditCheckpoint.objects.order_by("tree_size").first()
    assert _problems() == [
        f"the events from position 0 to {first.tree_size - 1} do not give checkpoint "
        f"{first.tree_size}'s root: one of them was rewritten"
    ]


def test_a_checkpoint_with_a_bad_signature_is_reported(sealed_flow):
    first = AuditCheckpoint.objects.order_by("tree_size").first()
    with tampering_as_owner("lib_auditcheckpoint"):
        _sql(
            "UPDATE lib_auditcheckpoint SET at = at + interval '1 second' WHERE id = %s",
            [first.id],
        )
    assert f"checkpoint {first.tree_size}: the signature does not verify" in _problems()


def test_a_checkpoint_inconsistent_with_the_one_before_is_reported(sealed_flow, sealer_key):
    """Even signed by the right key, a checkpoint whose root does not extend the previous
    one (the history before it was rewritten and sealed again) is reported."""
    first, second = AuditCheckpoint.objects.order_by("tree_size")[:2]
    forged_root = "ab" * 32
    cp = checkpoint_json(second)
    cp["root_hash"] = forged_root
    signature = base64.b64encode(signing_key().sign(checkpoint_note(cp)).signature).decode()
    with tampering_as_owner("lib_auditcheckpoint"):
        _sql(
            "UPDATE lib_auditcheckpoint SET root_hash = %s, signature = %s WHERE id = %s",
            [forged_root, signature, second.id],
        )
    problems = _problems()
    assert (
        f"checkpoint {second.tree_size}: not consistent with checkpoint {first.tree_size} "
        "(the log before it was rewritten)"
    ) in problems


def test_rewriting_events_and_checkpoints_together_is_caught_by_the_copy(
    sealed_flow, tmp_path, settings
):
    """The database's owner rewrites an event, removes the checkpoints and lets the
    sealer sign the rewritten history again: the database alone now verifies, the copy
    of the checkpoints exported before does not agree with it."""
    export = tmp_path / "checkpoints.jsonl"
    call_command("verify_audit", "--export", str(export))
    assert verify_export(export, verify_keys()).ok
    target = sealed_flow[1]
    body = json.loads(target.body)
    forged = event_bytes(
        seq=target.id,
        at=body["at"],
        kind=body["kind"],
        actor="user:someone-else",
        plan_id=body["plan"],
        fingerprint=body["fingerprint"],
        data=body["data"],
    )
    with tampering_as_owner(), tampering_as_owner("lib_auditcheckpoint"):
        _sql(
            "UPDATE approvals_auditevent SET actor = %s, body = %s, hash = %s WHERE id = %s",
            ["user:someone-else", forged.decode(), hashlib.sha256(forged).hexdigest(), target.id],
        )
        _sql("DELETE FROM lib_auditcheckpoint")
    audit_seal()
    assert audit_verify().ok  # the database agrees with itself
    problems = [str(p) for p in audit_verify(copy=read_export(export)).problems]
    first = read_export(export)[0]["tree_size"]
    assert f"checkpoint {first} differs from the copy (rewritten in the database)" in problems
    with pytest.raises(CommandError, match="NOT intact"):
        call_command("verify_audit", "--copy", str(export))


def test_an_export_verifies_offline_and_its_tampering_is_reported(sealed_flow, tmp_path):
    export = tmp_path / "checkpoints.jsonl"
    call_command("verify_audit", "--export", str(export))
    call_command("verify_audit", "--offline", str(export))
    lines = export.read_text().splitlines()
    assert len(lines) >= 2
    first = json.loads(lines[0])
    second = json.loads(lines[1])

    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join([json.dumps({**first, "root_hash": "00" * 32}), *lines[1:]]))
    problems = [str(p) for p in verify_export(edited, verify_keys()).problems]
    assert f"checkpoint {first['tree_size']}: the signature does not verify" in problems

    removed = tmp_path / "removed.jsonl"
    removed.write_text("\n".join(lines[1:]))
    problems = [str(p) for p in verify_export(removed, verify_keys()).problems]
    assert problems == [
        f"checkpoint {second['tree_size']}: extends size {first['tree_size']}, "
        "but the checkpoint before it has size 0 (one is missing)"
    ]
    with pytest.raises(CommandError, match="NOT intact"):
        call_command("verify_audit", "--offline", str(removed))
