"""The database cannot be reached: how to tell, what an agent is told, and how it is logged.

An outage (PostgreSQL restarting, a failover, a connection cut) is not a fault of the
request that met it. The agent API and MCP answer it ``503`` with ``Retry-After``, the
pages with a page saying the service is temporarily unavailable, and every process logs
it as one line when it starts, a count every ``REPORT_SECONDS`` while it lasts, and one
line when it clears (:class:`OutageLogFilter`), instead of a traceback per request and
per task.

Only "the database cannot be reached" counts (:func:`database_unavailable`): a refused or
cut connection, a server shutting down or starting up, a read-only server. An integrity
error, a programming error, a deadlock or a statement timeout is a fault (or a race) of
its own and stays what it was.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import psycopg
from django.db import InterfaceError, OperationalError, connection

from .exceptions import CountersignError

log = logging.getLogger("countersign.database")

# What Retry-After says while the database cannot be reached (seconds): PostgreSQL
# restarting or failing over is back within seconds.
RETRY_AFTER_SECONDS = 2
# While it lasts, one line per process this often, with how many errors it caused.
REPORT_SECONDS = 10.0
# How often a process checks whether the database is back, while it is not.
PROBE_SECONDS = 1.0

# SQLSTATEs that mean the server cannot serve us now: class 08 (connection exception),
# 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now (starting up,
# shutting down, in recovery), 25006 read_only_sql_transaction (a standby, or a primary
# made read-only: no write can succeed until it is promoted or switched back).
_UNAVAILABLE_STATES = frozenset({"57P01", "57P02", "57P03", "25006"})


class DatabaseUnavailable(CountersignError):
    status = 503
    type = "database-unavailable"
    title = "The service is temporarily unavailable"
    retry_after = RETRY_AFTER_SECONDS

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            detail
            or (
                f"its database cannot be reached; try again in {RETRY_AFTER_SECONDS} s "
                "(send a proposal again with the same Idempotency-Key)"
            )
        )


def _sqlstate(exc: BaseException) -> str | None:
    state = getattr(exc, "sqlstate", None)
    return state if isinstance(state, str) else None


def _chain(exc: BaseException):
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def database_unavailable(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) says the database cannot be reached.

    Django wraps the driver's errors (django.db.OperationalError / InterfaceError, the
    psycopg error as ``__cause__``). A psycopg OperationalError or InterfaceError with no
    SQLSTATE failed on the client's side of the connection (refused, closed, cut); one
    with a SQLSTATE counts only for the states above (a deadlock, a statement timeout or
    a serialization failure is an OperationalError too, and is not an outage)."""
    if exc is None:
        return False
    for error in _chain(exc):
        if type(error).__module__.startswith("psycopg_pool"):
            # No pooled connection came in time: the pool cannot connect while this
            # process knows the database to be away; otherwise the process is busy.
            return monitor.active
        if isinstance(error, psycopg.Error):
            state = _sqlstate(error)
            if state is not None:
                return state.startswith("08") or state in _UNAVAILABLE_STATES
            return isinstance(error, psycopg.OperationalError | psycopg.InterfaceError)
        if isinstance(error, InterfaceError | OperationalError) and error.__cause__ is None:
            # Django's own "connection already closed" (no driver error behind it).
            return isinstance(error, InterfaceError)
    return False


def describe(exc: BaseException) -> str:
    """A short name for the condition, without the server's message (which can name
    hosts and users): the error class and its SQLSTATE."""
    for error in _chain(exc):
        state = _sqlstate(error)
        if state:
            return f"{type(error).__name__}, SQLSTATE {state}"
    driver = next((e for e in _chain(exc) if type(e).__module__.startswith("psycopg")), exc)
    return type(driver).__name__


class Monitor:
    """One process's view of an outage: when it started, how many errors it caused since
    the last line, and a thread that checks every PROBE_SECONDS whether it is over (a
    connection that can write again). All of it logs through ``log``."""

    def __init__(self, probe=None) -> None:
        self._lock = threading.Lock()
        self._probe = probe or _database_writable
        self.since: float | None = None
        self.unreported = 0
        self.total = 0
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self.since is not None

    def note(self) -> bool:
        """Count one error of the outage. True for the first (the caller logs it)."""
        with self._lock:
            self.total += 1
            if self.since is not None:
                self.unreported += 1
                return False
            self.since = time.monotonic()
            self.unreported = 0
            self.total = 1
            self._thread = threading.Thread(
                target=self._watch, name="countersign-outage", daemon=True
            )
            self._thread.start()
            return True

    def _watch(self) -> None:
        last_report = time.monotonic()
        while True:
            time.sleep(PROBE_SECONDS)
            back = self._probe()
            with self._lock:
                if back:
                    since, total = self.since or time.monotonic(), self.total
                    self.since = None
                    self.unreported = self.total = 0
                    self._thread = None
                    break
                now = time.monotonic()
                due = now - last_report >= REPORT_SECONDS and self.unreported
                count, self.unreported = (self.unreported, 0) if due else (0, self.unreported)
                lasted = now - (self.since or now)
            if due:
                last_report = now
                log.warning(
                    "the database is still unreachable (%.0f s): %d more errors in the last %.0f s",
                    lasted,
                    count,
                    REPORT_SECONDS,
                )
        log.warning(
            "the database is reachable again after %.1f s (%d errors while it was not)",
            time.monotonic() - since,
            total,
        )


def _database_writable() -> bool:
    """A fresh connection (this thread's own), and it is not read-only."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SHOW transaction_read_only")
            (read_only,) = cursor.fetchone()
        return read_only == "off"
    except Exception:  # noqa: BLE001 - still down (or another fault): look again later
        return False
    finally:
        try:
            connection.close()
        except Exception:  # noqa: BLE001, S110 - a broken connection is dropped anyway
            pass


monitor = Monitor()


def known_away() -> bool:
    """Whether this process is in an outage now (met one, and has not seen it clear)."""
    return monitor.active


def _forget_in_child() -> None:
    """A forked process (a Celery pool child) starts with no outage of its own: the
    watching thread did not follow it, so nothing would ever clear what it inherited."""
    global monitor
    monitor = Monitor()


os.register_at_fork(after_in_child=_forget_in_child)


def _exception_of(record: logging.LogRecord) -> BaseException | None:
    if record.exc_info and record.exc_info[1] is not None:
        return record.exc_info[1]
    args = record.args if isinstance(record.args, tuple) else ()
    return next((a for a in args if isinstance(a, BaseException)), None)


class OutageLogFilter(logging.Filter):
    """On the log handler, in every process: a record whose exception says the database
    cannot be reached becomes, for the first one, one line naming the condition (no
    traceback), and is counted, not written, after that. The monitor's thread writes
    the count every REPORT_SECONDS and one line when the database is back."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = _exception_of(record)
        if exc is None or not database_unavailable(exc):
            return True
        if not monitor.note():
            return False
        record.msg = (
            "the database cannot be reached (%s; first met by %s): answering 503 with "
            "Retry-After; further errors are counted until it is back"
        )
        record.args = (describe(exc), getattr(record, "outage_where", record.name))
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.ERROR, "ERROR"
        return True


def noted(exc: BaseException, where: str) -> None:
    """Log an outage met by ``where`` through the filter (once, then counted)."""
    log.error(
        "%s: the database cannot be reached", where, exc_info=exc, extra={"outage_where": where}
    )


class OneLineRefusals(logging.Filter):
    """Django logs a refused request (403 from PermissionDenied, 400 from a suspicious
    operation) with its traceback; a refusal is the product working as designed, so the
    line stays and the traceback goes (the exception's class and message are kept)."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if (
            isinstance(status, int)
            and 400 <= status < 500
            and record.exc_info
            and record.name.startswith(("django.request", "django.security"))
        ):
            exc = record.exc_info[1]
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            record.msg = f"{record.getMessage()} ({reason})"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True
