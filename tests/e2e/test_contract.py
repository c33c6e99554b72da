"""The core contract through the real API, web server, worker and upstream: the preview
never writes, an approval binds to the fingerprint shown, an approved plan is written once
and never again, and a target that changed after the approval is not written at all."""

from __future__ import annotations

import pytest

from actions.lib.models import AuditEvent
from approvals.models import Approval, Attempt
from tests.e2e.support import NEW_EMAIL, OLD_EMAIL, error_messages, eventually, header

pytestmark = pytest.mark.e2e


def test_preview_reads_with_the_read_credential_and_writes_nothing(agent_api, upstream):
    before = upstream.state()

    plan = agent_api.propose()

    assert plan["status"] == "awaiting_approval"
    assert upstream.writes() == []
    assert upstream.state() == before
    reads = upstream.requests_log()
    assert reads, "the preview did not read the target"
    assert {(e["method"], e["path"]) for e in reads} == {("GET", "/contacts/c-1001")}
    assert {header(e, "Authorization") for e in reads} == {f"Bearer {upstream.read_token}"}
    assert plan["preview"]["before"]["email"] == OLD_EMAIL
    assert plan["preview"]["after"]["email"] == NEW_EMAIL


def test_approval_with_a_fingerprint_never_shown_is_rejected(
    agent_api, rita, upstream, worker_logs
):
    plan = agent_api.propose()
    wrong = ("0" if plan["fingerprint"][0] != "0" else "1") + plan["fingerprint"][1:]

    page = rita.decide(plan["id"], "approve", fingerprint=wrong)

    assert any("does not match" in m for m in error_messages(page)), page
    assert agent_api.get(plan["id"])["status"] == "awaiting_approval"
    assert not Approval.objects.filter(plan_id=plan["id"]).exists()
    assert AuditEvent.objects.filter(
        plan_id=plan["id"], kind="approval.fingerprint_mismatch"
    ).exists()
    # Nothing may have been woken up: give a (wrongly) published task time to run.
    with pytest.raises(AssertionError):
        worker_logs.wait_finished(1, timeout=2)
    assert upstream.writes() == []
    assert agent_api.get(plan["id"])["status"] == "awaiting_approval"


def test_the_approved_plan_is_written_exactly_once(agent_api, rita, upstream):
    plan = agent_api.propose()

    page = rita.decide(plan["id"], "approve")
    assert error_messages(page) == []

    done = agent_api.wait_for(plan["id"])
    assert done["status"] == "completed", done
    assert done["outcome"]["state"] == "completed"
    writes = upstream.writes()
    assert len(writes) == 1
    (write,) = writes
    assert (write["method"], write["path"]) == ("PATCH", "/contacts/c-1001")
    assert write["body"] == {"email": NEW_EMAIL}
    assert header(write, "Authorization") == f"Bearer {upstream.write_token}"
    assert header(write, "If-Match") == plan["precondition"]["expected"]
    assert upstream.state()["contacts"]["c-1001"]["email"] == NEW_EMAIL


def test_a_completed_plan_is_never_executed_again(agent_api, rita, upstream, worker_logs):
    from actions.lib.dispatch import EXECUTE_PLAN, publish

    plan = agent_api.propose()
    form = rita.page(plan["id"])
    rita.decide(plan["id"], "approve", page=form)
    assert agent_api.wait_for(plan["id"])["status"] == "completed"
    assert worker_logs.wait_finished(1) == ["'completed'"]
    assert len(upstream.writes()) == 1

    # A redelivered wake-up goes through the real broker to the real worker...
    publish(EXECUTE_PLAN, plan["id"])
    assert worker_logs.wait_finished(2)[1] == "'skipped:completed'"
    # ...and the same approval form, posted again, is refused.
    page = rita.decide(plan["id"], "approve", page=form)
    assert any("can no longer be decided" in m for m in error_messages(page)), page

    assert len(upstream.writes()) == 1
    assert agent_api.get(plan["id"])["status"] == "completed"
    assert Attempt.objects.filter(plan_id=plan["id"]).count() == 1


def test_a_target_changed_after_the_approval_ends_stale_with_no_write(
    agent_api, upstream, approve_without_wakeup
):
    from actions.lib.dispatch import EXECUTE_PLAN, publish

    plan = agent_api.propose()
    approve_without_wakeup(plan)
    assert agent_api.get(plan["id"])["status"] == "approved"

    upstream.mutate("/contacts/c-1001", {"phone": "+1 555"})
    publish(EXECUTE_PLAN, plan["id"])

    done = agent_api.wait_for(plan["id"])
    assert done["status"] == "stale", done
    assert done["outcome"]["state"] == "stale"
    assert upstream.writes() == []
    assert upstream.state()["contacts"]["c-1001"]["email"] == OLD_EMAIL
    attempt = eventually(lambda: Attempt.objects.filter(plan_id=plan["id"]).first())
    assert attempt.state == Attempt.State.NOT_SENT
    assert attempt.sent_at is None
