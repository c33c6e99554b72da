"""Signs of life of the machinery that executes plans: each worker process and the
sweeper write a row (approvals.models.Heartbeat); the dashboard reads them."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from ..models import Heartbeat


def heartbeat_record(*, name: str, kind: str) -> None:
    """Note that ``name`` is alive now (one row per worker, one for the sweeper)."""
    now = timezone.now()
    updated = Heartbeat.objects.filter(name=name).update(at=now)
    if not updated:
        Heartbeat.objects.update_or_create(
            name=name, defaults={"kind": kind, "at": now, "started_at": now}
        )


def heartbeat_started(*, name: str, kind: str) -> None:
    """A process starts: its row's ``started_at`` is now (a restart is visible)."""
    now = timezone.now()
    Heartbeat.objects.update_or_create(
        name=name, defaults={"kind": kind, "at": now, "started_at": now}
    )


def worker_heartbeat_name(hostname: str) -> str:
    """A worker's row names the queue it consumes: the readiness check counts the workers
    of this deployment's queue (COUNTERSIGN_QUEUE), not those of another one that
    happens to share the database."""
    return f"worker:{settings.CELERY_TASK_DEFAULT_QUEUE}:{hostname}"


def heartbeat_forget(*, name: str) -> None:
    """A process stops cleanly: its row goes (a process that dies leaves it to age)."""
    Heartbeat.objects.filter(name=name).delete()


def stale_after() -> timedelta:
    """A heartbeat older than three of its periods belongs to a process that stopped."""
    return timedelta(seconds=3 * settings.COUNTERSIGN_HEARTBEAT_SECONDS)


def sweeper_stale_after() -> timedelta:
    return timedelta(seconds=3 * settings.COUNTERSIGN_SWEEP_SECONDS)


def heartbeat_status(*, now=None, this_queue: bool = False) -> dict:
    """The sweeper's last run and the workers seen recently, for the dashboard; with
    ``this_queue`` (the readiness check), only the workers of this deployment's queue."""
    now = now or timezone.now()
    rows = list(Heartbeat.objects.all())
    sweeper = next((r for r in rows if r.kind == Heartbeat.Kind.SWEEPER), None)
    prefix = worker_heartbeat_name("") if this_queue else ""
    workers = [r for r in rows if r.kind == Heartbeat.Kind.WORKER and r.name.startswith(prefix)]
    sweeper_age = (now - sweeper.at).total_seconds() if sweeper else None
    return {
        "sweeper_age": sweeper_age,
        "sweeper_stale": sweeper_age is None or sweeper_age > sweeper_stale_after().total_seconds(),
        "workers_fresh": sum(1 for r in workers if now - r.at <= stale_after()),
        "workers_known": len(workers),
    }
