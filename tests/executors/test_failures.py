"""Every failure path against the real fault-injecting upstream: the outcome state *and*
the upstream's own record of what it received (writes, idempotency keys)."""

from __future__ import annotations

import json
import time

import pytest
from django.core import serializers

from actions.connectors.http.outcomes import retry_after_seconds
from actions.lib.dispatch import RECONCILE, task_of
from actions.lib.models import AuditEvent
from actions.models import Credential
from approvals.models import Attempt, PlanStatus
from approvals.services import approval_revoke, plan_cancel, plan_resolve
from approvals.wakeups import is_wakeup
from executors.reconciliation import pending_follow, reconcile
from tests.conftest import WRITE_TOKEN
from tests.executors.test_execution import REMINDER, attempt_of, fresh

pytestmark = pytest.mark.usefixtures("executor_key")
EMAIL = {"contact_id": "c-1001", "email": "ada@new.example"}


@pytest.fixture(autouse=True)
def _no_real_sleep(monkeypatch):
    """Waits are recorded, not slept: the upstream's answers are what is under test."""
    waits: list[float] = []
    monkeypatch.setattr("executors.services._sleep", waits.append)
    return waits


def keys_seen(upstream, path_prefix: str) -> list[str | None]:
    return [
        w["headers"].get("idempotency-key")
        for w in upstream.writes()
        if w["path"].startswith(path_prefix)
    ]


def test_a_slow_upstream_within_the_timeout_completes(upstream, approved, run):
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", delay=0.2)
    plan = approved("update_contact_email", EMAIL)
    assert run(plan) == "completed"
    assert len(upstream.writes()) == 1


def test_commit_then_timeout_is_unknown_then_reconciled_as_applied(
    upstream, approved, run, connector_fast
):
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", delay=1.0, apply=True)
    plan = approved("update_contact_email", EMAIL)
    assert run(plan) == "unknown"
    assert attempt_of(plan).state == Attempt.State.LOST
    time.sleep(1.0)  # let the delayed write land before reading it back
    assert reconcile(plan_id=plan.id) == "completed"
    plan = fresh(plan)
    assert plan.outcome_detail == "reconciled: applied"
    assert len(upstream.writes()) == 1, "reconciliation reads; it never writes again"
    assert AuditEvent.objects.filter(plan=plan, kind="reconcile.settled").exists()


def test_a_dropped_connection_without_effect_is_reconciled_as_not_applied(upstream, approved, run):
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", close=True, apply=False)
    plan = approved("update_contact_email", EMAIL)
    assert run(plan) == "unknown"
    assert reconcile(plan_id=plan.id) == "rejected"
    assert fresh(plan).outcome_detail == "reconciled: not applied"
    assert upstream.state()["contacts"]["c-1001"]["email"] == "ada@example.test"
    assert len(upstream.writes()) == 1


def test_a_target_changed_by_someone_else_stays_unknown_for_a_person(
    upstream, approved, run, reviewer
):
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", close=True, apply=False)
    plan = approved("update_contact_email", EMAIL)
    run(plan)
    upstream.mutate("/contacts/c-1001", {"email": "someone@else.example"})
    assert reconcile(plan_id=plan.id) == "unknown"
    assert attempt_of(plan).reconciliation["verdict"] == "changed by someone else"
    plan = plan_resolve(
        plan_id=plan.id, reviewer=reviewer, state="rejected", note="checked the CRM"
    )
    assert plan.status == "rejected"
    event = AuditEvent.objects.get(plan=plan, kind="reconcile.resolved_by_person")
    assert event.data["note"] == "checked the CRM"


def test_429_with_retry_after_waits_and_resends_with_the_same_key(
    upstream, approved, run, _no_real_sleep
):
    upstream.add_fault(method="POST", path_prefix="/reminders", status=429, retry_after=3)
    plan = approved("send_reminder", REMINDER)
    assert run(plan) == "completed"
    assert _no_real_sleep == [3.0]
    keys = keys_seen(upstream, "/reminders")
    assert keys == [attempt_of(plan).idempotency_key] * 2
    assert len(upstream.state()["reminders"]) == 1
    assert attempt_of(plan).sends == 2


def test_429_without_idempotency_is_not_resent(upstream, approved, run, _no_real_sleep):
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", status=429, retry_after=1)
    plan = approved("update_contact_email", EMAIL)
    assert run(plan) == "rejected"
    assert _no_real_sleep == []
    assert len(upstream.writes()) == 1
    assert fresh(plan).outcome_detail == "the upstream is rate limiting; nothing was applied"


def test_429_asking_too_long_a_wait_is_not_waited_for(upstream, approved, run, _no_real_sleep):
    upstream.add_fault(method="POST", path_prefix="/reminders", status=429, retry_after=3600)
    plan = approved("send_reminder", REMINDER)
    assert run(plan) == "rejected"
    assert _no_real_sleep == []
    assert len(upstream.writes()) == 1


def test_202_is_pending_then_followed_to_completion(upstream, approved, run):
    plan = approved("start_deployment", {"service": "api", "version": "v1.2.3"})
    assert run(plan) == "pending"
    attempt = attempt_of(plan)
    assert attempt.status_path.startswith("/deployments/")
    results = [pending_follow(plan_id=plan.id) for _ in range(3)]
    assert results == ["following", "completed", "skipped:completed"]
    assert fresh(plan).outcome_detail == "the accepted work finished"
    assert len(upstream.writes()) == 1


def test_409_is_rejected_by_default(upstream, approved, run):
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", status=409)
    plan = approved("update_contact_email", EMAIL)
    assert run(plan) == "rejected"
    assert fresh(plan).outcome_detail == "the upstream reported a conflict"


def test_409_maps_to_already_in_desired_state_when_declared(upstream, catalog, approved, run):
    from actions.catalog import action_define

    definition = dict(catalog["update_contact_email"].definition)
    definition["write"] = {**definition["write"], "on_conflict": "already_in_desired_state"}
    action_define(name="update_contact_email", definition=definition, actor="test")
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", status=409)
    plan = approved("update_contact_email", EMAIL)
    assert run(plan) == "already_in_desired_state"


def test_412_is_stale_when_someone_changed_the_target_meanwhile(upstream, approved, run):
    """A real race: another writer changes the contact after the worker's re-read and
    before its PATCH arrives; the upstream's own If-Match check refuses ours."""
    import threading

    plan = approved("update_contact_email", EMAIL)
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", delay=0.5)
    meanwhile = threading.Timer(
        0.2, upstream.mutate, args=(f"/contacts/{EMAIL['contact_id']}", {"phone": "+1 555"})
    )
    meanwhile.start()
    assert run(plan) == "stale"
    meanwhile.join()
    assert "the target changed" in fresh(plan).outcome_detail
    assert len(upstream.writes()) == 1
    assert upstream.state()["contacts"][EMAIL["contact_id"]]["email"] != EMAIL["email"]


def test_500_without_idempotency_is_unknown_and_not_resent(upstream, approved, run):
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", status=500, apply=True)
    plan = approved("update_contact_email", EMAIL)
    assert run(plan) == "unknown"
    assert len(upstream.writes()) == 1
    assert reconcile(plan_id=plan.id) == "completed"


def test_500_with_idempotency_is_resent_with_the_same_key(upstream, approved, run):
    upstream.add_fault(method="POST", path_prefix="/reminders", status=500, apply=True)
    plan = approved("send_reminder", REMINDER)
    assert run(plan) == "completed"
    assert keys_seen(upstream, "/reminders") == [attempt_of(plan).idempotency_key] * 2
    assert len(upstream.state()["reminders"]) == 1, "the same key did not create a second one"


def test_unknown_invoke_is_reconciled_by_repeating_the_same_key(upstream, catalog, approved, run):
    from actions.catalog import action_define

    definition = dict(catalog["send_reminder"].definition)
    definition["write"] = {**definition["write"], "retry": {"max_retries": 0}}
    action_define(name="send_reminder", definition=definition, actor="test")
    upstream.add_fault(method="POST", path_prefix="/reminders", status=503, apply=True)
    plan = approved("send_reminder", REMINDER)
    assert run(plan) == "unknown"
    assert reconcile(plan_id=plan.id) == "completed"
    assert len(upstream.state()["reminders"]) == 1
    assert set(keys_seen(upstream, "/reminders")) == {attempt_of(plan).idempotency_key}


def test_401_stops_and_flags_the_credential(upstream, approved, run):
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", status=401)
    plan = approved("update_contact_email", EMAIL)
    assert run(plan) == "rejected"
    credential = Credential.objects.get(role="write", revoked_at__isnull=True)
    assert credential.flagged_at is not None
    assert "401" in credential.flag_reason
    assert len(upstream.writes()) == 1


def test_an_error_body_that_leaks_is_filtered_before_anyone_sees_it(
    upstream, approved, run, client, api_headers
):
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", status=400, body="echo")
    plan = approved("update_contact_email", EMAIL)
    assert run(plan) == "rejected"
    stored = attempt_of(plan).response_body
    assert WRITE_TOKEN not in stored
    assert "10.0.0.12" not in stored and "Traceback" not in stored and "handlers.py" not in stored
    everything = serializers.serialize("json", [*Attempt.objects.all(), *AuditEvent.objects.all()])
    assert WRITE_TOKEN not in everything
    seen = client.get(f"/api/v1/plans/{plan.id}", **api_headers).content.decode()
    assert WRITE_TOKEN not in seen and "10.0.0.12" not in seen and "internal error" not in seen
    assert json.loads(seen)["outcome"]["detail"] == "the upstream refused the request (400)"


def test_a_huge_error_body_is_bounded(upstream, approved, run):
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", status=500, body="huge")
    plan = approved("update_contact_email", EMAIL)
    assert run(plan) == "unknown"
    assert len(attempt_of(plan).response_body) < 5000


def test_cancel_after_approval_stops_the_write(upstream, approved, run, agent):
    plan = approved("update_contact_email", EMAIL)
    plan = plan_cancel(agent=agent, plan_id=plan.id)
    assert plan.status == PlanStatus.CANCELLED
    assert run(plan) == "skipped:cancelled"
    assert upstream.writes() == []


def test_a_reviewer_can_revoke_before_sending(
    upstream, approved, run, reviewer, client, api_headers
):
    plan = approved("update_contact_email", EMAIL)
    approval_revoke(plan_id=plan.id, reviewer=reviewer)
    assert run(plan) == "skipped:cancelled"
    assert upstream.writes() == []
    outcome = client.get(f"/api/v1/plans/{plan.id}", **api_headers).json()["outcome"]
    assert outcome["state"] == "cancelled" and outcome["request_sent"] is False


def test_cancelling_while_executing_is_refused_and_the_outcome_says_what_happened(
    upstream, approved, run, agent, client, api_headers
):
    from actions.lib.exceptions import InvalidTransition
    from executors.services import _claim

    plan = approved("update_contact_email", EMAIL)
    _claim(plan.id)
    with pytest.raises(InvalidTransition, match="may have been sent"):
        plan_cancel(agent=agent, plan_id=plan.id)
    Attempt.objects.filter(plan=plan).update(state=Attempt.State.LOST)
    from approvals.models import Plan

    Plan.objects.filter(pk=plan.pk).update(status="unknown")
    outcome = client.get(f"/api/v1/plans/{plan.id}", **api_headers).json()["outcome"]
    assert outcome["request_sent"] is None


@pytest.mark.parametrize(
    ("value", "expected"), [("3", 3.0), ("0.5", 0.5), ("-2", 0.0), ("soon", None), (None, None)]
)
def test_retry_after_is_parsed(value, expected):
    assert retry_after_seconds(value) == expected


def test_retry_after_accepts_an_http_date():
    from email.utils import format_datetime

    from django.utils import timezone

    when = format_datetime(
        timezone.now() + __import__("datetime").timedelta(seconds=20), usegmt=True
    )
    assert 15 <= retry_after_seconds(when) <= 21


@pytest.fixture
def connector_fast(catalog):
    from actions.models import Connector

    Connector.objects.filter(name="demo").update(read_timeout=0.3)


def test_checking_a_keyed_invoke_from_the_web_hands_it_to_a_worker(
    upstream, catalog, approved, run, settings, reviewer, django_capture_on_commit_callbacks
):
    """ "Check now" never runs the look in the web process, which cannot open the write
    credential: it is due now in the database and handed to a worker by name."""
    from actions.catalog import action_define
    from approvals.services import plan_check_request

    definition = dict(catalog["send_reminder"].definition)
    definition["write"] = {**definition["write"], "retry": {"max_retries": 0}}
    action_define(name="send_reminder", definition=definition, actor="test")
    upstream.add_fault(method="POST", path_prefix="/reminders", status=503, apply=True)
    plan = approved("send_reminder", REMINDER)
    assert run(plan) == "unknown"
    settings.COUNTERSIGN_WORKER_KEY_FILE = ""  # now we are the web process
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        plan_check_request(plan_id=plan.id, reviewer=reviewer)
    handed = [c for c in callbacks if not is_wakeup(c)]
    assert [task_of(c) for c in handed] == [RECONCILE]
    assert handed[0].args[1:] == (plan.id, "user:rita")
    assert len(upstream.writes()) == 1
    assert fresh(plan).status == "unknown"
    assert fresh(plan).next_check_at is not None
    assert AuditEvent.objects.filter(plan=plan, kind="reconcile.requested").exists()


def test_a_process_without_the_worker_key_never_repeats_a_keyed_request(
    upstream, catalog, approved, run, settings, django_capture_on_commit_callbacks
):
    """A look that lands in a process without the key (a misconfigured worker) finds
    nothing out and schedules the next look; it sends nothing."""
    from actions.catalog import action_define

    definition = dict(catalog["send_reminder"].definition)
    definition["write"] = {**definition["write"], "retry": {"max_retries": 0}}
    action_define(name="send_reminder", definition=definition, actor="test")
    upstream.add_fault(method="POST", path_prefix="/reminders", status=503, apply=True)
    plan = approved("send_reminder", REMINDER)
    assert run(plan) == "unknown"
    settings.COUNTERSIGN_WORKER_KEY_FILE = ""
    with django_capture_on_commit_callbacks(execute=False):
        assert reconcile(plan_id=plan.id) == "unknown"
    assert len(upstream.writes()) == 1
    assert "cannot be opened" in attempt_of(plan).reconciliation["verdict"]
