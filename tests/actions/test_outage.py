"""What counts as "the database cannot be reached", and how an outage is logged: once,
then a count, then once when it clears; refusals in one line."""

from __future__ import annotations

import logging
import sys

import psycopg
import pytest
from django.db import IntegrityError, OperationalError, connection, transaction
from psycopg_pool import PoolTimeout

from actions.lib import outage
from actions.lib.outage import Monitor, OneLineRefusals, OutageLogFilter, database_unavailable
from demo.processes import free_port


@pytest.fixture(autouse=True)
def _own_outage_monitor(monkeypatch):
    """An outage this test logs is its own: the process's monitor is left alone."""
    from actions.lib import outage

    monkeypatch.setattr(outage, "monitor", outage.Monitor(probe=lambda: True))


def _wrapped(driver_error: Exception) -> OperationalError:
    error = OperationalError(str(driver_error))
    error.__cause__ = driver_error
    return error


def test_a_refused_connection_is_an_outage():
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(f"postgres://postgres@127.0.0.1:{free_port()}/x", connect_timeout=2)
    assert database_unavailable(refused.value)
    assert database_unavailable(_wrapped(refused.value))


def test_a_terminated_connection_is_an_outage(db, settings):
    """pg_terminate_backend, as an administrator or a failover does (SQLSTATE 57P01)."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with (
        psycopg.connect(**params, autocommit=True) as victim,
        psycopg.connect(**params, autocommit=True) as admin,
    ):
        pid = victim.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        with pytest.raises(psycopg.Error) as cut:
            victim.execute("SELECT 1")
    assert database_unavailable(_wrapped(cut.value))


def test_a_read_only_transaction_is_an_outage(db):
    from approvals.models import Plan

    with pytest.raises(Exception) as refused, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION READ ONLY")
        Plan.objects.update(reason="")
    assert getattr(refused.value.__cause__, "sqlstate", None) == "25006"
    assert database_unavailable(refused.value)


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.AdminShutdown(),
        psycopg.errors.CrashShutdown(),
        psycopg.errors.CannotConnectNow(),
        psycopg.errors.ConnectionFailure(),
    ],
)
def test_server_states_that_mean_unavailable(error):
    assert database_unavailable(_wrapped(error))


def test_a_unique_violation_is_no_outage(db):
    from django.contrib.auth.models import User

    User.objects.create(username="once")
    with pytest.raises(IntegrityError) as duplicate, transaction.atomic():
        User.objects.create(username="once")
    assert not database_unavailable(duplicate.value)


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.DeadlockDetected(),
        psycopg.errors.QueryCanceled(),
        psycopg.errors.SerializationFailure(),
        psycopg.errors.UndefinedTable(),
        PoolTimeout("no connection in 10 s"),
        ValueError("not a database error"),
    ],
)
def test_faults_and_races_are_no_outage(error):
    assert not database_unavailable(_wrapped(error) if isinstance(error, psycopg.Error) else error)


def _record(exc: BaseException | None, name: str = "django.request", **extra) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc else None
    record = logging.LogRecord(name, logging.ERROR, __file__, 1, "failed: %s", ("/x",), exc_info)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_an_outage_is_one_line_then_a_count_then_one_line(monkeypatch, caplog):
    monkeypatch.setattr(outage, "PROBE_SECONDS", 0.01)
    monkeypatch.setattr(outage, "REPORT_SECONDS", 0.0)
    back = {"yet": False}
    monitor = Monitor(probe=lambda: back["yet"])
    monkeypatch.setattr(outage, "monitor", monitor)
    down = _wrapped(psycopg.OperationalError("connection refused"))
    log_filter = OutageLogFilter()

    first = _record(down)
    assert log_filter.filter(first)
    assert first.exc_info is None
    assert "the database cannot be reached (OperationalError" in first.getMessage()
    with caplog.at_level(logging.WARNING, logger="countersign.database"):
        assert not any(log_filter.filter(_record(down)) for _ in range(500))
        # Not an outage: untouched, traceback and all.
        other = _record(ValueError("boom"))
        assert log_filter.filter(other) and other.exc_info is not None
        counted = lambda: [r for r in caplog.records if "still unreachable" in r.getMessage()]  # noqa: E731
        _until(counted)
        back["yet"] = True
        _until(lambda: not monitor.active)
    lines = [r.getMessage() for r in caplog.records]
    assert sum("more errors" in line for line in lines) == 1
    assert "500 more errors" in next(line for line in lines if "more errors" in line)
    assert lines[-1].startswith("the database is reachable again")
    assert "(501 errors while it was not)" in lines[-1]


def _until(check, timeout: float = 5.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_refusal_is_one_line(client, outsider):
    """A signed-in person who may not review opens the queue: Django logs the 403 with its
    traceback; the filter keeps the line and drops the traceback."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            # A copy as Django made it (the configured handler rewrites the record later).
            records.append(logging.makeLogRecord(dict(record.__dict__)))

    handler = Keep()
    logging.getLogger("django.request").addHandler(handler)
    try:
        client.force_login(outsider)
        assert client.get("/plans/").status_code == 403
    finally:
        logging.getLogger("django.request").removeHandler(handler)
    (forbidden,) = [r for r in records if getattr(r, "status_code", None) == 403]
    assert forbidden.exc_info is not None
    assert OneLineRefusals().filter(forbidden)
    assert forbidden.exc_info is None
    line = logging.Formatter().format(forbidden)
    assert line.startswith("Forbidden (Permission denied): /plans/ (PermissionDenied")
    assert "\n" not in line and "Traceback" not in line
    assert sys.exc_info()[0] is None


def test_a_pool_that_cannot_connect_during_an_outage_is_one(monkeypatch):
    """No pooled connection in time: a busy process, unless the database is known away."""
    monitor = Monitor(probe=lambda: False)
    monkeypatch.setattr(outage, "monitor", monitor)
    timeout = _wrapped(PoolTimeout("no connection in 10 s"))
    assert not database_unavailable(timeout)
    monitor.since = 1.0  # an outage under way (no watcher thread needed here)
    assert database_unavailable(timeout)
