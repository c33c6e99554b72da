"""A worker holding the upstream's answer while the database cannot be reached keeps it and
records it once the database is back; nothing is sent again, and a plan the sweeper
settled meanwhile (the lease ran out) is not recorded a second time.

The database of the suite cannot be stopped under the test, so its going away is the
error psycopg raises when the server closes the connection, raised by the first try at
recording (the e2e test tests/e2e/test_database_outage.py stops a real cluster)."""

from __future__ import annotations

import psycopg
import pytest
from django.db import OperationalError
from django.utils import timezone

from actions.lib.models import AuditEvent
from approvals.models import Attempt, Plan, PlanStatus
from executors import recording, services, sweeper


@pytest.fixture(autouse=True)
def _own_outage_monitor(monkeypatch):
    """An outage this test logs is its own: the process's monitor is left alone."""
    from actions.lib import outage

    monkeypatch.setattr(outage, "monitor", outage.Monitor(probe=lambda: True))


def _outage() -> OperationalError:
    error = OperationalError("server closed the connection unexpectedly")
    error.__cause__ = psycopg.OperationalError("server closed the connection unexpectedly")
    return error


@pytest.fixture
def first_record_fails(monkeypatch):
    """The first try at recording the answer meets an outage; ``before`` runs first."""
    real = services.attempt_transition
    state = {"failed": 0, "before": None, "waits": []}

    def attempt_transition(attempt, **kw):
        if not state["failed"]:
            state["failed"] += 1
            if state["before"]:
                state["before"]()
            raise _outage()
        return real(attempt, **kw)

    monkeypatch.setattr(services, "attempt_transition", attempt_transition)
    monkeypatch.setattr(recording, "_sleep", state["waits"].append)
    return state


def test_the_answer_is_recorded_once_the_database_is_back(
    transactional_db, approved, run, upstream, executor_key, first_record_fails
):
    plan = approved()
    assert run(plan) == PlanStatus.COMPLETED
    plan.refresh_from_db()
    assert plan.status == PlanStatus.COMPLETED and plan.verified
    assert plan.attempt.state == Attempt.State.ANSWERED
    assert first_record_fails["waits"] == [recording.RECORD_FIRST_WAIT]
    assert len([w for w in upstream.writes() if w["method"] == "PATCH"]) == 1
    assert AuditEvent.objects.filter(plan=plan, kind="execution.completed").count() == 1


def test_a_plan_the_sweeper_settled_meanwhile_is_not_recorded_again(
    transactional_db, approved, run, upstream, executor_key, first_record_fails, settings
):
    plan = approved()

    def lease_runs_out() -> None:
        settings.COUNTERSIGN_EXECUTION_LEASE_SECONDS = 0
        sweeper.sweep(now=timezone.now())

    first_record_fails["before"] = lease_runs_out
    assert run(plan) == "skipped:claim-lost"
    plan.refresh_from_db()
    assert plan.status == PlanStatus.UNKNOWN
    assert plan.attempt.state == Attempt.State.LOST
    kinds = list(AuditEvent.objects.filter(plan=plan).values_list("kind", flat=True))
    assert "execution.unknown" in kinds and "execution.completed" not in kinds
    assert len([w for w in upstream.writes() if w["method"] == "PATCH"]) == 1


def test_recording_gives_up_after_its_time(
    transactional_db, approved, run, upstream, executor_key, monkeypatch, settings
):
    """Still down after COUNTERSIGN_RECORD_RETRY_SECONDS: the error goes on, the plan stays
    executing for the lease and a reconciliation, and the backoff was bounded."""
    settings.COUNTERSIGN_RECORD_RETRY_SECONDS = 3
    waits: list[float] = []
    clock = {"now": 0.0}

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock["now"] += seconds

    monkeypatch.setattr(recording, "_sleep", sleep)
    monkeypatch.setattr(recording, "_clock", lambda: clock["now"])

    def down(attempt, **kw):
        raise _outage()

    monkeypatch.setattr(services, "attempt_transition", down)
    plan = approved()
    with pytest.raises(OperationalError):
        run(plan)
    assert waits == [0.25, 0.5, 1.0]
    assert Plan.objects.get(pk=plan.pk).status == PlanStatus.EXECUTING
    assert len([w for w in upstream.writes() if w["method"] == "PATCH"]) == 1
