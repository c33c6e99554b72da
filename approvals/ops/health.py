"""Is this deployment able to move plans? The checks behind ``GET /readyz`` and
``manage.py healthcheck``, and the database's figures ``GET /metrics`` reports.

Each check says only ok or not and a fixed reason: never an address, a host name, an
exception's text or anything configured (the body is unauthenticated).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count, Min
from django.utils import timezone

from actions.lib import dispatch
from actions.lib.checkpoints import audit_unsealed_age
from actions.models import VaultState

from ..models import Plan, PlanStatus
from .heartbeats import heartbeat_status, stale_after, sweeper_stale_after

# Once every migration is applied it stays so for this process's code (a new release
# restarts the processes): the migration graph is read only until then.
_migrated = False


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    value: float | int | None = None

    def as_dict(self) -> dict[str, Any]:
        entry = asdict(self)
        if entry["value"] is None:
            del entry["value"]
        return entry


def _database() -> Check:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:  # noqa: BLE001 - any failure: not reachable (no text: it may name hosts)
        return Check("database", False, "unreachable")
    return Check("database", True, "reachable")


def _broker() -> Check:
    reachable, _ = dispatch.broker_state(timeout=1.0)
    return Check("broker", reachable, "reachable" if reachable else "unreachable")


def unapplied_migrations() -> int:
    global _migrated
    if _migrated:
        return 0
    executor = MigrationExecutor(connection)
    pending = len(executor.migration_plan(executor.loader.graph.leaf_nodes()))
    _migrated = pending == 0
    return pending


def _migrations() -> Check:
    try:
        pending = unapplied_migrations()
    except Exception:  # noqa: BLE001
        return Check("migrations", False, "cannot be read")
    if pending:
        return Check("migrations", False, "not applied", pending)
    return Check("migrations", True, "applied", 0)


def readiness_checks() -> list[Check]:
    """database, broker, migrations, sweeper (heartbeat younger than three sweep
    periods), workers (at least one heartbeat younger than three heartbeat periods)."""
    database = _database()
    checks = [database, _broker()]
    if not database.ok:
        return checks + [
            Check(name, False, "not checked: the database is unreachable")
            for name in ("migrations", "sweeper", "workers")
        ]
    checks.append(_migrations())
    try:
        beats = heartbeat_status(this_queue=True)
    except Exception:  # noqa: BLE001 - e.g. its table missing before migrations
        return checks + [Check(name, False, "cannot be read") for name in ("sweeper", "workers")]
    age = beats["sweeper_age"]
    if age is None:
        checks.append(Check("sweeper", False, "never ran"))
    else:
        age = round(age, 1)
        limit = sweeper_stale_after().total_seconds()
        fresh = age <= limit
        checks.append(Check("sweeper", fresh, "ran recently" if fresh else "stale", max(age, 0.0)))
    workers = beats["workers_fresh"]
    checks.append(
        Check(
            "workers",
            workers >= 1,
            "alive" if workers else f"none seen in {stale_after().total_seconds():g} s",
            workers,
        )
    )
    return checks


def readiness() -> tuple[bool, dict[str, Any]]:
    checks = readiness_checks()
    ready = all(check.ok for check in checks)
    return ready, {
        "status": "ready" if ready else "not ready",
        "checks": [check.as_dict() for check in checks],
    }


def database_figures(*, now=None) -> dict[str, float | None]:
    """What /metrics reads from the database at scrape time (small queries on indexed
    columns): the awaiting queue, unsettled unknown outcomes, the heartbeats, the vault,
    the audit trail's unsealed tail."""
    now = now or timezone.now()
    awaiting = Plan.objects.filter(status=PlanStatus.AWAITING_APPROVAL).aggregate(
        n=Count("id"), oldest=Min("created_at"), soonest=Min("expires_at")
    )
    unknown = Plan.objects.filter(status=PlanStatus.UNKNOWN).aggregate(
        n=Count("id"), oldest=Min("finished_at")
    )
    beats = heartbeat_status(now=now, this_queue=True)
    locked = VaultState.objects.filter(id=VaultState.SINGLETON_ID, locked=True).exists()
    return {
        "awaiting": awaiting["n"],
        "oldest_awaiting_age": (now - awaiting["oldest"]).total_seconds()
        if awaiting["oldest"]
        else 0.0,
        "soonest_expiry": (awaiting["soonest"] - now).total_seconds()
        if awaiting["soonest"]
        else None,
        "unknown": unknown["n"],
        "oldest_unknown_age": (now - unknown["oldest"]).total_seconds()
        if unknown["oldest"]
        else 0.0,
        "sweeper_lag": beats["sweeper_age"],
        "workers_fresh": beats["workers_fresh"],
        "vault_locked": 1.0 if locked else 0.0,
        "sweep_period": float(settings.COUNTERSIGN_SWEEP_SECONDS),
        "audit_unsealed_age": audit_unsealed_age(now=now),
    }
