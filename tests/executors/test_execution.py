"""The executor, in-process: claim, check, revalidate (guarantee 3), send once (guarantee 5),
classify, record without secrets (guarantees 6 and 7), and the sweeper."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import httpx
import pytest
from django.core import serializers
from django.utils import timezone

from actions.connectors.http.outcomes import classify
from actions.lib.dispatch import EXECUTE_PLAN, RECONCILE, task_of
from actions.lib.models import AuditEvent
from actions.lib.redaction import REDACTED
from actions.models import Action, Connector, Credential
from approvals.models import Approval, Attempt, Plan, PlanStatus
from approvals.wakeups import is_wakeup
from executors.services import _claim, execution_run
from executors.sweeper import sweep
from tests.conftest import READ_TOKEN, WRITE_TOKEN

REMINDER = {
    "customer_id": "cus-77",
    "channel": "sms",
    "send_at": "2030-01-02T09:00:00Z",
    "message": "Your invoice is due.",
}
NEW_CONTACT = {
    "contact_id": "c-2000",
    "name": "Katherine Johnson",
    "email": "kj@example.test",
    "workspace": "ws-red",
}


def fresh(plan) -> Plan:
    return Plan.objects.get(pk=plan.pk)


def attempt_of(plan) -> Attempt:
    return Attempt.objects.get(plan_id=plan.pk)


# --- the happy path, once ----------------------------------------------------------------------


def test_it_writes_once_with_if_match_and_the_write_token(upstream, approved, run, executor_key):
    plan = approved()
    assert upstream.writes() == []
    assert run(plan) == PlanStatus.COMPLETED

    writes = upstream.writes()
    assert len(writes) == 1
    write = writes[0]
    assert write["method"] == "PATCH"
    assert write["path"] == "/contacts/c-1001"
    assert write["headers"]["if-match"] == plan.precondition["expected"]
    assert write["headers"]["authorization"] == f"Bearer {WRITE_TOKEN}"
    assert write["headers"]["content-type"] == "application/merge-patch+json"
    assert write["body"] == {"email": "ada@new.example"}
    assert write["status"] == 200
    assert upstream.state()["contacts"]["c-1001"]["email"] == "ada@new.example"
    # The revalidation read used the read token, never the write token.
    reads = [e for e in upstream.requests_log() if e["method"] == "GET"]
    assert reads and all(e["headers"]["authorization"] == f"Bearer {READ_TOKEN}" for e in reads)

    plan = fresh(plan)
    assert plan.status == PlanStatus.COMPLETED
    assert plan.upstream_status == 200
    assert plan.finished_at is not None
    attempt = attempt_of(plan)
    assert attempt.state == Attempt.State.ANSWERED
    assert attempt.response_status == 200
    assert attempt.sent_at is not None and attempt.tries == 1
    assert attempt.revalidation["version"] == plan.precondition["expected"]
    assert Approval.objects.get(plan=plan).used_at is not None
    kinds = list(AuditEvent.objects.filter(plan=plan).values_list("kind", flat=True))
    assert kinds[-2:] == ["execution.claimed", "execution.completed"]


def test_running_again_writes_nothing(upstream, approved, run, executor_key):
    plan = approved()
    assert run(plan) == PlanStatus.COMPLETED
    assert run(plan) == "skipped:completed"
    assert run(plan) == "skipped:completed"
    assert len(upstream.writes()) == 1
    assert Attempt.objects.filter(plan=plan).count() == 1


def test_an_unapproved_plan_is_never_run(upstream, make_plan, run, executor_key):
    plan = make_plan()
    assert run(plan) == "skipped:awaiting_approval"
    assert upstream.requests_log()[1:] == []  # only the preview's read
    assert not Attempt.objects.exists()


def test_a_missing_plan_is_skipped(db, executor_key):
    import uuid

    assert execution_run(plan_id=uuid.uuid4()) == "skipped:missing"


# --- guarantee 3: revalidate right before writing ---------------------------------------------


def test_a_target_changed_after_approval_is_stale(upstream, approved, run, executor_key):
    plan = approved()
    upstream.mutate("/contacts/c-1001", {"phone": "+1 555 0100"})
    assert run(plan) == PlanStatus.STALE
    assert upstream.writes() == []
    attempt = attempt_of(plan)
    assert attempt.state == Attempt.State.NOT_SENT
    assert attempt.sent_at is None
    assert attempt.revalidation["version"] != plan.precondition["expected"]
    plan = fresh(plan)
    assert "nothing was written" in plan.outcome_detail
    assert upstream.state()["contacts"]["c-1001"]["email"] == "ada@example.test"


def test_a_deleted_target_is_stale(upstream, approved, run, executor_key):
    plan = approved("replace_note", {"note_id": "n-1", "title": "T", "body": "B"})
    upstream.mutate("/notes/n-1", {"body": "someone else's edit"})
    assert run(plan) == PlanStatus.STALE
    assert upstream.writes() == []


def test_an_invoice_revision_moved_on_is_stale(upstream, approved, run, executor_key):
    plan = approved("update_invoice_memo", {"invoice_id": "inv-2001", "memo": "hi"})
    upstream.mutate("/invoices/inv-2001", {"memo": "changed"})
    assert run(plan) == PlanStatus.STALE
    assert upstream.writes() == []


def test_a_contact_created_meanwhile_is_stale(upstream, approved, run, executor_key):
    plan = approved("create_contact", NEW_CONTACT)
    # Someone else creates the same id upstream after the approval.
    created = httpx.put(
        upstream.url + "/contacts/c-2000",
        json={"name": "Someone Else", "email": "else@example.test", "workspace": "ws-blue"},
        headers={"Authorization": f"Bearer {WRITE_TOKEN}", "If-None-Match": "*"},
    )
    assert created.status_code == 201
    before = len(upstream.writes())
    assert run(plan) == PlanStatus.STALE
    assert len(upstream.writes()) == before
    assert upstream.state()["contacts"]["c-2000"]["name"] == "Someone Else"


def test_a_412_after_the_target_changed_is_stale(upstream, approved, run, executor_key):
    plan = approved()
    # The upstream applies someone's change and refuses ours: the re-read sees it moved.
    upstream.add_fault(method="PATCH", status=412, apply=True)
    assert run(plan) == PlanStatus.STALE
    assert "the target changed" in fresh(plan).outcome_detail
    assert fresh(plan).upstream_status == 412
    assert attempt_of(plan).state == Attempt.State.ANSWERED


def test_a_412_while_the_target_is_unchanged_is_not_called_a_change(
    upstream, approved, run, executor_key
):
    """An upstream that refuses the validator for another reason (a weak tag, broken
    If-Match support) while the target is as previewed: rejected, never "changed"."""
    plan = approved()
    before = upstream.state()["contacts"]["c-1001"]
    upstream.add_fault(method="PATCH", status=412)
    assert run(plan) == PlanStatus.REJECTED
    detail = fresh(plan).outcome_detail
    assert "unchanged" in detail and "changed:" not in detail
    assert fresh(plan).upstream_status == 412
    assert [w["method"] for w in upstream.writes()] == ["PATCH"]
    assert upstream.state()["contacts"]["c-1001"] == before


def test_a_409_from_the_upstream_is_rejected(upstream, approved, run, executor_key):
    plan = approved()
    upstream.add_fault(method="PATCH", status=409)
    assert run(plan) == PlanStatus.REJECTED
    plan = fresh(plan)
    assert plan.upstream_status == 409
    assert "injected fault" not in plan.outcome_detail  # raw upstream text stays internal
    assert "injected fault" in attempt_of(plan).response_body


def test_create_writes_with_if_none_match(upstream, approved, run, executor_key):
    plan = approved("create_contact", NEW_CONTACT)
    assert run(plan) == PlanStatus.COMPLETED
    [write] = upstream.writes()
    assert write["method"] == "PUT"
    assert write["headers"]["if-none-match"] == "*"
    assert upstream.state()["contacts"]["c-2000"]["name"] == "Katherine Johnson"
    # The upstream adds its own fields (a version); the fields the plan set are as planned.
    assert set(upstream.state()["contacts"]["c-2000"]) - set(plan.after) == {"version"}
    plan = fresh(plan)
    assert plan.verified is True, plan.outcome_detail


def test_delete_needs_both_approvals_then_writes_once(upstream, approved, run, executor_key):
    plan = approved("delete_contact", {"contact_id": "c-1003"})
    assert run(plan) == PlanStatus.COMPLETED
    [write] = upstream.writes()
    assert write["method"] == "DELETE"
    assert write["status"] == 204
    assert "c-1003" not in upstream.state()["contacts"]
    assert Approval.objects.filter(plan=plan, used_at__isnull=False).count() == 2


def test_the_invoice_memo_carries_the_expected_revision(upstream, approved, run, executor_key):
    plan = approved("update_invoice_memo", {"invoice_id": "inv-2001", "memo": "hi"})
    assert run(plan) == PlanStatus.COMPLETED
    [write] = upstream.writes()
    assert write["body"] == {"memo": "hi", "expected_revision": 3}
    assert upstream.state()["invoices"]["inv-2001"]["revision"] == 4


def test_a_domain_refusal_inside_a_200_is_rejected(upstream, approved, run, executor_key):
    """The demo upstream refuses to change a paid invoice with 200 {"ok": false}."""
    plan = approved("update_invoice_memo", {"invoice_id": "inv-2002", "memo": "hi"})
    assert run(plan) == PlanStatus.REJECTED
    assert len(upstream.writes()) == 1
    plan = fresh(plan)
    assert plan.upstream_status == 200
    assert "invoice is paid" not in plan.outcome_detail
    assert upstream.state()["invoices"]["inv-2002"]["memo"] == ""


def test_a_202_is_pending(upstream, approved, run, executor_key):
    plan = approved("start_deployment", {"service": "api", "version": "v1.2.3"})
    assert run(plan) == PlanStatus.PENDING
    assert fresh(plan).outcome_detail.startswith("accepted")


# --- refusals before sending --------------------------------------------------------------------


def test_an_expired_approval_is_refused(upstream, approved, run, executor_key):
    plan = approved()
    Approval.objects.filter(plan=plan).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert run(plan) == "skipped:refused"
    assert upstream.writes() == []
    plan = fresh(plan)
    assert plan.status == PlanStatus.REFUSED
    assert "no valid approval" in plan.outcome_detail
    assert not Attempt.objects.filter(plan=plan).exists()
    assert AuditEvent.objects.filter(plan=plan, kind="execution.refused").exists()


def test_a_used_approval_is_refused(upstream, approved, run, executor_key):
    plan = approved()
    Approval.objects.filter(plan=plan).update(used_at=timezone.now())
    assert run(plan) == "skipped:refused"
    assert upstream.writes() == []


def test_an_approval_for_another_fingerprint_is_refused(upstream, approved, run, executor_key):
    plan = approved()
    Approval.objects.filter(plan=plan).update(fingerprint="0" * 64)
    assert run(plan) == "skipped:refused"
    assert upstream.writes() == []


def test_a_plan_tampered_after_approval_is_refused(upstream, approved, run, executor_key):
    plan = approved()
    Plan.objects.filter(pk=plan.pk).update(
        write_request={**plan.write_request, "body": {"email": "mallory@evil.example"}}
    )
    assert run(plan) == "skipped:refused"
    assert upstream.writes() == []
    assert "fingerprint" in fresh(plan).outcome_detail


def test_an_action_redefined_after_approval_is_refused(upstream, approved, run, executor_key):
    plan = approved()
    action = Action.objects.get(pk=plan.action_id)
    Action.objects.filter(pk=action.pk).update(version=action.version + 1, digest="1" * 64)
    assert run(plan) == "skipped:refused"
    assert upstream.writes() == []


def test_an_action_definition_edited_in_place_is_refused(upstream, approved, run, executor_key):
    plan = approved()
    # Point the revalidation read elsewhere, keeping version and digest: refused.
    action = Action.objects.get(pk=plan.action_id)
    definition = {**action.definition, "read": {"path": "/contacts/c-1002"}}
    Action.objects.filter(pk=action.pk).update(definition=definition)
    assert run(plan) == "skipped:refused"
    assert upstream.writes() == []


def test_one_approval_cannot_run_a_two_approver_plan(
    upstream, approved, run, executor_key, second_reviewer
):
    plan = approved("delete_contact", {"contact_id": "c-1003"})
    Approval.objects.filter(plan=plan, reviewer=second_reviewer).delete()
    Plan.objects.filter(pk=plan.pk).update(approvals_required=1)
    assert run(plan) == "skipped:refused"
    assert upstream.writes() == []
    assert "c-1003" in upstream.state()["contacts"]


def test_a_moved_connector_is_refused(upstream, approved, run, executor_key):
    plan = approved()
    Connector.objects.filter(name="demo").update(base_url="http://127.0.0.1:9")
    assert run(plan) == "skipped:refused"
    assert upstream.requests_log()[1:] == []


def test_a_revoked_write_credential_is_refused(upstream, approved, run, executor_key):
    plan = approved()
    Credential.objects.filter(role="write").update(revoked_at=timezone.now())
    assert run(plan) == "skipped:refused"
    assert upstream.writes() == []


def test_the_web_process_cannot_execute(upstream, approved, run, settings):
    """Without the worker's private key the write secret does not open: nothing is sent."""
    assert not settings.COUNTERSIGN_WORKER_KEY_FILE
    plan = approved()
    assert run(plan) == PlanStatus.REFUSED
    assert upstream.writes() == []
    plan = fresh(plan)
    assert plan.status == PlanStatus.REFUSED
    assert "write credential cannot be opened" in plan.outcome_detail
    assert attempt_of(plan).state == Attempt.State.NOT_SENT


# --- unknown outcomes -----------------------------------------------------------------------------


def test_a_503_after_applying_is_unknown(upstream, approved, run, executor_key):
    plan = approved()
    upstream.add_fault(method="PATCH", status=503, apply=True)
    assert run(plan) == PlanStatus.UNKNOWN
    assert len(upstream.writes()) == 1
    # It did apply: exactly why the gateway must not claim either way.
    assert upstream.state()["contacts"]["c-1001"]["email"] == "ada@new.example"
    plan = fresh(plan)
    assert plan.upstream_status == 503
    assert "may or may not" in plan.outcome_detail
    assert run(plan) == "skipped:unknown"
    assert len(upstream.writes()) == 1


def test_a_timeout_after_sending_is_unknown(upstream, approved, run, executor_key):
    plan = approved()
    Connector.objects.filter(name="demo").update(read_timeout=0.3)
    upstream.add_fault(method="PATCH", delay=1.0)
    assert run(plan) == PlanStatus.UNKNOWN
    attempt = attempt_of(plan)
    assert attempt.state == Attempt.State.LOST
    assert attempt.sent_at is not None
    assert len(upstream.writes()) == 1
    assert run(plan) == "skipped:unknown"
    assert len(upstream.writes()) == 1
    # The upstream applies the write once its delay is over: "unknown" was the honest
    # answer. (Waiting also keeps the late write from landing in the next test.)
    deadline = time.monotonic() + 5
    while upstream.writes()[0]["status"] is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.writes()[0]["status"] == 200
    assert upstream.state()["contacts"]["c-1001"]["email"] == "ada@new.example"


def test_a_dropped_connection_after_sending_is_unknown(upstream, approved, run, executor_key):
    plan = approved()
    upstream.add_fault(method="PATCH", close=True, apply=True)
    assert run(plan) == PlanStatus.UNKNOWN
    assert attempt_of(plan).state == Attempt.State.LOST


def test_an_unreadable_target_defers_without_sending(
    upstream, approved, executor_key, django_capture_on_commit_callbacks
):
    plan = approved()
    upstream.add_fault(method="GET", status=500)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert execution_run(plan_id=plan.id) == "deferred"
    assert len([c for c in callbacks if not is_wakeup(c)]) == 1  # a retry, after commit
    assert upstream.writes() == []
    assert fresh(plan).status == PlanStatus.APPROVED
    assert attempt_of(plan).state == Attempt.State.NOT_SENT
    assert Approval.objects.get(plan=plan).used_at is None
    # The retry runs once, with the same attempt and idempotency key.
    key = attempt_of(plan).idempotency_key
    with django_capture_on_commit_callbacks(execute=False):
        assert execution_run(plan_id=plan.id) == PlanStatus.COMPLETED
    assert len(upstream.writes()) == 1
    assert attempt_of(plan).idempotency_key == key
    assert attempt_of(plan).tries == 2


def test_unsent_retries_give_up(upstream, approved, run, executor_key):
    plan = approved()
    upstream.add_fault(method="GET", status=500, times=3)
    assert [run(plan) for _ in range(3)] == ["deferred", "deferred", PlanStatus.REFUSED]
    assert upstream.writes() == []
    assert "nothing was written" in fresh(plan).outcome_detail


# --- idempotency keys and what is recorded ------------------------------------------------------


def test_invoke_sends_the_attempts_idempotency_key(upstream, approved, run, executor_key):
    plan = approved("send_reminder", REMINDER)
    assert run(plan) == PlanStatus.COMPLETED
    [write] = upstream.writes()
    attempt = attempt_of(plan)
    assert len(attempt.idempotency_key) >= 32
    assert write["headers"]["idempotency-key"] == attempt.idempotency_key
    assert attempt.request["headers"]["Idempotency-Key"] == attempt.idempotency_key
    assert write["body"] == REMINDER


def test_the_recorded_request_is_redacted_and_secrets_are_nowhere(
    upstream, approved, run, executor_key
):
    plan = approved()
    upstream.add_fault(method="PATCH", status=409)  # an error answer is stored too
    assert run(plan) == PlanStatus.REJECTED
    attempt = attempt_of(plan)
    assert attempt.request["headers"]["Authorization"] == REDACTED
    assert attempt.request["headers"]["If-Match"] == plan.precondition["expected"]
    assert attempt.request["method"] == "PATCH"
    assert attempt.request["body"] == {"email": "ada@new.example"}

    rows = serializers.serialize(
        "json",
        [
            *Attempt.objects.all(),
            *AuditEvent.objects.all(),
            *Plan.objects.all(),
            *Approval.objects.all(),
        ],
    )
    assert WRITE_TOKEN not in rows
    assert READ_TOKEN not in rows


def test_a_secret_echoed_by_the_upstream_is_redacted(upstream, approved, run, executor_key):
    """An upstream that reflects the request (as some error pages do) must not make the
    attempt record a copy of the write token."""
    from executors.services import redact_text

    assert redact_text(f"bad token {WRITE_TOKEN}!", [WRITE_TOKEN]) == f"bad token {REDACTED}!"


@pytest.mark.parametrize(
    "status, state",
    [
        (200, "completed"),
        (201, "completed"),
        (204, "completed"),
        (202, "pending"),
        (412, "stale"),
        (428, "rejected"),
        (401, "rejected"),
        (403, "rejected"),
        (409, "rejected"),
        (422, "rejected"),
        (429, "rejected"),
        (500, "unknown"),
        (502, "unknown"),
        (503, "unknown"),
        (504, "unknown"),
    ],
)
def test_classify(status, state):
    assert classify(status)[0] == state


# --- the sweeper ------------------------------------------------------------------------------


def test_sweep_requeues_approved_plans_whose_message_was_lost(
    upstream, approved, settings, django_capture_on_commit_callbacks
):
    plan = approved()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        report = sweep()
    assert report["requeued"] == 0 and callbacks == []

    later = timezone.now() + timedelta(seconds=settings.COUNTERSIGN_REQUEUE_AFTER_SECONDS + 1)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        report = sweep(now=later)
    assert report["requeued"] == 1
    assert len([c for c in callbacks if not is_wakeup(c)]) == 1
    assert fresh(plan).enqueued_at == later
    assert fresh(plan).status == PlanStatus.APPROVED


def test_sweep_requeue_publishes_the_plan_id(
    upstream, approved, settings, monkeypatch, django_capture_on_commit_callbacks
):
    published = []
    monkeypatch.setattr(
        "actions.lib.dispatch.publish",
        lambda name, plan_id, countdown=None: published.append((name, plan_id)),
    )
    plan = approved()
    later = timezone.now() + timedelta(seconds=settings.COUNTERSIGN_REQUEUE_AFTER_SECONDS + 1)
    with django_capture_on_commit_callbacks(execute=True):
        sweep(now=later)
    assert published == [(EXECUTE_PLAN, plan.id)]


def _claimed(plan) -> Plan:
    """What a worker that died right after claiming leaves behind."""
    claim = _claim(plan.id)
    assert claim is not None
    return fresh(plan)


def _past_lease(settings):
    return timezone.now() + timedelta(seconds=settings.COUNTERSIGN_EXECUTION_LEASE_SECONDS + 1)


def test_sweep_settles_a_lost_worker_that_may_have_sent_as_unknown(
    upstream, approved, settings, django_capture_on_commit_callbacks, executor_key
):
    plan = _claimed(approved())
    Attempt.objects.filter(plan=plan).update(
        state=Attempt.State.SENDING, sent_at=timezone.now(), sends=1
    )
    with django_capture_on_commit_callbacks(execute=False):
        assert sweep()["unknown"] == 0  # still within its lease
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        report = sweep(now=_past_lease(settings))
    assert report["unknown"] == 1
    # Never sent again: the only follow-up is a reconciliation (a read), not an execution.
    assert [task_of(c) for c in callbacks if not is_wakeup(c)] == [RECONCILE]
    assert fresh(plan).status == PlanStatus.UNKNOWN
    assert attempt_of(plan).state == Attempt.State.LOST
    assert execution_run(plan_id=plan.id) == "skipped:unknown"
    assert upstream.writes() == []


def test_sweep_returns_a_plan_that_sent_nothing_to_approved(
    upstream, approved, settings, django_capture_on_commit_callbacks, executor_key
):
    plan = _claimed(approved())
    assert attempt_of(plan).state == Attempt.State.PREPARED
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        report = sweep(now=_past_lease(settings))
    assert report["recovered"] == 1
    assert len([c for c in callbacks if not is_wakeup(c)]) == 1
    assert fresh(plan).status == PlanStatus.APPROVED
    assert attempt_of(plan).state == Attempt.State.NOT_SENT
    assert Approval.objects.get(plan=plan).used_at is None
    # The recovered plan then runs, once.
    with django_capture_on_commit_callbacks(execute=False):
        assert execution_run(plan_id=plan.id) == PlanStatus.COMPLETED
        assert execution_run(plan_id=plan.id) == "skipped:completed"
    assert len(upstream.writes()) == 1


def test_sweep_expires_awaiting_plans(upstream, make_plan, django_capture_on_commit_callbacks):
    plan = make_plan()
    with django_capture_on_commit_callbacks(execute=False):
        report = sweep(now=plan.expires_at + timedelta(seconds=1))
    assert report["expired"] == 1
    assert fresh(plan).status == PlanStatus.EXPIRED


def test_the_sweep_command(upstream, approved, django_capture_on_commit_callbacks):
    from io import StringIO

    from django.core.management import call_command

    approved()
    out = StringIO()
    with django_capture_on_commit_callbacks(execute=False):
        call_command("sweep", stdout=out)
    assert "requeued=0" in out.getvalue()


def test_the_write_token_is_not_in_the_recorded_json(upstream, approved, run, executor_key):
    plan = approved("send_reminder", REMINDER)
    run(plan)
    assert WRITE_TOKEN not in json.dumps(attempt_of(plan).request)
    assert WRITE_TOKEN not in attempt_of(plan).response_body


def test_sweep_recovers_a_worker_lost_between_sending_and_the_first_send(
    upstream, approved, settings, django_capture_on_commit_callbacks, executor_key
):
    """ "sending" committed but no send recorded: the request provably never left."""
    plan = _claimed(approved())
    Attempt.objects.filter(plan=plan).update(state=Attempt.State.SENDING, sent_at=timezone.now())
    with django_capture_on_commit_callbacks(execute=False):
        report = sweep(now=_past_lease(settings))
    assert report["recovered"] == 1 and report["unknown"] == 0
    assert fresh(plan).status == PlanStatus.APPROVED
    assert attempt_of(plan).state == Attempt.State.NOT_SENT
    assert upstream.writes() == []
