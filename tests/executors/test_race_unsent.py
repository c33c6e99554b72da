"""Regression: a worker killed after committing "sending" but before recording its first
send (sends=0: the request provably never left) must not leave the plan unknown for ever."""

from approvals.models import Attempt
from approvals.services import approval_record, plan_submit
from executors import reconciliation, services, sweeper


def test_killed_between_fencing_and_the_first_send(
    transactional_db, catalog, agent, reviewer, upstream, executor_key, settings, monkeypatch
):
    monkeypatch.setattr("actions.lib.dispatch.publish", lambda *a, **k: None)
    plan, _ = plan_submit(
        agent=agent,
        action_name="send_reminder",
        input={
            "customer_id": "cus-1",
            "channel": "email",
            "send_at": "2030-01-01T09:00:00Z",
            "message": "hello",
        },
    )
    approval_record(
        plan_id=plan.id, reviewer=reviewer, decision="approve", fingerprint_seen=plan.fingerprint
    )
    claim = services._claim(plan.id)
    # The fencing commit, then SIGKILL before `update(sends=1)` and before the request.
    Attempt.objects.filter(pk=claim.attempt.pk).update(state=Attempt.State.SENDING)
    settings.COUNTERSIGN_EXECUTION_LEASE_SECONDS = 0
    print("sweep:", sweeper.sweep())
    print("reconcile:", reconciliation.reconcile(plan_id=plan.id))
    attempt = Attempt.objects.get(pk=claim.attempt.pk)
    print("attempt:", attempt.state, "sends", attempt.sends, attempt.reconciliation)
    print("upstream writes:", len(upstream.writes()))
    assert type(plan).objects.get(pk=plan.pk).status != "unknown"
