"""Writing the audit trail: append-only rows, each chained to the one before by hash."""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from actions.lib.canonical import canonical_bytes, sha256_hex

from .models import AuditEvent

GENESIS = "0" * 64
# Any constant: the advisory lock that makes audit writers take turns on PostgreSQL.
_AUDIT_LOCK_ID = 0x636F756E7465


def event_hash(
    *, prev_hash: str, at: str, kind: str, actor: str, plan_id: str, fingerprint: str, data: Any
) -> str:
    body = {
        "prev": prev_hash,
        "at": at,
        "kind": kind,
        "actor": actor,
        "plan": plan_id,
        "fingerprint": fingerprint,
        "data": data,
    }
    return sha256_hex(canonical_bytes(body))


def audit_record(
    *, kind: str, actor: str, plan=None, data: dict[str, Any] | None = None
) -> AuditEvent:
    """Append one event. Must run inside the transaction of the change it records.

    The writers are serialized until commit (advisory transaction lock on PostgreSQL;
    SQLite runs one writer at a time anyway), so each event sees the true last hash.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit_record() must run inside the transaction it records")
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # One round trip: the lock, then (a new statement, so a snapshot taken
            # once the lock is held) the last hash.
            cursor.execute(
                f"SELECT pg_advisory_xact_lock({_AUDIT_LOCK_ID}); "
                f"SELECT hash FROM {table} ORDER BY id DESC LIMIT 1"
            )
            cursor.nextset()
        else:
            cursor.execute(f"SELECT hash FROM {table} ORDER BY id DESC LIMIT 1")
        row = cursor.fetchone()
    prev_hash = row[0] if row else GENESIS
    at = timezone.now()
    data = data or {}
    fingerprint = plan.fingerprint if plan is not None else ""
    digest = event_hash(
        prev_hash=prev_hash,
        at=at.isoformat(),
        kind=kind,
        actor=actor,
        plan_id=str(plan.id) if plan is not None else "",
        fingerprint=fingerprint,
        data=data,
    )
    return AuditEvent.objects.create(
        at=at,
        kind=kind,
        actor=actor,
        plan=plan,
        fingerprint=fingerprint,
        data=data,
        prev_hash=prev_hash,
        hash=digest,
    )


def audit_kinds() -> list[str]:
    """The distinct event kinds, sorted (the audit log's filter list).

    On PostgreSQL a skip scan over the (kind, id) index: one index probe per kind,
    however long the trail, instead of reading every event."""
    if connection.vendor != "postgresql":
        return list(AuditEvent.objects.order_by("kind").values_list("kind", flat=True).distinct())
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH RECURSIVE kinds(kind) AS (
                (SELECT kind FROM {table} ORDER BY kind LIMIT 1)
                UNION ALL
                SELECT (SELECT e.kind FROM {table} e WHERE e.kind > k.kind
                        ORDER BY e.kind LIMIT 1)
                FROM kinds k WHERE k.kind IS NOT NULL
            )
            SELECT kind FROM kinds WHERE kind IS NOT NULL
            """
        )
        return [row[0] for row in cursor.fetchall()]


def audit_verify() -> tuple[int, AuditEvent | None]:
    """Walk the chain; return (events checked, first broken event or None)."""
    prev_hash = GENESIS
    checked = 0
    for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
        expected = event_hash(
            prev_hash=prev_hash,
            at=event.at.isoformat(),
            kind=event.kind,
            actor=event.actor,
            plan_id=str(event.plan_id) if event.plan_id else "",
            fingerprint=event.fingerprint,
            data=event.data,
        )
        if event.prev_hash != prev_hash or event.hash != expected:
            return checked, event
        prev_hash = event.hash
        checked += 1
    return checked, None
