"""Regression: the sweeper must decide on an attempt's state under the row lock. A worker
that is slow (not dead) and commits "sending" meanwhile must not have its attempt rewritten
to not_sent and its plan sent a second time."""

import threading
import time

import psycopg
from django.db import connection

from approvals.models import Attempt
from approvals.services import approval_record
from demo.processes import database_url
from executors import services, sweeper


def test_a_slow_worker_and_the_sweeper_send_twice(
    transactional_db, catalog, agent, reviewer, upstream, executor_key, settings, monkeypatch
):
    from approvals.services import plan_submit

    monkeypatch.setattr("actions.lib.dispatch.publish", lambda *a, **k: None)
    plan, _ = plan_submit(
        agent=agent, action_name="start_deployment", input={"service": "api", "version": "v1.2.3"}
    )
    approval_record(
        plan_id=plan.id, reviewer=reviewer, decision="approve", fingerprint_seen=plan.fingerprint
    )
    settings.COUNTERSIGN_EXECUTION_LEASE_SECONDS = 0  # the worker is past its lease
    upstream.add_fault(method="POST", path_prefix="/deployments", times=1, delay=1.0)

    claimed, sweeper_read, swept = threading.Event(), threading.Event(), threading.Event()
    revalidate = services._revalidate
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (sweeper_pid,) = cursor.fetchone()

    def sweeper_waits_for_a_lock() -> bool:
        """The sweeper (this test's main thread) waits for a lock the worker holds."""
        with psycopg.connect(database_url(connection.settings_dict), autocommit=True) as other:
            return bool(
                other.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
                    [sweeper_pid],
                ).fetchone()
            )

    def slow_revalidate(claim):  # worker: claimed, then slow before "sending"
        claimed.set()
        # Until the sweeper has read the attempt (then this worker commits "sending"
        # behind its back), waits for a lock this worker holds, or is done; 10 s at most.
        deadline = time.monotonic() + 10
        while not sweeper_read.wait(0.05) and time.monotonic() < deadline:
            if swept.is_set() or sweeper_waits_for_a_lock():
                break
        return revalidate(claim)

    real_objects = Attempt.objects

    class Objects:  # the sweeper's read of the attempt, then the worker moves on
        def __getattr__(self, name):
            return getattr(real_objects, name)

        def filter(self, **kw):
            qs = real_objects.filter(**kw)
            if threading.current_thread() is not threading.main_thread() or "plan" not in kw:
                return qs

            class First:
                def first(self_inner):
                    attempt = qs.first()  # PREPARED
                    sweeper_read.set()
                    deadline = time.monotonic() + 10
                    while real_objects.get(pk=attempt.pk).state != Attempt.State.SENDING:
                        assert time.monotonic() < deadline
                        time.sleep(0.01)
                    return attempt  # stale: the worker has committed "sending"

            return First()

    monkeypatch.setattr(services, "_revalidate", slow_revalidate)
    monkeypatch.setattr(Attempt, "objects", Objects())
    outcome = {}

    def worker():
        try:
            outcome["first"] = services.execution_run(plan_id=plan.id)
        except Exception as exc:  # noqa: BLE001
            outcome["first"] = repr(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=worker)
    thread.start()
    assert claimed.wait(10)
    report = sweeper.sweep()
    swept.set()
    thread.join(15)
    monkeypatch.setattr(Attempt, "objects", real_objects)
    monkeypatch.setattr(services, "_revalidate", revalidate)

    print("sweep:", report, "first run:", outcome)
    attempt = real_objects.get(plan=plan)
    print(
        "after the sweep: attempt", attempt.state, "plan", type(plan).objects.get(pk=plan.pk).status
    )
    second = services.execution_run(plan_id=plan.id)
    print("second run:", second)
    posts = [w for w in upstream.writes() if w["path"] == "/deployments"]
    print(
        "POST /deployments sent:", len(posts), "deployments:", len(upstream.state()["deployments"])
    )
    assert len(upstream.state()["deployments"]) <= 1, "the plan was executed twice"
