"""The audit trail's table (actions.lib.audit writes and verifies it)."""

from __future__ import annotations

from django.db import models


class AuditEvent(models.Model):
    """Append-only, hash-chained record of every decision and transition.

    Each row's ``hash`` covers its own content and the previous row's hash, so
    editing or deleting a past row breaks every link after it. Writers are
    serialized (see actions.lib.audit) so the chain has no forks.
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
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

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
