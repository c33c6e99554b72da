"""The Celery application. Tasks are thin: ids in, a service call out."""

from __future__ import annotations

import dbm.dumb
import logging
import os
import shelve
import threading
from pathlib import Path

from celery import Celery, bootsteps
from celery.beat import PersistentScheduler
from celery.signals import import_modules, task_postrun, task_prerun, worker_init
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connection, connections

from actions.lib import logcontext
from actions.lib.outage import database_unavailable, noted

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

log = logging.getLogger(__name__)

app = Celery("countersign")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def _close_old_connections(**kwargs) -> None:
    """What Django does around each request, around each task: drop a connection past
    CONN_MAX_AGE or one that errored, mark the rest for a health check; keep it
    otherwise (settings.CELERY_DB_REUSE_MAX stops Celery closing it every time)."""
    task = kwargs.get("task")
    if task is not None and getattr(task.request, "is_eager", False):
        return
    close_old_connections()


# The tasks whose first argument is a plan id (actions/lib/dispatch.py).
_PLAN_TASKS = frozenset(
    {"executors.execute_plan", "executors.reconcile", "executors.follow_pending"}
)


@task_prerun.connect
def _bind_log_context(task=None, args=None, **kwargs) -> None:
    """What the publisher's log lines were about (the message's headers), bound for the
    task's own lines; a task about one plan names it even when the publisher did not
    (the sweeper). Eager tasks run in the caller's context and keep it."""
    if task is None or getattr(task.request, "is_eager", False):
        return
    request = task.request
    values = getattr(request, logcontext.HEADER, None)
    if values is None:
        values = (getattr(request, "headers", None) or {}).get(logcontext.HEADER)
    values = dict(values) if isinstance(values, dict) else {}
    if task.name in _PLAN_TASKS and args:
        values["plan_id"] = str(args[0])
    request._countersign_log_token = logcontext.replace(values)


@task_postrun.connect
def _reset_log_context(task=None, **kwargs) -> None:
    token = getattr(getattr(task, "request", None), "_countersign_log_token", None)
    if token is not None:
        logcontext.reset(token)
        # Nothing of this task's plan is left for the process's next task.
        logcontext.replace({})


class _PlainFileShelves:
    """``shelve.open`` on :mod:`dbm.dumb`: plain files, and no locks to lose."""

    @staticmethod
    def open(filename: str, writeback: bool = False) -> shelve.Shelf:
        return shelve.Shelf(dbm.dumb.open(filename, "c"), writeback=writeback)


class BeatScheduler(PersistentScheduler):
    """Celery's persistent scheduler, its schedule kept in :mod:`dbm.dumb` files.

    ``shelve.open`` takes the interpreter's first dbm module; from Python 3.13 that is
    ``dbm.sqlite3`` (WAL mode), and on a busy machine beat has died at start on its own
    new schedule file with ``sqlite3.OperationalError: locking protocol``, leaving the
    worker with no sweeper. One beat writes the file and nothing else reads it, so plain
    files are enough (``schedule.dat``, ``.dir``, ``.bak`` beside the configured name)."""

    persistence = _PlainFileShelves


@worker_init.connect
@import_modules.connect
def _make_schedule_directory(sender=None, **kwargs) -> None:
    """Beat keeps its schedule in a file whose directory nothing else creates (with a
    Redis broker and explicit keys, var/ may never have been made); without it beat
    dies at start and the worker goes on with no sweeper. Made before beat starts: by a
    worker (``-B``, its ``-s`` file included) and by a standalone ``celery beat`` (the
    configured file: ``import_modules`` is sent before it opens its schedule)."""
    schedule = getattr(sender, "schedule_filename", None) or app.conf.beat_schedule_filename
    try:
        Path(schedule).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        # Seen on the dashboard: the sweeper's heartbeat never comes.
        log.error("cannot create the directory of celery beat's schedule: %s", exc)


class Heartbeat(bootsteps.StartStopStep):
    """Each worker notes it is alive every COUNTERSIGN_HEARTBEAT_SECONDS, from its main
    process (its pool's children may all be busy), in approvals.models.Heartbeat."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker, **kwargs) -> None:
        super().__init__(worker, **kwargs)
        self.tref = None
        self.stopped = False

    def start(self, worker) -> None:
        # As in _beat: the models (and so approvals) can only be imported once running.
        from approvals.ops.heartbeats import worker_heartbeat_name  # noqa: PLC0415

        self.name = worker_heartbeat_name(worker.hostname)
        self._beat(started=True)
        self.tref = worker.timer.call_repeatedly(
            settings.COUNTERSIGN_HEARTBEAT_SECONDS, self._beat, priority=10
        )

    def stop(self, worker) -> None:
        self.stopped = True
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
        # A worker that stops cleanly says so at once: the readiness check and the
        # dashboard need not wait three periods to stop counting it.
        from approvals.ops.heartbeats import heartbeat_forget  # noqa: PLC0415 - as in _beat

        try:
            heartbeat_forget(name=self.name)
        except Exception as exc:  # noqa: BLE001 - the database is down: it goes stale
            _unrecorded(exc, "could not remove the worker heartbeat")
        finally:
            connection.close()

    def terminate(self, worker) -> None:
        self.stop(worker)

    def _beat(self, started: bool = False) -> None:
        if self.stopped:
            return  # a beat already due when the worker stopped must not bring it back
        # This module is imported with the settings (config/__init__.py), before
        # Django's apps are loaded: the models can only be imported once it runs.
        from approvals.models import Heartbeat as Row  # noqa: PLC0415
        from approvals.ops.heartbeats import (  # noqa: PLC0415
            heartbeat_record,
            heartbeat_started,
        )

        try:
            record = heartbeat_started if started else heartbeat_record
            record(name=self.name, kind=Row.Kind.WORKER)
        except Exception as exc:  # noqa: BLE001 - the database is down: try next period
            _unrecorded(exc, "could not record the worker heartbeat")
        finally:
            # The timer's thread keeps no connection between beats.
            connection.close()


def _unrecorded(exc: Exception, what: str) -> None:
    """A periodic write that failed: during a database outage one more error of it
    (logged once per process, then counted: actions/lib/outage.py), else one line."""
    if database_unavailable(exc):
        noted(exc, what)
    else:
        log.warning("%s: %s", what, type(exc).__name__)


app.steps["worker"].add(Heartbeat)


class Sealer(bootsteps.StartStopStep):
    """A worker given the audit key seals the audit trail every COUNTERSIGN_SEAL_SECONDS
    from a thread of its main process, not through its queue: behind a backlog of
    executions a queued seal would wait (the bench measured 13 s of unsealed tail while
    1,000 approvals were executed). Several such workers take turns by the lease."""

    def __init__(self, worker, **kwargs) -> None:
        super().__init__(worker, **kwargs)
        self.thread = None
        self.stopping = threading.Event()

    def start(self, worker) -> None:
        if not settings.COUNTERSIGN_AUDIT_KEY_FILE:
            return  # not a sealer: another worker holds the key
        self.thread = threading.Thread(target=self._loop, name="audit-sealer", daemon=True)
        self.thread.start()

    def stop(self, worker) -> None:
        self.stopping.set()
        if self.thread is not None:
            # A run waits at most COUNTERSIGN_SEAL_WAIT_SECONDS for open transactions; a
            # run cut short leaves no half checkpoint (actions/lib/checkpoints.py).
            self.thread.join(settings.COUNTERSIGN_SEAL_WAIT_SECONDS + 5)
            self.thread = None

    def terminate(self, worker) -> None:
        self.stop(worker)

    def _loop(self) -> None:
        # As in Heartbeat._beat: the task module needs the apps, loaded once running.
        from executors.tasks import seal_audit_task  # noqa: PLC0415

        # The thread's own database connection (Django's are per thread), kept from one
        # run to the next under Django's rule for requests: after each run a connection
        # past CONN_MAX_AGE, or one that errored, is closed; the rest is health-checked
        # (CONN_HEALTH_CHECKS) on its next use. A pool child forked meanwhile drops its
        # copy (below).
        _thread_connections.append(connections[DEFAULT_DB_ALIAS])
        try:
            while not self.stopping.wait(settings.COUNTERSIGN_SEAL_SECONDS):
                try:
                    seal_audit_task()  # run here, synchronously: its logging and errors
                except Exception as exc:  # noqa: BLE001 - the database is down: next period
                    _unrecorded(exc, "audit not sealed")
                finally:
                    close_old_connections()
        finally:
            _thread_connections.remove(connections[DEFAULT_DB_ALIAS])
            connection.close()


# The database connections of the main process's own threads that outlive a run (the
# sealer's). A Celery pool child forked from this process (at start, or later to replace
# one) gets a copy of each, in use or not; the thread that owns it does not exist in the
# child. The copies are dropped there without closing: closing would end the parent's
# session on the socket they share (psycopg, for its part, never finishes a connection
# opened by another process).
_thread_connections: list = []


def _forget_thread_connections_after_fork() -> None:
    for wrapper in _thread_connections:
        wrapper.connection = None
    _thread_connections.clear()


os.register_at_fork(after_in_child=_forget_thread_connections_after_fork)


app.steps["worker"].add(Sealer)
