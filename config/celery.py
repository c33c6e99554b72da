"""The Celery application. Tasks are thin: ids in, a service call out."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

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
    from django.db import close_old_connections

    close_old_connections()
