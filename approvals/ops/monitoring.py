"""``GET /metrics``: every process's counters (actions.lib.metrics, added up across the
host's processes in multiprocess mode) and the figures only the database knows, read at
scrape time (approvals.ops.health), in the Prometheus text format.

Who may scrape: a bearer token (COUNTERSIGN_METRICS_TOKEN) or a client address in
COUNTERSIGN_METRICS_ALLOW; with neither configured the endpoint does not exist (404).
"""

from __future__ import annotations

import hmac
import logging
import os
import re
from ipaddress import ip_address, ip_network
from pathlib import Path

from django.conf import settings
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from actions.lib import dispatch
from actions.lib.bearer import bearer_token
from actions.lib.metrics import multiprocess_dir

from .health import database_figures

log = logging.getLogger(__name__)


def metrics_configured() -> bool:
    return bool(settings.COUNTERSIGN_METRICS_TOKEN or settings.COUNTERSIGN_METRICS_ALLOW)


def metrics_allowed(*, authorization: str | None, remote_addr: str | None) -> bool:
    token = settings.COUNTERSIGN_METRICS_TOKEN
    if token:
        presented = bearer_token(authorization)
        if presented is not None and hmac.compare_digest(presented.encode(), token.encode()):
            return True
    try:
        address = ip_address(remote_addr or "")
    except ValueError:
        return False
    for network in settings.COUNTERSIGN_METRICS_ALLOW:
        try:
            if address in ip_network(network, strict=False):
                return True
        except ValueError:
            log.warning("COUNTERSIGN_METRICS_ALLOW holds an entry that is not a network")
    return False


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


class DatabaseCollector:
    """The gauges whose honest source is the database or the broker, read when scraped."""

    def collect(self):
        reachable, depth = dispatch.broker_state(timeout=1.0)
        yield _gauge("countersign_broker_up", "1 if the broker answered this scrape.", reachable)
        if depth is not None:
            yield _gauge(
                "countersign_queue_depth", "Messages waiting in the task queue.", float(depth)
            )
        try:
            figures = database_figures()
        except Exception:  # noqa: BLE001 - no text: it may name hosts
            log.warning("metrics: the database could not be read")
            yield _gauge("countersign_database_up", "1 if the database answered.", 0.0)
            return
        yield _gauge("countersign_database_up", "1 if the database answered.", 1.0)
        yield _gauge(
            "countersign_plans_awaiting_decision",
            "Plans awaiting a reviewer's decision.",
            figures["awaiting"],
        )
        yield _gauge(
            "countersign_oldest_awaiting_plan_age_seconds",
            "Age of the oldest plan awaiting a decision (0 when none).",
            figures["oldest_awaiting_age"],
        )
        if figures["soonest_expiry"] is not None:
            yield _gauge(
                "countersign_awaiting_plan_soonest_expiry_seconds",
                "Seconds until the first plan awaiting a decision expires (absent when none).",
                figures["soonest_expiry"],
            )
        yield _gauge(
            "countersign_plans_unknown",
            "Plans whose outcome is unknown (a look or a person must settle them).",
            figures["unknown"],
        )
        yield _gauge(
            "countersign_oldest_unknown_plan_age_seconds",
            "How long the oldest unknown outcome has been unknown (0 when none).",
            figures["oldest_unknown_age"],
        )
        lag = figures["sweeper_lag"]
        yield _gauge(
            "countersign_sweeper_lag_seconds",
            "Seconds since the sweeper last ran (+Inf if it never did).",
            float("inf") if lag is None else max(0.0, lag),
        )
        yield _gauge(
            "countersign_sweep_period_seconds",
            "The sweeper's configured period (COUNTERSIGN_SWEEP_SECONDS).",
            figures["sweep_period"],
        )
        yield _gauge(
            "countersign_workers_alive",
            "Worker processes whose heartbeat is fresh.",
            figures["workers_fresh"],
        )
        yield _gauge(
            "countersign_vault_locked", "1 while the vault is locked.", figures["vault_locked"]
        )
        yield _gauge(
            "countersign_audit_unsealed_age_seconds",
            "Age of the oldest audit event no signed checkpoint covers yet (0 when all are).",
            figures["audit_unsealed_age"],
        )


_LIVE_GAUGE_FILE = re.compile(r"^gauge_live[a-z]+_(\d+)\.db$")


def pid_alive(pid: int) -> bool:
    """Is a process of this host with that id running (whoever's it is)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True


def forget_dead_processes(directory: str) -> None:
    """A process that was killed (or a pool child, which exits without running atexit)
    leaves its live gauges behind (the long-poll waiters it had): drop those of
    processes no longer running on this host. Counters stay: they are cumulative."""
    for path in Path(directory).glob("gauge_live*_*.db"):
        found = _LIVE_GAUGE_FILE.match(path.name)
        if found and not pid_alive(int(found.group(1))):
            mark_process_dead(int(found.group(1)), directory)


def metrics_text(*, database: bool = True) -> bytes:
    """The whole exposition: the processes' metrics, then (unless ``database`` is False:
    a worker-only host's exporter, manage.py serve_metrics) the scrape-time gauges."""
    directory = multiprocess_dir()
    if directory:
        forget_dead_processes(directory)
        processes = CollectorRegistry()
        MultiProcessCollector(processes, path=directory)
    else:
        processes = REGISTRY
    if not database:
        return generate_latest(processes)
    scraped = CollectorRegistry()
    scraped.register(DatabaseCollector())
    return generate_latest(processes) + generate_latest(scraped)
