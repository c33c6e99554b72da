"""Writing the audit trail: append-only rows, each with its canonical bytes and their hash,
written concurrently; actions.lib.checkpoints links them afterwards."""

from __future__ import annotations

import json
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from actions.lib.canonical import canonical_bytes, sha256_hex

from .models import AuditEvent

GENESIS = "0" * 64

# The sequence behind AuditEvent.id on PostgreSQL, looked up once per process.
_sequence: dict[str, str] = {}


def event_hash(
    *, prev_hash: str, at: str, kind: str, actor: str, plan_id: str, fingerprint: str, data: Any
) -> str:
    """The hash of a chained event (written before the Merkle tree; see event_entry)."""
    return sha256_hex(
        _chained_bytes(
            prev_hash=prev_hash,
            at=at,
            kind=kind,
            actor=actor,
            plan_id=plan_id,
            fingerprint=fingerprint,
            data=data,
        )
    )


def _chained_bytes(*, prev_hash, at, kind, actor, plan_id, fingerprint, data) -> bytes:
    body = {
        "prev": prev_hash,
        "at": at,
        "kind": kind,
        "actor": actor,
        "plan": plan_id,
        "fingerprint": fingerprint,
        "data": data,
    }
    return canonical_bytes(body)


def event_bytes(*, seq: int, at: str, kind: str, actor: str, plan_id: str, fingerprint: str, data):
    """An event's canonical bytes: what its hash covers and the tree's leaf holds.

    The sequence number is inside, so an event moved to another position (two rows
    swapped, a row copied into a gap) no longer matches its own bytes."""
    return canonical_bytes(
        {
            "seq": seq,
            "at": at,
            "kind": kind,
            "actor": actor,
            "plan": plan_id,
            "fingerprint": fingerprint,
            "data": data,
        }
    )


def event_entry(event: AuditEvent) -> bytes:
    """The bytes the tree holds for ``event``, recomputed from its fields (never from the
    stored ``body``: a field edited without the body must not go unnoticed)."""
    fields = {
        "at": event.at.isoformat(),
        "kind": event.kind,
        "actor": event.actor,
        "plan_id": str(event.plan_id) if event.plan_id else "",
        "fingerprint": event.fingerprint,
        "data": event.data,
    }
    if not event.body and event.prev_hash:
        return _chained_bytes(prev_hash=event.prev_hash, **fields)
    return event_bytes(seq=event.id, **fields)


def _insert_postgresql(fields: dict[str, Any], change=None, along=()) -> tuple[int, str] | None:
    """Insert the event in one statement (one round trip); returns its number and bytes.

    The transaction's id is assigned first, then the number drawn, in that order (the
    CTEs are materialized one after the other): the sealer relies on every number being
    drawn by a transaction that already has an id, so that once the transactions running
    at some instant have ended, no event numbered below what was visible then can still
    commit (actions.lib.checkpoints). The number is part of the bytes, so they are
    completed in the statement: "seq" sorts last among the keys, so the canonical bytes
    are those of the other fields with ``,"seq":<n>}`` in place of the closing brace, and
    their SHA-256 is taken there too. Nothing else is computed in SQL (the time is this
    process's, as before).

    ``change``, an UPDATE ... RETURNING and its parameters, runs first in the same
    statement, and the event is drawn from the rows it returns: written if and only if
    the change changed a row (None otherwise, with no number drawn). Each of ``along``
    (statements with their parameters) runs in the same statement too, whatever the
    change does."""
    table = AuditEvent._meta.db_table
    without_seq = canonical_bytes(
        {
            "at": fields["at"],
            "kind": fields["kind"],
            "actor": fields["actor"],
            "plan": fields["plan_id"],
            "fingerprint": fields["fingerprint"],
            "data": fields["data"],
        }
    )
    prefix = without_seq[:-1].decode() + ',"seq":'
    writes = [(f"along{n}", sql, params) for n, (sql, params) in enumerate(along)]
    if change is not None:
        writes.append(("moved", *change))
    moved = "".join(f"{name} AS ({sql}), " for name, sql, _ in writes)
    moved_params = [param for _, _, params in writes for param in params]
    source = " FROM moved" if change is not None else ""
    with connection.cursor() as cursor:
        if table not in _sequence:
            cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
            _sequence[table] = cursor.fetchone()[0]
        cursor.execute(
            f"WITH {moved}x AS MATERIALIZED (SELECT pg_current_xact_id(){source}),"
            " n AS MATERIALIZED (SELECT nextval(%s) AS id FROM x),"
            " b AS MATERIALIZED (SELECT n.id, %s::text || n.id::text || '}' AS body FROM n)"
            f" INSERT INTO {connection.ops.quote_name(table)}"
            " (id, at, kind, actor, plan_id, fingerprint, data, prev_hash, body, hash)"
            " SELECT b.id, %s, %s, %s, %s::uuid, %s, %s::jsonb, '', b.body,"
            " encode(sha256(convert_to(b.body, 'UTF8')), 'hex') FROM b RETURNING id",
            [
                *moved_params,
                _sequence[table],
                prefix,
                fields["at_value"],
                fields["kind"],
                fields["actor"],
                fields["plan_id"] or None,
                fields["fingerprint"],
                json.dumps(fields["data"]),
            ],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    return row[0], f"{prefix}{row[0]}}}"


def _event_fields(
    *, kind: str, actor: str, plan, data: dict[str, Any] | None, alone: bool = False
) -> dict[str, Any]:
    """What an event records, taken once: the time is this process's, now.

    Refused outside a transaction, but for an event ``alone`` in one statement with the
    change it records and nothing else (audit_record_change with nothing ``along``), on
    a connection in autocommit: that statement is its own transaction, both or neither."""
    current = transaction.get_connection()
    if not current.in_atomic_block and not (alone and current.get_autocommit()):
        raise RuntimeError("an audit event must be written inside the transaction it records")
    at = timezone.now()
    return {
        "at_value": at,
        "at": at.isoformat(),
        "kind": kind,
        "actor": actor,
        "plan_id": str(plan.id) if plan is not None else "",
        "fingerprint": plan.fingerprint if plan is not None else "",
        "data": data or {},
    }


def _inserted(fields: dict[str, Any], plan, seq: int, body: str) -> AuditEvent:
    """The event as written by _insert_postgresql, without reading it back."""
    event = AuditEvent(
        id=seq,
        at=fields["at_value"],
        kind=fields["kind"],
        actor=fields["actor"],
        plan=plan,
        fingerprint=fields["fingerprint"],
        data=fields["data"],
        body=body,
        hash=sha256_hex(body.encode()),
    )
    event._state.adding = False
    event._state.db = connection.alias
    return event


def audit_record(
    *,
    kind: str,
    actor: str,
    plan=None,
    data: dict[str, Any] | None = None,
    along: list[tuple[str, list[Any]]] = (),
) -> AuditEvent:
    """Append one event. Must run inside the transaction of the change it records.

    No lock and no read of another event: the row gets its sequence number from the
    database and is linked to the others later, once committed, by the sealer. On
    SQLite the number is the next rowid, taken under SQLite's single writer lock.

    ``along``: the writes of the change the event records (an INSERT, with its
    parameters), made first: in the event's statement on PostgreSQL (one round trip for
    both), each on its own elsewhere. The event is the same either way.
    """
    fields = _event_fields(kind=kind, actor=actor, plan=plan, data=data)
    if connection.vendor == "postgresql":
        return _inserted(fields, plan, *_insert_postgresql(fields, along=along))
    for sql, params in along:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
    # SQLite: transactions begin IMMEDIATE (config/settings.py), so this one holds the
    # only write lock from its start to its commit and the next number is ours (a
    # rolled-back number is simply used again: no gaps on SQLite).
    seq = (AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0) + 1
    body = event_bytes(
        seq=seq,
        at=fields["at"],
        kind=kind,
        actor=actor,
        plan_id=fields["plan_id"],
        fingerprint=fields["fingerprint"],
        data=fields["data"],
    )
    return AuditEvent.objects.create(
        id=seq,
        at=fields["at_value"],
        kind=kind,
        actor=actor,
        plan=plan,
        fingerprint=fields["fingerprint"],
        data=fields["data"],
        body=body.decode(),
        hash=sha256_hex(body),
    )


def audit_record_change(
    change: tuple[str, list[Any]],
    *,
    along: list[tuple[str, list[Any]]] = (),
    kind: str,
    actor: str,
    plan=None,
    data: dict[str, Any] | None = None,
) -> AuditEvent | None:
    """Run ``change`` (PostgreSQL only: an UPDATE ... RETURNING, with its parameters) and
    append the event recording it, in one statement: the event is written if and only if
    the change returned a row, and None is returned when it changed nothing.

    One round trip instead of two for a conditional change and its event, with the same
    event (bytes, hash, number drawn after the transaction's id) as audit_record's.
    ``along``: other writes of the same change (an INSERT), run in the same statement
    whether or not ``change`` changed a row: undoing them then is the caller's
    transaction's business, so with any it must run inside one. Without, it may run in
    autocommit: the change and its event are then one statement, its own transaction."""
    fields = _event_fields(kind=kind, actor=actor, plan=plan, data=data, alone=not along)
    inserted = _insert_postgresql(fields, change, along)
    return None if inserted is None else _inserted(fields, plan, *inserted)


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
