"""A made-up plan history of any size: N settled plans and their audit events, fast.

Used by ``bench/run.py`` (B4: 1 thousand vs 1 million plans; B8: the history a
backtest reads), by the query-count tests (tests/approvals/test_hot_paths.py) and for
EXPLAIN checks of the queue, plan page, audit log, dashboard and sweeper queries
(docs/scaling.md).

    from demo.history import seed_plans
    seed_plans(1_000_000)                 # inside a configured Django process

    DATABASE_URL=postgres://… .venv/bin/python demo/history.py 200000 --analyze

What it writes (PostgreSQL: ``COPY``; other databases: ``bulk_create``):

* ``n`` plans cloned from the newest real plan in the database (or, if there is none,
  from a synthetic one on the first enabled action and agent — then the catalog must be
  loaded and an agent exist), or from the ``templates`` given, in turn (B8: plans of
  several actions, for a backtest to tell apart). Statuses are a settled history —
  mostly completed, some denied, expired, stale, rejected, cancelled — with
  ``created_at`` spread evenly over the ``days`` days before ``end`` (default: the last
  ``days`` days), so time-windowed pages see only their window. None is awaiting
  approval or approved, so the review queue and the sweeper keep their real size.
* ``events_per_plan`` audit events per plan (``plan.proposed`` and the outcome),
  numbered and hashed as the application writes them, so the sealer signs them like any
  other and ``manage.py verify_audit`` passes afterwards.

``seed_refused(n, templates=…)`` writes ``n`` refused submissions (``RefusedSubmission``:
what a policy refused at submission, kept for backtests) the same way, cloned from real
ones in turn and spread over the same days (B8: about 5% of the history).

Rows go in chunks (``chunk`` plans per transaction), so a million plans do not need a
million-row transaction. Seeded rows are ordinary rows; nothing marks them, so seed a
scratch database.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

SETTLED = (
    ["completed"] * 12
    + ["already_in_desired_state", "rejected", "stale", "refused"]
    + ["denied"] * 2
    + ["expired"] * 2
    + ["cancelled"]
)


def _template():
    """The plan the seeded ones are cloned from."""
    from django.utils import timezone

    from actions.models import Action, Agent
    from approvals.models import Plan

    plan = Plan.objects.order_by("-created_at").first()
    if plan is not None:
        return plan
    action = Action.objects.filter(enabled=True).order_by("name").first()
    agent = Agent.objects.order_by("name").first()
    if action is None or agent is None:
        raise RuntimeError("seed_plans needs a plan, or an enabled action and an agent, first")
    now = timezone.now()
    return Plan(
        action=action,
        action_version=action.version,
        action_digest=action.digest,
        agent=agent,
        kind=action.kind,
        consequence_class=action.consequence_class,
        input={"seeded": True},
        target={"connector": action.connector.name, "path": "/seeded", "base_url": ""},
        before={"seeded": True},
        after={"seeded": True},
        changes=[],
        precondition={"kind": "none"},
        policy={"mode": "per_call", "approvers_required": 1},
        write_request={"method": "POST", "path": "/seeded", "headers": {}, "body": None},
        fingerprint="0" * 64,
        canonical="{}",
        created_at=now,
        expires_at=now + timedelta(hours=1),
    )


def _plan_rows(templates, n: int, days: float, rng: random.Random, end=None):
    """(row dict, status) for n plans, newest first, spread over the ``days`` before
    ``end`` (default: now), each cloned from the next of ``templates`` in turn."""
    from django.utils import timezone

    from approvals.models import Plan

    fields = list(Plan._meta.concrete_fields)
    bases: list[dict[str, object]] = []
    for template in templates:
        base: dict[str, object] = {}
        for f in fields:
            value = getattr(template, f.attname)
            if f.get_internal_type() == "JSONField":
                value = json.dumps(value)
            base[f.column] = value
        bases.append(base)
    now = end or timezone.now()
    step = days * 86400 / max(1, n)
    for i in range(n):
        created = now - timedelta(seconds=60 + i * step + rng.random() * step)
        status = SETTLED[i % len(SETTLED)]
        decided = created + timedelta(seconds=30 + rng.random() * 600)
        row = dict(bases[i % len(bases)])
        row.update(
            id=uuid.uuid4(),
            correlation_id=uuid.uuid4(),
            status=status,
            created_at=created,
            expires_at=created + timedelta(hours=1),
            decided_at=None if status in ("expired", "cancelled") else decided,
            enqueued_at=None,
            claimed_at=None,
            finished_at=decided + timedelta(seconds=1),
            revision_of_id=None,
        )
        yield row


def seed_plans(
    n: int,
    *,
    events_per_plan: int = 2,
    days: float = 365.0,
    chunk: int = 20_000,
    seed: int = 8,
    progress=None,
    templates=None,
    end=None,
) -> int:
    """Insert ``n`` settled plans (and their audit events). Returns how many plans.

    ``templates``: the plans to clone, in turn (default: the newest plan); ``end``: the
    newest plan's time is a minute before it (default: now)."""
    from django.db import connection

    rng = random.Random(seed)
    templates = list(templates) if templates else [_template()]
    done = 0
    rows = _plan_rows(templates, n, days, rng, end)
    while done < n:
        batch = [next(rows) for _ in range(min(chunk, n - done))]
        if connection.vendor == "postgresql":
            _copy_chunk(batch, events_per_plan)
        else:
            _bulk_chunk(batch, events_per_plan)
        done += len(batch)
        if progress:
            progress(done)
    return done


def seed_refused(
    n: int,
    *,
    templates,
    days: float = 365.0,
    chunk: int = 20_000,
    seed: int = 9,
    end=None,
) -> int:
    """Insert ``n`` refused submissions cloned from ``templates`` (RefusedSubmission rows,
    in turn), spread evenly over the ``days`` before ``end`` (default: now), each with
    the time the policies saw equal to its own. Returns how many."""
    from django.db import connection, transaction
    from django.utils import timezone

    from approvals.models import RefusedSubmission

    rng = random.Random(seed)
    fields = list(RefusedSubmission._meta.concrete_fields)
    json_columns = {f.column for f in fields if f.get_internal_type() == "JSONField"}
    bases = [{f.column: getattr(t, f.attname) for f in fields} for t in templates]
    now = end or timezone.now()
    step = days * 86400 / max(1, n)
    columns = [f.column for f in fields]
    done = 0
    while done < n:
        batch = []
        for i in range(done, min(n, done + chunk)):
            created = now - timedelta(seconds=60 + i * step + rng.random() * step)
            row = dict(bases[i % len(bases)])
            row.update(
                id=uuid.uuid4(),
                correlation_id=uuid.uuid4(),
                created_at=created,
                evaluated_at=created,
            )
            batch.append(row)
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with (
                    connection.cursor() as cursor,
                    cursor.cursor.copy(
                        f"COPY {RefusedSubmission._meta.db_table} ({', '.join(columns)}) FROM STDIN"
                    ) as copy,
                ):
                    for row in batch:
                        copy.write_row(
                            [json.dumps(row[c]) if c in json_columns else row[c] for c in columns]
                        )
            else:
                attnames = {f.column: f.attname for f in fields}
                RefusedSubmission.objects.bulk_create(
                    [
                        RefusedSubmission(**{attnames[c]: v for c, v in row.items()})
                        for row in batch
                    ],
                    batch_size=2000,
                )
        done += len(batch)
    return done


def _events_for(row: dict, events_per_plan: int) -> list[tuple]:
    """(at, kind, actor, plan_id, fingerprint, data) for one seeded plan."""
    created, finished = row["created_at"], row["finished_at"]
    events = [
        (
            created,
            "plan.proposed",
            "agent:seeded",
            row["id"],
            row["fingerprint"],
            {"action": "seeded", "seeded": True},
        )
    ]
    if events_per_plan >= 2:
        events.append(
            (
                finished,
                f"plan.{row['status']}",
                "system:seed",
                row["id"],
                row["fingerprint"],
                {"from": "awaiting_approval", "to": row["status"], "seeded": True},
            )
        )
    for k in range(2, events_per_plan):
        events.append(
            (finished, "seed.note", "system:seed", row["id"], row["fingerprint"], {"n": k})
        )
    return events


def _numbered(events: list[tuple], ids: list[int]) -> list[tuple]:
    """Each event with its sequence number, canonical bytes and hash, as the application
    writes them (actions.lib.audit), ready for the sealer."""
    from actions.lib.audit import event_bytes
    from actions.lib.canonical import sha256_hex

    out = []
    for seq, (at, kind, actor, plan_id, fingerprint, data) in zip(ids, events, strict=True):
        body = event_bytes(
            seq=seq,
            at=at.isoformat(),
            kind=kind,
            actor=actor,
            plan_id=str(plan_id),
            fingerprint=fingerprint,
            data=data,
        )
        out.append(
            (seq, at, kind, actor, plan_id, fingerprint, data, body.decode(), sha256_hex(body))
        )
    return out


def _copy_chunk(batch: list[dict], events_per_plan: int) -> None:
    from django.db import connection, transaction

    from actions.lib.models import AuditEvent
    from approvals.models import Plan

    columns = [f.column for f in Plan._meta.concrete_fields]
    with transaction.atomic(), connection.cursor() as cursor:
        raw = cursor.cursor
        with raw.copy(f"COPY {Plan._meta.db_table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in batch:
                copy.write_row([row[c] for c in columns])
        if not events_per_plan:
            return
        events = [e for row in batch for e in _events_for(row, events_per_plan)]
        table = AuditEvent._meta.db_table
        # Numbers drawn as the application draws them: the transaction id first (the
        # sealer's rule for gaps, actions/lib/checkpoints.py).
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id'))"
            " FROM (SELECT pg_current_xact_id() OFFSET 0) AS x, generate_series(1, %s)",
            [table, len(events)],
        )
        ids = sorted(row[0] for row in cursor.fetchall())
        with raw.copy(
            f"COPY {table} (id, at, kind, actor, plan_id, fingerprint, data, prev_hash, body,"
            " hash) FROM STDIN"
        ) as copy:
            for seq, at, kind, actor, plan_id, fingerprint, data, body, digest in _numbered(
                events, ids
            ):
                copy.write_row(
                    [seq, at, kind, actor, plan_id, fingerprint, json.dumps(data), "", body, digest]
                )


def _bulk_chunk(batch: list[dict], events_per_plan: int) -> None:
    from django.db import transaction

    from actions.lib.models import AuditEvent
    from approvals.models import Plan

    fields = {f.column: f.attname for f in Plan._meta.concrete_fields}
    json_columns = {
        f.column for f in Plan._meta.concrete_fields if f.get_internal_type() == "JSONField"
    }
    plans = []
    for row in batch:
        values = {fields[c]: (json.loads(v) if c in json_columns else v) for c, v in row.items()}
        plans.append(Plan(**values))
    with transaction.atomic():
        Plan.objects.bulk_create(plans, batch_size=2000)
        if not events_per_plan:
            return
        # SQLite: one writer at a time, so the next numbers are this transaction's.
        last = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
        events = [e for row in batch for e in _events_for(row, events_per_plan)]
        ids = list(range(last + 1, last + 1 + len(events)))
        AuditEvent.objects.bulk_create(
            [
                AuditEvent(
                    id=seq,
                    at=at,
                    kind=kind,
                    actor=actor,
                    plan_id=plan_id,
                    fingerprint=fingerprint,
                    data=data,
                    body=body,
                    hash=digest,
                )
                for seq, at, kind, actor, plan_id, fingerprint, data, body, digest in _numbered(
                    events, ids
                )
            ],
            batch_size=2000,
        )


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plans", type=int)
    parser.add_argument("--events-per-plan", type=int, default=2)
    parser.add_argument("--days", type=float, default=365.0)
    parser.add_argument("--analyze", action="store_true", help="VACUUM ANALYZE afterwards")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.db import connection

    started = time.monotonic()
    seed_plans(
        args.plans,
        events_per_plan=args.events_per_plan,
        days=args.days,
        progress=lambda done: print(f"{done} plans", file=sys.stderr),
    )
    if args.analyze and connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE approvals_plan")
            cursor.execute("VACUUM ANALYZE approvals_auditevent")
    print(f"seeded {args.plans} plans in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
