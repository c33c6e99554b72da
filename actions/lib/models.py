"""The audit trail's table (actions.lib.audit writes and verifies it)."""

from __future__ import annotations

from django.db import models


class AuditEvent(models.Model):
    """Append-only record of every decision and transition.

    Each row is written in the transaction of the change it records, with no lock and
    no read of another row: ``id`` is the database's sequence, ``body`` the canonical
    bytes of the event (its sequence number included) and ``hash`` their SHA-256. The
    sealer (actions.lib.checkpoints) later integrates committed events, in sequence
    order, into a Merkle tree and signs checkpoints of it; that is what makes an edit,
    a deletion, a reordering or an insertion detectable.

    Rows written before the tree (``body`` empty) were chained one to the next:
    ``prev_hash`` and ``hash`` keep that chain, and their entry in the tree is the
    chained form (see actions.lib.audit.event_entry).
    """

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField()
    kind = models.CharField(max_length=64)
    actor = models.CharField(max_length=200)
    # The plan the event is about, by the app registry's label: the trail imports no
    # app, and a plan with events can never be deleted.
    plan = models.ForeignKey(
        "approvals.Plan", null=True, blank=True, on_delete=models.PROTECT, related_name="events"
    )
    fingerprint = models.CharField(max_length=64, blank=True)
    data = models.JSONField(default=dict)
    prev_hash = models.CharField(max_length=64, blank=True, default="")
    # db_default: older releases insert events without it (docs/deployment.md, Upgrading).
    body = models.TextField(blank=True, default="", db_default="")
    hash = models.CharField(max_length=64)

    class Meta:
        # The table keeps the name it had when the trail lived in approvals.
        db_table = "approvals_auditevent"
        ordering = ["id"]
        indexes = [
            models.Index(fields=["plan", "id"], name="audit_plan"),
            # The audit log's filters, each newest first (keyset on id), and its list of
            # kinds (read as a skip scan, see actions.lib.audit.audit_kinds).
            models.Index(fields=["actor", "id"], name="audit_actor"),
            models.Index(fields=["kind", "id"], name="audit_kind"),
            models.Index(fields=["at"], name="audit_at"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} by {self.actor}"


class AuditCheckpoint(models.Model):
    """A signed statement: the first ``tree_size`` events, up to event ``last_event_id``
    in sequence order, have the Merkle root ``root_hash`` (RFC 9162).

    Written only by the sealer, which holds the signing key; append-only like the events
    (PostgreSQL trigger, migration lib/0002). ``previous_size`` is unique: a checkpoint
    has at most one successor, so two sealers can never fork the log, whatever their
    leases say. ``proof`` (consistency from the previous checkpoint) and ``frontier``
    (the tree's right edge, for appending) are not signed: they are checked against
    signed roots wherever they are used.
    """

    id = models.BigAutoField(primary_key=True)
    tree_size = models.BigIntegerField(unique=True)
    previous_size = models.BigIntegerField(unique=True)
    last_event_id = models.BigIntegerField()
    root_hash = models.CharField(max_length=64)
    at = models.DateTimeField()
    origin = models.CharField(max_length=200)
    key_id = models.CharField(max_length=16)
    signature = models.CharField(max_length=100)
    # The event numbers in (previous checkpoint's last_event_id, last_event_id] that no
    # committed event has, as [first, last] ranges; signed (through their digest).
    gaps = models.JSONField(default=list)
    proof = models.JSONField(default=list)
    frontier = models.JSONField(default=list)

    class Meta:
        ordering = ["tree_size"]

    def __str__(self) -> str:
        return f"checkpoint {self.tree_size}"


class AuditSealerLease(models.Model):
    """Who may seal now: one row, taken with a conditional UPDATE (actions.lib.checkpoints).
    The lease keeps two sealers from doing the same work; the unique
    ``AuditCheckpoint.previous_size`` is what keeps them from forking the log."""

    name = models.CharField(max_length=32, primary_key=True)
    holder = models.CharField(max_length=100, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name}: {self.holder or 'free'}"
