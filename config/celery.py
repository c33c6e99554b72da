"""The Celery application. Tasks are thin: ids in, a service call out."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from celery import Celery, bootsteps
from celery.signals import import_modules, task_postrun, task_prerun, worker_init
from django.conf import settings
from django.db import close_old_connections, connection

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

    def start(self, worker) -> None:
        self.name = f"worker:{worker.hostname}"
        self._beat(started=True)
        self.tref = worker.timer.call_repeatedly(
            settings.COUNTERSIGN_HEARTBEAT_SECONDS, self._beat, priority=10
        )

    def stop(self, worker) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None

    def _beat(self, started: bool = False) -> None:
        # This module is imported with the settings (config/__init__.py), before
        # Django's apps are loaded: the models can only be imported once it runs.
        from approvals.heartbeats import (  # noqa: PLC0415
            heartbeat_record,
            heartbeat_started,
        )
        from approvals.models import Heartbeat as Row  # noqa: PLC0415

        try:
            record = heartbeat_started if started else heartbeat_record
            record(name=self.name, kind=Row.Kind.WORKER)
        except Exception as exc:  # noqa: BLE001 - the database is down: try next period
            log.warning("could not record the worker heartbeat: %s", type(exc).__name__)
        finally:
            # The timer's thread keeps no connection between beats.
            connection.close()


app.steps["worker"].add(Heartbeat)
