"""docs/reliability.md from the figures of a chaos run.

``make chaos`` runs the chaos scenario (tests/e2e/chaos.py) at full size through its test,
which writes the figures as JSON; this script turns them into the page::

    .venv/bin/python bench/reliability.py var/chaos-figures.json docs/reliability.md
"""

from __future__ import annotations

import json
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REDIS_RECONNECT = 15.0  # tests/e2e/chaos.py: no kill after the Redis restart for this long


def rewrap(text: str, width: int = 88) -> str:
    """Wrap paragraphs and list items (tables and headings stay as they are)."""
    blocks = []
    for block in text.split("\n\n"):
        if block.startswith(("|", "#")):
            blocks.append(block)
            continue
        items: list[list[str]] = []
        for line in block.splitlines():
            if line.startswith("- ") or not items:
                items.append([line.strip()])
            else:
                items[-1].append(line.strip())
        blocks.append(
            "\n".join(
                textwrap.fill(
                    " ".join(words),
                    width,
                    subsequent_indent="  " * words[0].startswith("- "),
                    # Names like bench-blue-0 or blue-desk-4 stay whole.
                    break_on_hyphens=False,
                    break_long_words=False,
                )
                for words in items
            )
        )
    return "\n\n".join(blocks)


def markdown(fig: dict[str, Any], config: dict[str, Any], *, when: str, command: str) -> str:
    def states(counts: dict[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))

    kills = ", ".join(f"{t:.1f} s ({name})" for t, name in fig["kill_times"])
    redis_at = ", ".join(f"{t:.1f} s" for t in fig["redis_restart_times"])
    reconnected = fig["reconnected_after_redis_restart"]
    survivors = ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in reconnected.items())
    lost = sum(fig["final"].get(s, 0) for s in ("awaiting_approval", "approved", "executing"))
    secs = fig["seconds"]
    rows = [
        ("plans approved", fig["plans"]),
        ("worker kills (SIGKILL of the process group)", f"{fig['kills']} at {kills}"),
        ("Redis restarts (nothing persisted)", f"{fig['redis_restarts']} at {redis_at}"),
        ("workers alive across the Redis restart that reconnected", survivors or "none"),
        (
            "workers that exited on their own, restarted as a supervisor would",
            ", ".join(f"{name} at {t:.1f} s" for t, name in fig.get("crashes", [])) or "none",
        ),
        ("wake-ups that failed to publish (Redis down)", fig["publish_failures"]),
        ("execution tasks that found their plan already taken", fig["duplicate_wakeups"]),
        ("executions recovered by the sweeper (nothing sent)", fig["recovered_by_sweeper"]),
        (
            "plans that went `unknown` (of which: worker killed after sending)",
            f"{fig['went_unknown']} ({fig['unknown_after_kill']})",
        ),
        ("… settled by the workers' reconcile task", fig["settled_by_reconcile_task"]),
        (
            "every consuming worker killed right after a plan went `unknown`, before its "
            "reconciliation ran",
            ", ".join(f"{t:.1f} s ({', '.join(names)})" for t, _, names in fig["reconcile_kills"])
            or "none",
        ),
        ("**final states**", f"**{states(fig['final'])}**"),
        ("**plans left not terminal after the run**", f"**{fig['not_terminal']}**"),
        ("**approvals lost** (still approved or executing)", f"**{lost}**"),
        (
            "**max write requests per plan, unkeyed writes**",
            f"**{fig['max_write_requests_unkeyed']}**",
        ),
        ("max write requests per keyed call (same key)", fig["max_write_requests_per_plan"]),
        ("keyed re-sends in all (same key)", fig["keyed_resends"]),
        ("**max effects per plan** (upstream state)", f"**{fig['max_effects_per_plan']}**"),
        ("writes not attributable to a plan", fig["unattributed_writes"]),
        *(
            [
                (
                    "**audit trail after the run** (verify_audit)",
                    f"**{a['events']} events in {a['checkpoints']} signed checkpoints, "
                    f"{a['unsealed']} unsealed, {a['problems']} problems**",
                )
            ]
            if (a := fig.get("audit"))
            else []
        ),
        ("stopped by the deadline", "yes" if fig["timed_out"] else "no"),
        (
            "seconds: setup / chaos and settling / total",
            f"{secs.get('prepare', 0)} / {secs.get('run', 0)} / {secs.get('total', 0)}",
        ),
    ]
    table = "\n".join(f"| {label} | {value} |" for label, value in rows)
    n = config["reconcile_kills"]
    reconcile_kills = "Once" if n == 1 else f"{n} times"
    return rewrap(f"""# Reliability: the chaos run

Execution must stay trustworthy when processes die at random. This page holds the
figures of the chaos run: {fig["plans"]} approved plans executed by {fig["workers"]}
Celery workers (concurrency {fig["concurrency"]}) while workers are killed with SIGKILL
and restarted and the Redis broker restarts with nothing persisted. The scenario is
`tests/e2e/chaos.py`, run by its test (`tests/e2e/test_chaos.py`, which makes its own
checks, independent of this page); the suite runs a smaller version of it.

Regenerate with `{command}` (PostgreSQL and Redis as for `make test`). These figures:
{when}, seed `{fig["seed"]}` (`make chaos CHAOS_SEED={fig["seed"]}` replays the same
timeline; the machine's timing still differs).

## The scenario

- A private `redis-server --save "" --appendonly no` on a free loopback port; the demo
  upstream in-process; {fig["workers"]} workers, the first embedding the beat that runs
  the sweeper every {config["sweep_seconds"]:g} s (requeue after
  {config["requeue_after_seconds"]:g} s, execution lease {config["lease_seconds"]:g} s).
  Nothing is repaired by hand: the sweeper republishes lost wake-ups and overdue
  reconciliations and settles executions whose worker died; the workers' reconcile task
  settles `unknown` outcomes.
- {fig["contact_updates"]} `update_contact_email` plans, one contact each (created
  upstream first), {fig["changed_upstream"]} of those contacts edited upstream after the
  preview (they must end `stale` with nothing written); {fig["reminders"]}
  `send_reminder` calls (`invoke`; the upstream honours `Idempotency-Key`). Approvals
  arrive in batches over the first {config["approve_seconds"]:g} s.
- Faults: while the chaos lasts, about four upstream writes a second answer
  {config["delay"]:g} s late (so kills land between "sending" and "answered");
  {config["applied_503s"]} writes answer 503 *after* applying the change.
- Chaos: {config["kills"][0]}–{config["kills"][1]} SIGKILLs, due at random moments in the
  first {config["chaos_seconds"]:g} s, each of the whole process group (pool and beat
  included) of a worker that is consuming, preferably while a plan executes; each
  restarted after 0.3–1.5 s. One SIGKILL of Redis (everything queued or unacknowledged
  is lost) while approvals go on, restarted after 0.5–1.5 s; no worker is killed after
  it until those that were consuming have reconnected on their own (waiting at most
  {REDIS_RECONNECT:g} s).
- {reconcile_kills}, right after a plan goes `unknown`, every
  consuming worker is killed before that plan's reconciliation (due 2 s later) has run:
  its message dies unacknowledged with the worker, and only the sweeper, finding the
  look overdue in the database, brings it back.
- When nothing is approved, executing or `unknown` any more, the workers stop. Nothing is
  reconciled by hand; a plan not terminal by then counts as a failure below.

## Figures

| | |
| --- | --- |
{table}

How writes are counted: an unkeyed write (a conditional `PATCH` of a contact) is never
re-sent, so its requests are its effects. A keyed call may reach the upstream more than
once, always with the attempt's `Idempotency-Key` (re-sent after a 5xx or a lost answer,
or repeated by reconciliation to learn the outcome); the upstream answers a repeat from
its record, so its effects are counted from the upstream's state (reminders created
with the plan's unique message).

## The database goes away

The chaos run keeps PostgreSQL up; `tests/e2e/test_database_outage.py` takes it away. It
starts a private cluster (initdb and pg_ctl on a free loopback port, never the
machine's shared server), migrates it, runs a web server and a worker with the sweeper
on it, and has three agents submit and long-poll while one approved write is held at the
demo upstream. The cluster is stopped with `pg_ctl -m immediate` (a crash) while the
upstream still holds that write, and started again 4 s later. The test checks that while
it is down the API (long-polls included) and MCP answer `503` with `Retry-After` and
pages the styled `503`; that afterwards every plan an agent was given is there and each
plan wrote at most once; that the write in flight is `completed`, recorded by the worker
that held the upstream's answer (the lease is ten minutes in the test, so nothing else
can explain it); and that the logs hold a few lines for the outage, not one per request.
Three runs on a busy 2-core machine: 30 agent requests answered `503` before the
restart (the test waits for that many), every time 2 web log lines and 5 worker log
lines for the outage (one per process as it began, one per process as it ended, one for
the recorded write), and the write recorded and the API answering again 6.1 to 6.5 s
after the crash (the cluster is back 4 s after it). What an agent sees in each case is
in [api.md](api.md#while-the-database-cannot-be-reached).
""")


def main(argv: list[str]) -> int:
    source, target = Path(argv[0]), Path(argv[1])
    data = json.loads(source.read_text())
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    target.write_text(markdown(data["figures"], data["config"], when=when, command="make chaos"))
    print(f"chaos: figures written to {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
