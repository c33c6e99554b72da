"""The process-side metrics: counters and histograms every web and worker process adds to,
in the Prometheus client's registry.

With ``PROMETHEUS_MULTIPROC_DIR`` set (production: the systemd units and the Procfile
set it; ``make run`` uses ``var/metrics``), each process writes its values to files in
that directory and ``GET /metrics`` on any web process adds up every process on the host:
the uvicorn workers and the Celery processes alike. The directory must be emptied when
the host's processes start (the units do it), or counters of an earlier run carry over.
Without it, each process counts alone and ``/metrics`` shows the web process's own.

Labels are few and bounded: action and connector names (an admin's catalog), consequence
classes, decisions, states and status classes. Never a plan id, a token, a target or an
agent: those belong in the logs.

What the database knows (plans awaiting a decision, the sweeper's lag, the vault) is
read when ``/metrics`` is scraped (approvals.ops.monitoring), not counted here.
"""

from __future__ import annotations

import atexit
import os

from prometheus_client import Counter, Gauge, Histogram, multiprocess

# The decision-to-effect and submit latencies: milliseconds to a minute.
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

PLANS_PROPOSED = Counter(
    "countersign_plans_proposed",
    "Plans stored after a successful preview, by action and consequence class.",
    ["action", "consequence_class"],
)
DECISIONS = Counter(
    "countersign_decisions",
    "Decisions that moved a plan out of awaiting_approval, by kind "
    "(approve, deny, session_grant, policy, expire, cancel).",
    ["decision"],
)
OUTCOMES = Counter(
    "countersign_outcomes",
    "Plans reaching an outcome state (completed, pending, rejected, stale, refused, "
    "unknown, ...), whoever settled them.",
    ["state"],
)
DECISION_TO_EFFECT = Histogram(
    "countersign_decision_to_effect_seconds",
    "From the decision that approved a plan to the outcome of its execution.",
    buckets=_LATENCY_BUCKETS,
)
SUBMIT_LATENCY = Histogram(
    "countersign_submit_seconds",
    "Time to validate, preview and store a submitted plan (API and MCP), by result.",
    ["result"],
    buckets=_LATENCY_BUCKETS,
)
BREAK_GLASS = Counter(
    "countersign_break_glass_decisions",
    "Decisions a superuser made by break-glass, outside the plan's groups, by decision "
    "(approve, deny). Each is audited as approval.break_glass with its reason.",
    ["decision"],
)
ESCALATIONS = Counter(
    "countersign_escalations",
    "Plans whose decision rule escalated them to another group, announced by the sweeper.",
)
POLICY_DECISIONS = Counter(
    "countersign_policy_decisions",
    "What the catalog's policies said at submission, by outcome (refuse, approve, review) "
    "and part (enforce; shadow: evaluated beside, never enforced).",
    ["outcome", "part"],
)
POLICY_ERRORS = Counter(
    "countersign_policy_errors",
    "Policies that failed to evaluate on a plan (the plan then goes to a person), by "
    'policy id ("(plan)" when the plan could not be put to the policies) and part.',
    ["policy", "part"],
)
SHADOW_DISAGREEMENTS = Counter(
    "countersign_shadow_disagreements",
    "Plans where a shadow policy and people disagreed: the shadow would have approved a "
    "plan people denied, or refused one they approved, by what the shadow said.",
    ["shadow"],
)
UPSTREAM_REQUESTS = Counter(
    "countersign_upstream_requests",
    "Requests to upstreams, by connector, client role (read, write) and status class "
    "(2xx, 3xx, 4xx, 5xx, timeout, error).",
    ["connector", "role", "status_class"],
)
# Each web process counts its own waiters; the scrape adds up the processes alive.
LONGPOLL_WAITERS = Gauge(
    "countersign_longpoll_waiters",
    "Agents waiting on a plan (?wait= and MCP subscriptions) right now.",
    multiprocess_mode="livesum",
)


def status_class(status: int | None, *, timeout: bool = False) -> str:
    if status is None:
        return "timeout" if timeout else "error"
    return f"{status // 100}xx" if 100 <= status < 600 else "error"


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def _forget_this_process() -> None:
    """A process that ends cleanly takes its live gauges with it (a killed one's stay
    until the directory is emptied at the next start)."""
    if multiprocess_dir():
        try:
            multiprocess.mark_process_dead(os.getpid())
        except OSError:
            pass


atexit.register(_forget_this_process)
