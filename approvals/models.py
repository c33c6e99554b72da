"""Plans, the decisions people make on them, and the audit trail.

Over 600 lines: these are the app's tables, in the one module where Django, the
migrations and the admin look for them; each model is one class well under the limit,
and the transition tables sit beside the states they guard.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.validators import URLValidator
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from actions.models import Action, Agent, ConsequenceClass


class PlanStatus(models.TextChoices):
    # Labels are for people (translated on the pages); values are what the API speaks.
    AWAITING_APPROVAL = "awaiting_approval", _("Awaiting Approval")
    APPROVED = "approved", _("Approved")
    EXECUTING = "executing", _("Executing")
    COMPLETED = "completed", _("Completed")
    PENDING = "pending", _("Pending")
    ALREADY_IN_DESIRED_STATE = "already_in_desired_state", _("Already In Desired State")
    REJECTED = "rejected", _("Rejected")
    # The upstream answered a change with a 2xx, and reading the target back shows the
    # change did not happen (a server that ignores what it does not understand).
    NOT_APPLIED = "not_applied", _("Not Applied")
    STALE = "stale", _("Stale")
    REFUSED = "refused", _("Refused")
    UNKNOWN = "unknown", _("Unknown")
    DENIED = "denied", _("Denied")
    EXPIRED = "expired", _("Expired")
    CANCELLED = "cancelled", _("Cancelled")

    # The groupings every part of the product uses, defined once, next to the table.

    @classmethod
    def terminal(cls) -> frozenset[str]:
        """Nothing will ever change: no transition leaves these."""
        return _TERMINAL

    @classmethod
    def unsettled(cls) -> frozenset[str]:
        """An outcome that a look (status request, reconciliation) or a person may still
        settle; nothing more is sent."""
        return _UNSETTLED

    @classmethod
    def in_flight(cls) -> frozenset[str]:
        """Not decided yet, or decided and not executed yet."""
        return _IN_FLIGHT

    @classmethod
    def settled(cls) -> frozenset[str]:
        """What an agent waits for: nothing more will happen by itself, short of a look
        at an unsettled outcome (terminal, pending or unknown)."""
        return _TERMINAL | _UNSETTLED

    @property
    def meaning(self) -> str:
        """One sentence for an agent about what the status means for a change (English,
        as the API); ``meaning_for`` words it for a read."""
        return _MEANINGS[self]

    def meaning_for(self, kind: str) -> str:
        """What the status means for a plan of this change kind (a read is done, not
        applied, and returns fields)."""
        if kind == "read":
            return _READ_MEANINGS.get(self, _MEANINGS[self])
        return _MEANINGS[self]


# The only legal moves. approvals.lifecycle.plan_transition() is the single place that
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
            PlanStatus.NOT_APPLIED,
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
_TERMINAL = frozenset(PlanStatus) - frozenset(TRANSITIONS)
_UNSETTLED = frozenset({PlanStatus.PENDING, PlanStatus.UNKNOWN})
_IN_FLIGHT = frozenset({PlanStatus.AWAITING_APPROVAL, PlanStatus.APPROVED, PlanStatus.EXECUTING})
_MEANINGS = {
    PlanStatus.AWAITING_APPROVAL: "waiting for a person to approve or deny it; "
    "nothing has been written",
    PlanStatus.APPROVED: "approved; the worker will apply it shortly",
    PlanStatus.EXECUTING: "the worker is applying it now",
    PlanStatus.COMPLETED: "applied upstream",
    PlanStatus.PENDING: "accepted upstream and not finished yet",
    PlanStatus.ALREADY_IN_DESIRED_STATE: "nothing to do: the target already looked like this",
    PlanStatus.REJECTED: "the upstream refused it; nothing was written",
    PlanStatus.NOT_APPLIED: "the upstream said yes, but reading the target back shows the "
    "change did not happen; nothing was sent again",
    PlanStatus.STALE: "the target changed after the preview; nothing was written (propose again)",
    PlanStatus.REFUSED: "Countersign did not send it (see the outcome); nothing was written",
    PlanStatus.UNKNOWN: "the request may or may not have taken effect; a person will reconcile it",
    PlanStatus.DENIED: "a reviewer denied it; nothing was written",
    PlanStatus.EXPIRED: "nobody decided in time; nothing was written",
    PlanStatus.CANCELLED: "withdrawn; nothing was written",
}
# A read changes nothing: where a change's wording would say "written", a read's says
# what it returned.
_READ_MEANINGS = {
    PlanStatus.AWAITING_APPROVAL: "waiting for a person to approve or deny it; "
    "nothing has been read",
    PlanStatus.APPROVED: "approved; the worker will read the target shortly",
    PlanStatus.EXECUTING: "the worker is reading the target now",
    PlanStatus.COMPLETED: "read; the declared fields are in the result",
    PlanStatus.REJECTED: "the upstream refused it (not found, refused or out of scope); "
    "nothing returned",
    PlanStatus.REFUSED: "Countersign did not send it (see the outcome); nothing was read",
    PlanStatus.DENIED: "a reviewer denied it; nothing was read",
    PlanStatus.EXPIRED: "nobody decided in time; nothing was read",
    PlanStatus.CANCELLED: "withdrawn; nothing was read",
}


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
    # What a repeated proposal is matched on (decisions/policies.py: plan_repeat_key):
    # the fingerprint's document without the moment the policies judged it. "" for a
    # plan stored before it was recorded and no longer awaiting: nothing repeats it.
    repeat_key = models.CharField(max_length=64, blank=True, default="", db_default="")
    approvals_required = models.PositiveSmallIntegerField(default=1)
    # Who may decide: the requirement the catalog's decision rules gave this plan at
    # submission (actions/policy/reviewers.py), ``{}`` when none matched (the class
    # default applies). A copy for display and queries: what is enforced is the copy in
    # the fingerprinted ``policy`` (approvals/decisions/requirements.py).
    requirement = models.JSONField(default=dict, db_default={}, blank=True)
    # A reviewer's "preview again" (after stale) or edit makes a new plan pointing here;
    # the agent's API view of the original names the newest revision (superseded_by).
    revision_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="revisions"
    )
    # The person the agent proposed this for (approvals/decisions/requester.py): the issuer,
    # subject, groups, name and e-mail of the verified ID token the agent attached, or
    # null for a plan the agent proposed alone. Fingerprinted (iss, sub, groups).
    requester = models.JSONField(null=True, blank=True)
    # What the shadow policies would have done with this plan (approvals/decisions/
    # policies.py): outcome, policies, reason, errors. Never enforced, not fingerprinted;
    # ``{}`` when no shadow policy was in force.
    shadow = models.JSONField(default=dict, db_default={}, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    # When a wake-up message was last published for this plan; the sweeper
    # re-enqueues approved plans whose message seems lost.
    enqueued_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # When the next automatic look at an unsettled outcome is due: a status request for
    # accepted work (pending), a reconciliation for an unknown outcome. Null when none is
    # scheduled (settled, or left for a person). The message that carries the look is
    # only a wake-up: the sweeper publishes again whatever is overdue.
    next_check_at = models.DateTimeField(null=True, blank=True)

    outcome_detail = models.TextField(blank=True)
    upstream_status = models.PositiveSmallIntegerField(null=True, blank=True)
    # The fields the action declares it returns (its ``result:``), as the agent gets them:
    # projected from the upstream's answer, typed, bounded and filtered. Nothing else.
    result = models.JSONField(null=True, blank=True)
    # Did a read-back of the target show the planned effect? (None until an outcome.)
    verified = models.BooleanField(null=True, blank=True)
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
            # The sweeper: unsettled outcomes whose next look is overdue.
            models.Index(
                fields=["next_check_at"],
                name="plan_check_due",
                condition=Q(status__in=["pending", "unknown"], next_check_at__isnull=False),
            ),
            models.Index(fields=["agent", "-created_at"], name="plan_agent_created"),
            # The agent's rate for one action (approvals/decisions/policies.py: agent_rate),
            # counted at every submission while policies are in force.
            models.Index(
                fields=["agent", "action", "created_at"], name="plan_agent_action_created"
            ),
            # A repeated proposal: the agent's awaiting plan with the same repeat key
            # (services.plan_submit gives it back instead of storing a second one).
            models.Index(
                fields=["agent", "repeat_key"],
                name="plan_awaiting_repeat",
                condition=Q(status="awaiting_approval"),
            ),
            # History, newest first, whatever the status ("all" in the queue), and the
            # dashboard's time window: a range scan instead of reading every plan.
            models.Index(fields=["-created_at", "-id"], name="plan_created"),
            models.Index(fields=["expires_at", "id"], name="plan_expires"),
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
        return self.status in PlanStatus.terminal()

    @property
    def superseded_by_id(self):
        """The newest revision's id, or None: where the agent should follow.

        Only a stale plan (previewed again) or a cancelled one (replaced by an edit) can
        have a revision, so any other plan is answered without a query."""
        if self.status not in (PlanStatus.STALE, PlanStatus.CANCELLED):
            return None
        return (
            Plan.objects.filter(revision_of_id=self.id)
            .order_by("-created_at", "-id")
            .values_list("id", flat=True)
            .first()
        )


class Approval(models.Model):
    """One reviewer's decision on one fingerprint. Used at most once, by one execution."""

    class Decision(models.TextChoices):
        APPROVE = "approve", _("Approve")
        DENY = "deny", _("Deny")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="approvals")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    decision = models.CharField(max_length=8, choices=Decision.choices)
    fingerprint = models.CharField(max_length=64)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    # Set when a session grant approved the plan (its policy names the same grant, and
    # the reviewer is the person who made the grant); None for a person's own decision.
    grant = models.ForeignKey(
        "SessionGrant", null=True, blank=True, on_delete=models.PROTECT, related_name="approvals"
    )
    # A signed approval (approvals/identity/passkeys.py): the passkey that signed, and the WebAuthn
    # assertion as the browser returned it (credential id, authenticator data, client
    # data, signature; base64url) with the server nonce the challenge was derived from.
    # Kept so that the worker and ``manage.py verify_signed_approvals`` can verify it
    # again, offline, against the passkey's public key.
    passkey = models.ForeignKey(
        "Passkey", null=True, blank=True, on_delete=models.PROTECT, related_name="approvals"
    )
    # db_default: a release that predates the column inserts approvals without it
    # (docs/deployment.md, Upgrading); the same holds for every column added since.
    assertion = models.JSONField(default=dict, db_default={}, blank=True)
    # For a plan with a requirement: the requirement's groups the reviewer belonged to
    # when deciding (what the worker checks the approval against), and the one group
    # this approval counts toward (an approval fills one threshold place only).
    groups = models.JSONField(default=list, db_default=[], blank=True)
    counted_for = models.CharField(max_length=150, blank=True, default="", db_default="")
    # Break-glass (docs/security.md): a superuser outside the plan's groups decided, with
    # a typed reason (``comment``). Such an approval fills any one threshold place; the
    # floor still holds (not the requester's, one place only, signed where signing is on).
    break_glass = models.BooleanField(default=False, db_default=False)

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


class DecidingGroup(models.Model):
    """A group that may decide a plan, and from when: one row per group of the plan's
    requirement (approvals/decisions), written with the plan.

    What is enforced is the requirement in the fingerprinted policy; these rows are what
    the queries read: the queue's "mine to decide", who is notified, and the sweep that
    announces an escalation when its time comes."""

    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="deciding_groups")
    group = models.CharField(max_length=150)
    eligible_from = models.DateTimeField()
    # An escalation's group (eligible only from ``eligible_from``), announced (audited and
    # notified) by the sweeper at ``announced_at``.
    escalation = models.BooleanField(default=False)
    announced_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["plan", "group", "eligible_from"], name="deciding_group_once"
            ),
        ]
        indexes = [
            # "Mine to decide": the plans a person's groups decide.
            models.Index(fields=["group", "eligible_from"], name="deciding_group_by_name"),
            # The sweep: escalations whose time has come and that nobody announced yet.
            models.Index(
                fields=["eligible_from"],
                name="deciding_group_escalation_due",
                condition=Q(escalation=True, announced_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.group} decides {self.plan_id} from {self.eligible_from:%Y-%m-%d %H:%M}"


class Attempt(models.Model):
    """One try at the upstream write for one approved plan.

    The idempotency key is generated here and committed *before* the request leaves
    (state ``sending``), so a crash at any point leaves a row that says whether the
    request may have left. One plan has at most one attempt: the unique plan column is
    the database's promise that a plan is written at most once.
    """

    class State(models.TextChoices):
        PREPARED = "prepared"  # claimed; nothing sent yet
        SENDING = "sending"  # committed just before the request leaves: it may have left
        ANSWERED = "answered"  # the upstream answered; see response_status
        NOT_SENT = "not_sent"  # stopped before sending (stale, refused, unreachable)
        LOST = "lost"  # sent, but no answer (timeout, broken connection, worker died)

        def request_sent(self) -> bool | None:
            """Did the request leave the gateway? None: it may have."""
            return {self.ANSWERED: True, self.PREPARED: False, self.NOT_SENT: False}.get(self)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    plan = models.OneToOneField(Plan, on_delete=models.PROTECT, related_name="attempt")
    idempotency_key = models.CharField(max_length=64, unique=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PREPARED)
    # Tries before anything was sent (upstream unreachable while re-reading).
    tries = models.PositiveSmallIntegerField(default=0)
    request = models.JSONField(default=dict)  # exactly what was sent, secrets redacted
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_headers = models.JSONField(default=dict)
    response_body = models.TextField(blank=True)  # filtered and bounded
    error = models.TextField(blank=True)
    # How many times the request was sent: more than once only with the same
    # idempotency key, and only where the action declares the upstream honours it.
    sends = models.PositiveSmallIntegerField(default=0)
    # Following accepted work (202) and reconciling unknown outcomes.
    status_path = models.CharField(max_length=500, blank=True)
    status_checks = models.PositiveSmallIntegerField(default=0)
    # Reconciliations of an unknown outcome tried so far (automatic and "check now").
    reconcile_checks = models.PositiveSmallIntegerField(default=0, db_default=0)
    reconciliation = models.JSONField(default=dict, blank=True)
    revalidation = models.JSONField(default=dict)  # what the re-read found
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        # The table keeps the name it had when the model lived in executors.
        db_table = "executors_attempt"
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=["prepared", "sending", "answered", "not_sent", "lost"]),
                name="attempt_state_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.id} ({self.state})"


# The attempt's legal moves; approvals.lifecycle.attempt_transition() consults it. An
# attempt is created prepared, by the claim.
ATTEMPT_TRANSITIONS: dict[str, frozenset[str]] = {
    # The fence commits "sending" right before the request leaves; or nothing is sent
    # (stale, refused, the upstream unreachable, the worker gone before sending).
    Attempt.State.PREPARED: frozenset({Attempt.State.SENDING, Attempt.State.NOT_SENT}),
    # Answered, or no answer; back to not sent only when provably nothing left (the
    # connection was refused before a byte was sent, or the older fence's sends == 0).
    Attempt.State.SENDING: frozenset(
        {Attempt.State.ANSWERED, Attempt.State.LOST, Attempt.State.NOT_SENT}
    ),
    # Only an attempt that provably sent nothing may be claimed again.
    Attempt.State.NOT_SENT: frozenset({Attempt.State.PREPARED}),
}


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


class SessionGrant(models.Model):
    """A reviewer's standing consent: one agent may run these low-consequence actions,
    within these fixed input values, until ``expires_at`` (and at most ``max_executions``
    times), without asking a person for each plan.

    A plan it covers is approved at submission by an Approval that points here, and its
    fingerprinted policy names this grant; the worker checks again, right before
    sending, that the grant is neither revoked nor expired. Never for external or
    irreversible actions, nor for plans needing more than one approver
    (approvals.grants checks both when the grant is made and when it is used).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="session_grants")
    actions = models.ManyToManyField(Action, related_name="session_grants")
    # {input field: value}: a plan whose input differs on any of these is not covered.
    fixed_values = models.JSONField(default=dict, blank=True)
    # Plans approved under the grant, at most; None = no cap (the expiry still bounds it).
    max_executions = models.PositiveIntegerField(null=True, blank=True)
    reason = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(max_executions__isnull=True) | Q(max_executions__gte=1),
                name="grant_cap_positive",
            ),
        ]
        indexes = [
            # grant_match at every submission: an agent's unrevoked grants by expiry.
            models.Index(
                fields=["agent", "expires_at"],
                name="grant_active",
                condition=Q(revoked_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"grant {self.id} for {self.agent_id}"

    def is_active(self, now) -> bool:
        return self.revoked_at is None and self.expires_at > now


class NotificationTarget(models.Model):
    """Where to tell a reviewer group that a plan awaits a decision.

    ``email`` goes to the group's active users who have an address; ``webhook`` posts
    Slack-compatible JSON to ``address``, signed with HMAC-SHA256 under ``secret``
    (approvals.notifications).
    """

    class Kind(models.TextChoices):
        EMAIL = "email", "Email to the group's members"
        WEBHOOK = "webhook", "Webhook (Slack-compatible JSON, signed)"

    group = models.ForeignKey(
        "auth.Group", on_delete=models.CASCADE, related_name="notification_targets"
    )
    kind = models.CharField(max_length=8, choices=Kind.choices)
    # The webhook's URL (http or https); unused for email.
    address = models.URLField(
        max_length=500, blank=True, validators=[URLValidator(schemes=["http", "https"])]
    )
    # The webhook's signing key. Kept as entered: it authenticates us to the receiver,
    # it opens nothing, and the worker needs it in clear to sign.
    secret = models.CharField(max_length=200, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group__name", "kind", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=["email", "webhook"]), name="notification_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(kind="email") | ~Q(address=""),
                name="notification_webhook_has_url",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} for {self.group}"


class Heartbeat(models.Model):
    """The last sign of life of a worker process, or of the sweeper.

    A worker writes its row every COUNTERSIGN_HEARTBEAT_SECONDS from its main process;
    the sweep task writes the ``sweeper`` row each time it runs. A sweeper that never
    started (celery beat crashed at start) or died shows as an old or missing row on the
    dashboard and in the readiness check, instead of as plans that quietly stop moving.
    """

    class Kind(models.TextChoices):
        WORKER = "worker"
        SWEEPER = "sweeper"

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    at = models.DateTimeField()
    started_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=["worker", "sweeper"]), name="heartbeat_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} at {self.at}"


class Passkey(models.Model):
    """A reviewer's WebAuthn credential, used to sign approvals (approvals/identity/passkeys.py).

    Revoked, never deleted: approvals it signed stay verifiable, and a revoked passkey
    signs nothing more (the page refuses it, and the worker refuses an approval whose
    passkey was revoked before the plan was sent)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="passkeys"
    )
    name = models.CharField(max_length=100)
    credential_id = models.CharField(max_length=1400, unique=True)  # base64url
    public_key = models.BinaryField()  # COSE_Key, as registered
    sign_count = models.PositiveBigIntegerField(default=0)
    transports = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.user})"


class OidcIdentity(models.Model):
    """Which identity-provider account a user is: the (issuer, subject) pair of its ID
    tokens, the only stable identifier OpenID Connect gives. Users are matched on this,
    never on an e-mail address (which an identity provider may let people change)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identity"
    )
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="oidc_identity_unique")
        ]
        # Said in full: Django's own would be "Oidc identitys".
        verbose_name = _("single sign-on identity")
        verbose_name_plural = _("single sign-on identities")

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class PolicyBacktest(models.Model):
    """One replay of a draft policy set over the stored plans, asked for on the admin's
    backtest page (approvals/decisions/backtest/): who asked, the draft (its text and
    hash) and the window, then the run's progress and its report.

    A run reads every plan of its window, so it runs in a worker, never in the request;
    the worker claims the row (queued → running) with a conditional UPDATE and writes its
    progress here as it goes, so the page can follow it. The report is bounded: totals,
    and at most ``backtest.MAX_LISTED`` plans in each of its lists."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # The draft as given (Cedar, the enforce part) and the hash of the set it makes.
    draft = models.TextField()
    draft_hash = models.CharField(max_length=64)
    since = models.DateTimeField()
    until = models.DateTimeField()
    state = models.CharField(max_length=8, choices=State.choices, default=State.QUEUED)
    started_at = models.DateTimeField(null=True, blank=True)
    # Written every few pages by the run: how far it got, and when it last said so (a
    # run whose worker died stops moving; a redelivered message may take it over).
    progress_at = models.DateTimeField(null=True, blank=True)
    plans_read = models.PositiveIntegerField(default=0)
    finished_at = models.DateTimeField(null=True, blank=True)
    report = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=["queued", "running", "done", "failed"]),
                name="policy_backtest_state_valid",
            ),
        ]
        permissions = [
            ("run_policy_backtest", "Can replay a draft policy set over the stored plans"),
        ]

    def __str__(self) -> str:
        return f"backtest {self.draft_hash[:12]} ({self.state})"

    def get_absolute_url(self) -> str:
        return reverse("admin:approvals_policybacktest_change", args=[self.id])


class RefusedSubmission(models.Model):
    """A submission a policy refused (``forbid``), kept so that a backtest can show what a
    draft would let through (approvals/decisions/refusals.py, backtest.py).

    It is what the policies judged, never a plan: no status, no fingerprint, no approval
    and no write request, so nothing can queue, approve or execute it; no page or list of
    plans reads this table. Kept ``COUNTERSIGN_REFUSED_RETENTION_DAYS`` days, then the
    sweeper deletes it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    action = models.ForeignKey(Action, on_delete=models.PROTECT, related_name="+")
    action_version = models.PositiveIntegerField()
    action_digest = models.CharField(max_length=64)
    consequence_class = models.CharField(max_length=16, choices=ConsequenceClass.choices)
    # The action wanted passkey-signed approvals: a draft's @approve would be a review.
    signed_approval = models.BooleanField(default=False)
    # What the policies were given: the normalized input and the preview.
    input = models.JSONField()
    target = models.JSONField()
    before = models.JSONField(null=True)
    after = models.JSONField(null=True)
    changes = models.JSONField(default=list)
    requester = models.JSONField(null=True, blank=True)
    # What refused it: the forbids that held, their reason, the set (hash and version),
    # and the two facts that change with time, as the policies saw them.
    policies = models.JSONField(default=list)
    refusal = models.TextField(blank=True)
    set_hash = models.CharField(max_length=64)
    set_version = models.PositiveIntegerField(default=0)
    evaluated_at = models.DateTimeField()
    rate_hour = models.PositiveIntegerField(default=0)
    rate_day = models.PositiveIntegerField(default=0)
    shadow = models.JSONField(default=dict, blank=True)
    # The submission's correlation id: its log lines and its plan.refused audit event.
    correlation_id = models.UUIDField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The backtest's keyset pages over a window, and the sweeper's oldest first.
            models.Index(fields=["created_at", "id"], name="refused_created"),
        ]

    def __str__(self) -> str:
        return f"refused {self.id}"
