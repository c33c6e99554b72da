"""Plans, the decisions people make on them, and the audit trail."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse

from actions.models import Action, Agent, ConsequenceClass


class PlanStatus(models.TextChoices):
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    EXECUTING = "executing"
    COMPLETED = "completed"
    PENDING = "pending"
    ALREADY_IN_DESIRED_STATE = "already_in_desired_state"
    REJECTED = "rejected"
    STALE = "stale"
    REFUSED = "refused"
    UNKNOWN = "unknown"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


# The only legal moves. approvals.services.plan_transition() is the single place that
# changes Plan.status, and it consults this table.
TRANSITIONS: dict[str, frozenset[str]] = {
    PlanStatus.AWAITING_APPROVAL: frozenset(
        {PlanStatus.APPROVED, PlanStatus.DENIED, PlanStatus.EXPIRED, PlanStatus.CANCELLED}
    ),
    # Cancelled while approved: an agent's cancel or a reviewer's revocation before the
    # worker claimed it; nothing was sent.
    PlanStatus.APPROVED: frozenset(
        {PlanStatus.EXECUTING, PlanStatus.REFUSED, PlanStatus.CANCELLED}
    ),
    PlanStatus.EXECUTING: frozenset(
        {
            # Back to approved only when nothing left the gateway (the attempt says so).
            PlanStatus.APPROVED,
            PlanStatus.COMPLETED,
            PlanStatus.PENDING,
            PlanStatus.ALREADY_IN_DESIRED_STATE,
            PlanStatus.REJECTED,
            PlanStatus.STALE,
            PlanStatus.REFUSED,
            PlanStatus.UNKNOWN,
        }
    ),
    PlanStatus.PENDING: frozenset({PlanStatus.COMPLETED, PlanStatus.REJECTED, PlanStatus.UNKNOWN}),
    PlanStatus.UNKNOWN: frozenset(
        {PlanStatus.COMPLETED, PlanStatus.REJECTED, PlanStatus.ALREADY_IN_DESIRED_STATE}
    ),
}
TERMINAL = frozenset(
    {
        PlanStatus.COMPLETED,
        PlanStatus.ALREADY_IN_DESIRED_STATE,
        PlanStatus.REJECTED,
        PlanStatus.STALE,
        PlanStatus.REFUSED,
        PlanStatus.DENIED,
        PlanStatus.EXPIRED,
        PlanStatus.CANCELLED,
    }
)


class Plan(models.Model):
    """An agent's proposal, fully resolved, with everything the executor relies on.

    ``canonical`` holds the exact bytes that were hashed into ``fingerprint``; the
    approval and the executor both rebuild them from the other columns and compare.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    action = models.ForeignKey(Action, on_delete=models.PROTECT, related_name="plans")
    action_version = models.PositiveIntegerField()
    action_digest = models.CharField(max_length=64)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="plans")
    status = models.CharField(
        max_length=32, choices=PlanStatus.choices, default=PlanStatus.AWAITING_APPROVAL
    )
    kind = models.CharField(max_length=10)
    consequence_class = models.CharField(max_length=16, choices=ConsequenceClass.choices)
    input = models.JSONField()
    target = models.JSONField()
    before = models.JSONField(null=True)
    after = models.JSONField(null=True)
    changes = models.JSONField(default=list)
    precondition = models.JSONField()
    policy = models.JSONField()
    write_request = models.JSONField()
    summary_markdown = models.TextField(blank=True)
    reason = models.TextField(blank=True)
    fingerprint = models.CharField(max_length=64)
    canonical = models.TextField()
    approvals_required = models.PositiveSmallIntegerField(default=1)
    # A reviewer's "preview again" (after stale) or edit makes a new plan pointing here;
    # the agent's API view of the original names the newest revision (superseded_by).
    revision_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="revisions"
    )

    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    # When a wake-up message was last published for this plan; the sweeper
    # re-enqueues approved plans whose message seems lost.
    enqueued_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    outcome_detail = models.TextField(blank=True)
    upstream_status = models.PositiveSmallIntegerField(null=True, blank=True)
    correlation_id = models.UUIDField(default=uuid.uuid4, editable=False)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=PlanStatus.values), name="plan_status_valid"
            ),
        ]
        indexes = [
            # The review queue: awaiting plans, newest first.
            models.Index(fields=["status", "-created_at"], name="plan_status_created"),
            # The sweeper: approved/executing plans by when they were last touched.
            models.Index(
                fields=["status", "enqueued_at"],
                name="plan_sweep",
                condition=Q(status__in=["approved", "executing"]),
            ),
            models.Index(fields=["agent", "-created_at"], name="plan_agent_created"),
        ]
        permissions = [("review_plan", "Can approve or deny plans")]

    def __str__(self) -> str:
        return f"{self.action.name} {self.id}"

    def get_absolute_url(self) -> str:
        return reverse("approvals:plan-detail", args=[self.id])

    @property
    def review_url(self) -> str:
        return settings.PUBLIC_URL + self.get_absolute_url()

    @property
    def required_approvals(self) -> int:
        """Distinct approvals needed. Enforced from the fingerprinted policy: the
        ``approvals_required`` column is a copy for display and is not fingerprinted, so
        a lowered column must never lower the bar."""
        return max(self.approvals_required, int(self.policy.get("approvers_required", 1)))

    @property
    def short_code(self) -> str:
        """What a reviewer reads aloud or compares: the first 12 hex digits, grouped."""
        code = self.fingerprint[:12].upper()
        return f"{code[:4]}-{code[4:8]}-{code[8:12]}"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def superseded_by_id(self):
        """The newest revision's id, or None: where the agent should follow."""
        return (
            Plan.objects.filter(revision_of_id=self.id)
            .order_by("-created_at", "-id")
            .values_list("id", flat=True)
            .first()
        )


class Approval(models.Model):
    """One reviewer's decision on one fingerprint. Used at most once, by one execution."""

    class Decision(models.TextChoices):
        APPROVE = "approve"
        DENY = "deny"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="approvals")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    decision = models.CharField(max_length=8, choices=Decision.choices)
    fingerprint = models.CharField(max_length=64)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            # Two approvals are two people: one reviewer decides a plan once.
            models.UniqueConstraint(fields=["plan", "reviewer"], name="approval_once_per_reviewer"),
            models.CheckConstraint(
                condition=Q(decision__in=["approve", "deny"]), name="approval_decision_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.decision} by {self.reviewer} on {self.plan_id}"


class IdempotencyRecord(models.Model):
    """An agent's Idempotency-Key for POST /plans, reserved before the preview runs.

    Reserving first (a unique row) is what turns a concurrent duplicate into a 409
    instead of a second preview and a second plan.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE)
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    plan = models.ForeignKey(Plan, null=True, on_delete=models.CASCADE)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "key"], name="idempotency_key_per_agent"),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id} {self.key}"


class AuditEvent(models.Model):
    """Append-only, hash-chained record of every decision and transition.

    Each row's ``hash`` covers its own content and the previous row's hash, so
    editing or deleting a past row breaks every link after it. Writers are
    serialized (see approvals.audit) so the chain has no forks.
    """

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField()
    kind = models.CharField(max_length=64)
    actor = models.CharField(max_length=200)
    plan = models.ForeignKey(
        Plan, null=True, blank=True, on_delete=models.PROTECT, related_name="events"
    )
    fingerprint = models.CharField(max_length=64, blank=True)
    data = models.JSONField(default=dict)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["plan", "id"], name="audit_plan")]

    def __str__(self) -> str:
        return f"{self.kind} by {self.actor}"
