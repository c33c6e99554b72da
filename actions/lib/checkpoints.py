"""Sealing the audit trail: committed events, in sequence order, into an RFC 9162 Merkle
tree, with checkpoints signed by a key only the sealer holds; and verifying it all.

Writers never wait for one another (actions.lib.audit). One sealer at a time — the
lease below, taken in turn by the workers holding the key (config/celery.py, Sealer) —
reads the events committed since the last checkpoint and signs a new one:

    countersign audit checkpoint v1 / origin / tree size / root / last event id /
    previous tree size / digest of the skipped sequence numbers / time

**The rule for gaps.** A sequence number whose transaction rolled back never becomes an
event, and one whose transaction is still open may commit later. A checkpoint covers
the events numbered up to ``last_event_id``; the sealer only chooses a
``last_event_id`` once no event numbered at or below it can still commit. On
PostgreSQL every writer has a transaction id before it draws its number (audit.py), so
the sealer notes the highest number visible and the transactions running at that
moment, and waits (briefly, without blocking anyone) until those have ended: every
number at or below is then final, committed or not. The missing ones are recorded in
the checkpoint as skipped (``gaps``, covered by the signature), so a committed event
can never appear behind a sealed checkpoint's size, a gap never stalls the sealer, and
an event that appears in a recorded gap later was inserted. On SQLite writers take
turns and numbers have no gaps.

The signing key (COUNTERSIGN_AUDIT_KEY_FILE, Ed25519) is given to the sealing workers
only, like the worker key: web processes can verify a checkpoint, never make one.

Over 600 lines: sealing and verifying are one format. The checkpoint note, the rule for
gaps and the signature are written and checked by the same functions here, so a change
to what a checkpoint says cannot reach one side without the other.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from . import dispatch
from .audit import event_entry
from .canonical import canonical_bytes, sha256_hex
from .merkle import Frontier, consistency_proof, leaf_hash, verify_consistency
from .models import AuditCheckpoint, AuditEvent, AuditSealerLease

log = logging.getLogger(__name__)

NOTE_HEADER = "countersign audit checkpoint v1"
LEASE = "sealer"
# The dashboard raises the alarm when the oldest unsealed event is older than this: the
# sealer runs every second, so that means no worker holding the audit key is sealing.
SEAL_STALE_SECONDS = 30.0


class SealingKeyUnavailable(Exception):
    """This process holds no audit signing key: it is not a sealer."""


# --- keys -------------------------------------------------------------------------------


def generate_signing_key() -> tuple[str, str]:
    """A new Ed25519 key pair as (private seed, public key), both base64."""
    key = SigningKey.generate()
    return base64.b64encode(bytes(key)).decode(), base64.b64encode(bytes(key.verify_key)).decode()


def key_id(verify_key: VerifyKey) -> str:
    return hashlib.sha256(bytes(verify_key)).hexdigest()[:16]


def signing_key() -> SigningKey:
    path = settings.COUNTERSIGN_AUDIT_KEY_FILE
    if not path:
        raise SealingKeyUnavailable("this process holds no audit signing key")
    try:
        raw = Path(path).read_text().strip()
    except OSError:
        raise SealingKeyUnavailable("the audit signing key file cannot be read") from None
    return SigningKey(base64.b64decode(raw))


def verify_keys(extra: list[str] | None = None) -> dict[str, VerifyKey]:
    """The public keys checkpoints may be signed with, by key id (COUNTERSIGN_AUDIT_PUBLIC_KEY
    may list several, comma-separated, while a key is being replaced)."""
    values = [v.strip() for v in (settings.COUNTERSIGN_AUDIT_PUBLIC_KEY or "").split(",")]
    keys = {}
    for value in [*values, *(extra or [])]:
        if value:
            vk = VerifyKey(base64.b64decode(value))
            keys[key_id(vk)] = vk
    return keys


# --- checkpoints as signed notes ---------------------------------------------------------


def gaps_digest(gaps: list) -> str:
    return sha256_hex(canonical_bytes(gaps))


def checkpoint_note(cp: dict[str, Any]) -> bytes:
    """The bytes a checkpoint's signature covers."""
    lines = [
        NOTE_HEADER,
        cp["origin"],
        str(cp["tree_size"]),
        cp["root_hash"],
        str(cp["last_event_id"]),
        str(cp["previous_size"]),
        gaps_digest(cp["gaps"]),
        cp["at"],
    ]
    return ("\n".join(lines) + "\n").encode()


def checkpoint_json(cp: AuditCheckpoint) -> dict[str, Any]:
    """A checkpoint as exported (one JSON line each): everything needed to check its
    signature and its consistency with the one before, without the database."""
    return {
        "origin": cp.origin,
        "tree_size": cp.tree_size,
        "previous_size": cp.previous_size,
        "root_hash": cp.root_hash,
        "last_event_id": cp.last_event_id,
        "gaps": cp.gaps,
        "at": cp.at.isoformat(),
        "key_id": cp.key_id,
        "signature": cp.signature,
        "proof": cp.proof,
    }


def checkpoints_export(path: str | Path) -> int:
    """Write every checkpoint to ``path`` as JSON lines; returns how many."""
    count = 0
    with open(path, "w") as fh:
        for cp in AuditCheckpoint.objects.order_by("tree_size").iterator(chunk_size=1000):
            fh.write(json.dumps(checkpoint_json(cp), sort_keys=True) + "\n")
            count += 1
    return count


def _export_append(cp: AuditCheckpoint) -> None:
    """Append a new checkpoint to COUNTERSIGN_AUDIT_EXPORT_FILE, the copy kept away from
    the database. A failure is logged: the checkpoint stands, `verify_audit --export`
    can write the whole file again."""
    path = settings.COUNTERSIGN_AUDIT_EXPORT_FILE
    if not path:
        return
    try:
        with open(path, "a") as fh:
            fh.write(json.dumps(checkpoint_json(cp), sort_keys=True) + "\n")
    except OSError as exc:
        log.error("could not append the audit checkpoint to the export file: %s", exc)


def checkpoint_witness(*, checkpoint_id: int) -> str:
    """POST one checkpoint, as its export line, to COUNTERSIGN_AUDIT_WITNESS_URL: a copy
    held by someone else. The body is signed by the checkpoint's own Ed25519 signature
    (the witness verifies it with the public key; no shared secret). Returns
    ``delivered``, ``failed`` (worth retrying) or ``refused`` (a 4xx: not retried)."""
    url = settings.COUNTERSIGN_AUDIT_WITNESS_URL
    cp = AuditCheckpoint.objects.filter(id=checkpoint_id).first()
    if not url or cp is None:
        return "refused"
    body = json.dumps(checkpoint_json(cp), sort_keys=True).encode()
    try:
        with httpx.Client(
            timeout=settings.COUNTERSIGN_WEBHOOK_TIMEOUT, follow_redirects=False, trust_env=False
        ) as client:
            response = client.post(url, content=body, headers={"Content-Type": "application/json"})
    except httpx.HTTPError as exc:
        log.warning(
            "audit witness: checkpoint %s not delivered (%s)", cp.tree_size, type(exc).__name__
        )
        return "failed"
    if response.is_success:
        return "delivered"
    log.warning("audit witness: checkpoint %s answered %s", cp.tree_size, response.status_code)
    retry = response.status_code >= 500 or response.status_code in (408, 429)
    return "failed" if retry else "refused"


# --- the lease -------------------------------------------------------------------------


def _lease_take(holder: str, now) -> bool:
    """Take the lease if it is free, expired or ours: one UPDATE once its row exists."""
    until = now + timedelta(seconds=settings.COUNTERSIGN_SEAL_LEASE_SECONDS)
    free = AuditSealerLease.objects.filter(name=LEASE).exclude(
        expires_at__gt=now, holder__gt=""
    ) | AuditSealerLease.objects.filter(name=LEASE, holder=holder)
    if free.update(holder=holder, expires_at=until):
        return True
    _, created = AuditSealerLease.objects.get_or_create(name=LEASE)
    return created and bool(free.update(holder=holder, expires_at=until))


def _lease_renew(holder: str) -> bool:
    now = timezone.now()
    until = now + timedelta(seconds=settings.COUNTERSIGN_SEAL_LEASE_SECONDS)
    return bool(
        AuditSealerLease.objects.filter(name=LEASE, holder=holder, expires_at__gt=now).update(
            expires_at=until
        )
    )


def _lease_release(holder: str) -> None:
    AuditSealerLease.objects.filter(name=LEASE, holder=holder).update(holder="", expires_at=None)


# --- sealing ---------------------------------------------------------------------------


def _horizon(wait_seconds: float) -> int | None:
    """The highest event number no transaction can still commit below (inclusive), or
    None if transactions that may hold lower numbers did not end within the wait."""
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            cursor.execute(f"SELECT max(id) FROM {table}")
            return cursor.fetchone()[0] or 0
        # One statement, one snapshot: the highest number committed, who was running, and
        # which of those are transactions of other databases in the cluster (they cannot
        # write this table). One of another database that began as the statement ran may
        # be missing from that list: it is then waited for like ours, which only delays.
        cursor.execute(
            f"SELECT pg_current_snapshot()::text, pg_current_xact_id_if_assigned()::text,"
            f" (SELECT max(id) FROM {table}),"
            " (SELECT array_agg(backend_xid::text) FROM pg_stat_activity"
            "  WHERE backend_xid IS NOT NULL AND datname IS DISTINCT FROM current_database())"
        )
        snapshot, own, top, others = cursor.fetchone()
        elsewhere = {int(xid) for xid in others or ()}
        running = [
            x
            for x in snapshot.split(":")[2].split(",")
            if x and x != own and int(x) & 0xFFFFFFFF not in elsewhere
        ]
        deadline = time.monotonic() + wait_seconds
        while running:
            cursor.execute(
                "SELECT x::text FROM unnest(%s::xid8[]) AS x"
                " WHERE pg_xact_status(x) = 'in progress'",
                [running],
            )
            running = [row[0] for row in cursor.fetchall()]
            if running and time.monotonic() >= deadline:
                return None
            if running:
                time.sleep(0.005)
        return top or 0


def _gap_ranges(after: int, ids: list[int], last: int) -> list[list[int]]:
    """The numbers in (after, last] missing from ``ids`` (sorted), as [first, last] ranges."""
    gaps, expected = [], after + 1
    for i in ids:
        if i > expected:
            gaps.append([expected, i - 1])
        expected = i + 1
    if last >= expected:
        gaps.append([expected, last])
    return gaps


def _uncovered(low: int, high: int, gaps: list) -> list[tuple[int, int]]:
    """The runs of numbers in [low, high] that ``gaps`` (sorted ranges) does not cover."""
    runs, cursor = [], low
    for first, last in gaps:
        if last < cursor:
            continue
        if first > high:
            break
        if first > cursor:
            runs.append((cursor, first - 1))
        cursor = max(cursor, last + 1)
    if cursor <= high:
        runs.append((cursor, high))
    return runs


def _in_gaps(gaps: list, number: int) -> bool:
    return any(first <= number <= last for first, last in gaps)


class SealerError(Exception):
    """The log cannot be extended as it stands (its last checkpoint does not check out,
    or an event does not match its own bytes); nothing is signed until a person looks."""


def audit_seal(*, holder: str | None = None, max_batches: int | None = None) -> dict[str, Any]:
    """Integrate committed events into the tree and sign checkpoints, one per batch of at
    most COUNTERSIGN_SEAL_BATCH events, until caught up. Returns what it did.

    Safe to run anywhere at any time: without the lease it does nothing; killed at any
    point it leaves either no checkpoint or a whole one, and the next run goes on from
    the last whole one."""
    key = signing_key()
    vk_id = key_id(key.verify_key)
    holder = holder or f"{socket.gethostname()}:{os.getpid()}"
    report = {"leased": False, "checkpoints": 0, "events": 0, "waiting": False, "idle": False}
    sealed_to = AuditCheckpoint.objects.order_by("-tree_size").values_list("last_event_id")[:1]
    if not AuditEvent.objects.filter(id__gt=Coalesce(Subquery(sealed_to), 0)).exists():
        report["idle"] = True  # nothing new: not even the lease is written
        return report
    if not _lease_take(holder, timezone.now()):
        return report
    report["leased"] = True
    try:
        while max_batches is None or report["checkpoints"] < max_batches:
            horizon = _horizon(settings.COUNTERSIGN_SEAL_WAIT_SECONDS)
            if horizon is None:
                report["waiting"] = True
                break
            sealed = _seal_batch(key, vk_id, holder, horizon)
            if not sealed:
                break
            report["checkpoints"] += 1
            report["events"] += sealed
            if sealed < settings.COUNTERSIGN_SEAL_BATCH:
                break  # caught up with the horizon: what committed since waits a tick
    finally:
        _lease_release(holder)
    return report


def _seal_batch(key: SigningKey, vk_id: str, holder: str, horizon: int) -> int:
    # What the next checkpoint extends: not its proof, gaps or signature.
    last = (
        AuditCheckpoint.objects.order_by("-tree_size")
        .only("tree_size", "last_event_id", "root_hash", "at", "frontier")
        .first()
    )
    after = last.last_event_id if last else 0
    if horizon <= after:
        return 0
    frontier = Frontier.from_json(last.frontier) if last else Frontier()
    if last is not None and (
        frontier.size != last.tree_size or frontier.root().hex() != last.root_hash
    ):
        raise SealerError(f"checkpoint {last.tree_size}: its frontier does not give its root")
    events = list(
        AuditEvent.objects.filter(id__gt=after, id__lte=horizon).order_by("id")[
            : settings.COUNTERSIGN_SEAL_BATCH
        ]
    )
    if not events:
        return 0  # only unused numbers so far: the next checkpoint will record them
    ids = [e.id for e in events]
    # A full batch ends at its last event; otherwise every number up to the horizon is
    # final, so the checkpoint reaches it (and records the numbers nobody used).
    upto = ids[-1] if len(events) == settings.COUNTERSIGN_SEAL_BATCH else horizon
    leaves = []
    for event in events:
        entry = event_entry(event)
        if event.body and entry.decode() != event.body or sha256_hex(entry) != event.hash:
            raise SealerError(f"event {event.id} does not match its own bytes; not sealed")
        leaves.append(leaf_hash(entry))
    proof = consistency_proof(frontier, leaves)
    for leaf in leaves:
        frontier.append(leaf)
    now = timezone.now()
    if last is not None and now < last.at:
        now = last.at  # checkpoint times never go backwards, whatever the clock does
    cp = {
        "origin": settings.COUNTERSIGN_AUDIT_ORIGIN,
        "tree_size": frontier.size,
        "previous_size": last.tree_size if last else 0,
        "root_hash": frontier.root().hex(),
        "last_event_id": upto,
        "gaps": _gap_ranges(after, ids, upto),
        "at": now.isoformat(),
    }
    signature = base64.b64encode(key.sign(checkpoint_note(cp)).signature).decode()
    try:
        with transaction.atomic():
            if not _lease_renew(holder):
                return 0
            row = AuditCheckpoint.objects.create(
                tree_size=cp["tree_size"],
                previous_size=cp["previous_size"],
                last_event_id=upto,
                root_hash=cp["root_hash"],
                at=now,
                origin=cp["origin"],
                key_id=vk_id,
                signature=signature,
                proof=[p.hex() for p in proof],
                gaps=cp["gaps"],
                frontier=frontier.to_json(),
            )
            if settings.COUNTERSIGN_AUDIT_WITNESS_URL:
                dispatch.on_commit(dispatch.WITNESS_CHECKPOINT, row.id)
    except IntegrityError:
        return 0  # another sealer extended this checkpoint first: never a fork
    _export_append(row)
    return len(events)


def audit_unsealed_age(*, now=None) -> float:
    """Seconds since the oldest event no checkpoint covers yet was written (0 when all
    are sealed): the dashboard's line and a gauge for metrics."""
    now = now or timezone.now()
    last = AuditCheckpoint.objects.order_by("-tree_size").values_list("last_event_id").first()
    oldest = (
        AuditEvent.objects.filter(id__gt=last[0] if last else 0)
        .order_by("id")
        .values_list("at", flat=True)
        .first()
    )
    return max(0.0, (now - oldest).total_seconds()) if oldest else 0.0


# --- verification ----------------------------------------------------------------------


@dataclass
class Problem:
    message: str
    position: int | None = None  # in the tree, from 0
    event_id: int | None = None

    def __str__(self) -> str:
        where = []
        if self.position is not None:
            where.append(f"position {self.position}")
        if self.event_id is not None:
            where.append(f"event {self.event_id}")
        return f"{', '.join(where)}: {self.message}" if where else self.message


@dataclass
class Report:
    events: int = 0
    sealed: int = 0
    checkpoints: int = 0
    unsealed: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _check_signature(cp: dict, keys: dict[str, VerifyKey]) -> str | None:
    vk = keys.get(cp.get("key_id", ""))
    if vk is None:
        return f"checkpoint {cp['tree_size']}: signed with unknown key {cp.get('key_id')!r}"
    try:
        vk.verify(checkpoint_note(cp), base64.b64decode(cp["signature"]))
    except (BadSignatureError, ValueError):
        return f"checkpoint {cp['tree_size']}: the signature does not verify"
    return None


def verify_checkpoints(checkpoints: list[dict], keys: dict[str, VerifyKey]) -> list[Problem]:
    """Each signature, and each checkpoint against the one before it: the next size, a
    later last event and time, and an RFC 9162 consistency proof between the roots."""
    problems, previous = [], None
    for cp in checkpoints:
        size = cp["tree_size"]
        bad = _check_signature(cp, keys)
        if bad:
            problems.append(Problem(bad))
        expected = previous["tree_size"] if previous else 0
        if cp["previous_size"] != expected:
            problems.append(
                Problem(
                    f"checkpoint {size}: extends size {cp['previous_size']}, "
                    f"but the checkpoint before it has size {expected} (one is missing)"
                )
            )
        if previous is not None:
            if cp["last_event_id"] <= previous["last_event_id"] or parse_datetime(
                cp["at"]
            ) < parse_datetime(previous["at"]):
                problems.append(Problem(f"checkpoint {size}: goes backwards from {expected}"))
            proof = [bytes.fromhex(p) for p in cp["proof"]]
            if not verify_consistency(
                previous["tree_size"],
                size,
                bytes.fromhex(previous["root_hash"]),
                bytes.fromhex(cp["root_hash"]),
                proof,
            ):
                problems.append(
                    Problem(
                        f"checkpoint {size}: not consistent with checkpoint {expected} "
                        "(the log before it was rewritten)"
                    )
                )
        previous = cp
    return problems


def verify_export(path: str | Path, keys: dict[str, VerifyKey]) -> Report:
    """``verify_audit --offline``: an exported file on its own."""
    report = Report()
    checkpoints = []
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                checkpoints.append(json.loads(line))
            except ValueError:
                report.problems.append(Problem(f"line {n}: not JSON"))
    report.checkpoints = len(checkpoints)
    report.sealed = checkpoints[-1]["tree_size"] if checkpoints else 0
    report.problems += verify_checkpoints(checkpoints, keys)
    return report


def read_export(path: str | Path) -> list[dict]:
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def audit_verify(
    *, keys: dict[str, VerifyKey] | None = None, copy: list[dict] | None = None
) -> Report:
    """Every event against the checkpoints, every checkpoint against its signature and the
    one before it, and, given ``copy`` (an export kept elsewhere), the database's
    checkpoints and tree against that copy."""
    keys = keys if keys is not None else verify_keys()
    report = Report()
    rows = list(AuditCheckpoint.objects.order_by("tree_size"))
    cps = [checkpoint_json(cp) for cp in rows]
    report.checkpoints = len(cps)
    report.problems += verify_checkpoints(cps, keys)
    copied = {cp["tree_size"]: cp for cp in (copy or [])}
    if copy is not None:
        report.problems += [
            Problem(f"the copy's {p.message}") for p in verify_checkpoints(copy, keys)
        ]
        mine = {cp["tree_size"]: cp for cp in cps}
        signed = ("root_hash", "last_event_id", "previous_size", "at", "signature")
        for size, theirs in copied.items():
            ours = mine.get(size)
            if ours is None:
                report.problems.append(
                    Problem(f"checkpoint {size} of the copy is not in the database (removed)")
                )
            elif any(ours[k] != theirs[k] for k in signed):
                report.problems.append(
                    Problem(f"checkpoint {size} differs from the copy (rewritten in the database)")
                )
    roots: dict[int, str] = {}
    _verify_events(report, rows, cps, set(copied), roots)
    for size, theirs in copied.items():
        if size in roots and roots[size] != theirs["root_hash"]:
            report.problems.append(
                Problem(
                    f"the events up to position {size - 1} do not give the root of the copy's "
                    f"checkpoint {size} (events rewritten before it)"
                )
            )
    return report


def _verify_events(report, rows, cps, extra_sizes: set[int], roots: dict[int, str]) -> None:
    frontier = Frontier()
    position = 0
    index = 0  # the next checkpoint to reach
    previous_id = 0
    flagged_since = 0  # problems before this index belong to earlier checkpoints
    sizes = extra_sizes | {cp["tree_size"] for cp in cps}

    def close(cp, row) -> None:
        """Reached the end of ``cp``'s range: deleted numbers, size, root."""
        nonlocal frontier, flagged_since
        size = cp["tree_size"]
        if position != size:
            report.problems.append(
                Problem(
                    f"checkpoint {size} covers events up to {cp['last_event_id']}, "
                    f"but {position} events are there: {size - position:+d} missing",
                    position=position,
                )
            )
        elif frontier.root().hex() != cp["root_hash"]:
            if len(report.problems) == flagged_since:
                report.problems.append(
                    Problem(
                        f"the events from position {cp['previous_size']} to {size - 1} do not "
                        f"give checkpoint {size}'s root: one of them was rewritten",
                    )
                )
        # Go on from the checkpoint's own frontier when it is sound, so one bad event
        # is reported once, not again at every later checkpoint.
        stored = Frontier.from_json(row.frontier)
        if stored.size == size and stored.root().hex() == cp["root_hash"]:
            frontier = stored
            position_reset(size)
        flagged_since = len(report.problems)

    def position_reset(size: int) -> None:
        nonlocal position
        position = size

    def deleted_between(low: int, high: int, gaps: list) -> None:
        """Numbers in [low, high) neither present nor recorded unused: deleted (one
        problem per run of consecutive numbers)."""
        for first, last in _uncovered(low, high - 1, gaps):
            report.problems.append(
                Problem(
                    "missing: deleted after it was sealed"
                    if first == last
                    else f"events {first} to {last} missing: deleted after they were sealed",
                    position=position,
                    event_id=first if first == last else None,
                )
            )

    for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
        report.events += 1
        while index < len(cps) and event.id > cps[index]["last_event_id"]:
            cp = cps[index]
            deleted_between(previous_id + 1, cp["last_event_id"] + 1, cp["gaps"])
            close(cp, rows[index])
            previous_id = cp["last_event_id"]
            index += 1
        cp = cps[index] if index < len(cps) else None
        if cp is not None:
            deleted_between(previous_id + 1, event.id, cp["gaps"])
            previous_id = event.id
            if _in_gaps(cp["gaps"], event.id):
                report.problems.append(
                    Problem(
                        "inserted: its number was recorded as unused when it was sealed",
                        position=position,
                        event_id=event.id,
                    )
                )
                continue
        where = {"position": position if cp is not None else None, "event_id": event.id}
        entry = event_entry(event)
        problem = _event_problem(event, entry)
        if problem:
            report.problems.append(Problem(problem, **where))
        if cp is None:
            report.unsealed += 1
            continue
        frontier.append(leaf_hash(entry))
        position += 1
        report.sealed += 1
        if position in sizes:
            roots[position] = frontier.root().hex()
    while index < len(cps):
        cp = cps[index]
        deleted_between(previous_id + 1, cp["last_event_id"] + 1, cp["gaps"])
        close(cp, rows[index])
        previous_id = cp["last_event_id"]
        index += 1


def _event_problem(event: AuditEvent, entry: bytes) -> str | None:
    """What is wrong with an event on its own: its number, its bytes, its hash."""
    if event.body:
        try:
            claimed = json.loads(event.body).get("seq")
        except (ValueError, AttributeError):
            claimed = None
        if claimed != event.id:
            return f"its bytes name event {claimed}: moved or copied here"
        if entry.decode() != event.body:
            return "its fields differ from its bytes: edited"
    if sha256_hex(entry) != event.hash:
        return "does not match its hash: edited"
    return None
