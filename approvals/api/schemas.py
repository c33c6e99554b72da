"""JSON shapes of the agent API (v1). These are the public contract; see docs/api.md."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import ConfigDict, Field


class PlanCreate(Schema):
    model_config = ConfigDict(extra="forbid")

    action: str = Field(min_length=1, max_length=100, description="The action's name.")
    input: dict[str, Any] = Field(description="Input matching the action's input_schema.")
    reason: str | None = Field(
        default=None,
        max_length=2000,
        description="Why the agent proposes this. Shown to reviewers as an untrusted quote.",
    )


class Card(Schema):
    effect: str
    scope: str
    result: str
    consent: str
    retry: str


class Annotations(Schema):
    """MCP-style hints about the *upstream effect* of the action once approved."""

    readOnlyHint: bool
    destructiveHint: bool
    idempotentHint: bool
    openWorldHint: bool


class ApprovalPolicyOut(Schema):
    mode: Literal["per_call", "none"] = Field(
        description="per_call: a person (or a session grant) approves each plan; none: a "
        "plain observation read that runs as soon as it is proposed (still recorded)."
    )
    approvers_required: int
    approval_ttl_seconds: int
    plan_ttl_seconds: int
    session_grant_eligible: bool = Field(
        default=False,
        description="Whether a reviewer's session grant may approve this action's plans "
        "without a per-call decision (observation and reversible actions only).",
    )
    signed: bool = Field(
        default=False,
        description="Whether approvals must be signed with a reviewer's passkey (WebAuthn) "
        "over the plan's fingerprint; such plans cannot be approved without one.",
    )


class ResultFieldOut(Schema):
    name: str
    type: Literal["string", "integer", "number", "boolean"]


class ActionOut(Schema):
    name: str
    title: str
    description: str
    card: Card
    consequence_class: str
    kind: str
    input_schema: dict[str, Any]
    approval: ApprovalPolicyOut
    annotations: Annotations
    result: list[ResultFieldOut] = Field(
        default_factory=list, description="The fields outcome.result carries, and their types."
    )
    sensitive: bool = Field(
        default=False, description="A read of private data: a reviewer approves every call."
    )
    verify: bool = Field(
        default=False,
        description="The worker reads the target back after a 2xx and reports whether the "
        "effect is there (outcome.verified); a 2xx that changed nothing ends not_applied.",
    )


class TargetOut(Schema):
    connector: str
    path: str


class WriteRequestOut(Schema):
    method: str
    path: str
    headers: dict[str, str]
    body: Any = None


class TextChangeOut(Schema):
    lines_added: int
    lines_removed: int
    too_long: bool = Field(
        default=False,
        description="The texts were too long to compare line by line (over 20,000 lines "
        "or 2 MiB on a side): every line of before counts as removed, every line of after "
        "as added.",
    )


class PreviewOut(Schema):
    before: Any = None
    after: Any = None
    changes: list[dict[str, Any]]
    summary_markdown: str
    recipe: Literal["paired_read", "dry_run", "none", "read"] | None = Field(
        default=None,
        description="How the preview was made: read (an HTTP read of the target), "
        "paired_read (an MCP read tool), dry_run (the MCP tool's own dry run) or none (the "
        "exact call is shown, nothing computed). Null for plans recorded before it was kept.",
    )
    strength: Literal["strong", "weak", "none"] | None = Field(
        default=None,
        description="How far the preview can be trusted: strong (read by Countersign), weak "
        "(the server's own promise), none (no preview).",
    )
    says: str | None = Field(default=None, description="The recipe in words, as the page says it.")
    request: WriteRequestOut
    text: TextChangeOut | None = Field(
        default=None,
        description="For a target that is a text document (before and after strings, or "
        "one absent): the lines added and removed, as the reviewer's line diff counts "
        "them. Absent for a JSON document.",
    )


class PreconditionOut(Schema):
    kind: Literal["version", "absent", "none"]
    expected: Any = None
    enforced_by: str
    weak: bool = Field(
        default=False,
        description="The version is a weak ETag: it cannot be sent as If-Match, so only "
        "the worker's re-read right before writing checks it (a small race window remains).",
    )


class CheckWithOut(Schema):
    action: str
    input: dict[str, Any]


class OutcomeOut(Schema):
    state: str
    detail: str
    upstream_status: int | None = None
    correlation_id: UUID
    finished_at: datetime | None = None
    request_sent: bool | None = Field(
        default=None,
        description="Whether the write left the gateway: true, false, or null when unknown.",
    )
    result: dict[str, Any] | None = Field(
        default=None,
        description="The fields the action declares it returns (its card's result), from "
        "the upstream's answer: typed, bounded and filtered; a field that could not be "
        "read or did not match its declaration is null. Nothing undeclared is returned.",
    )
    verified: bool = Field(
        default=False,
        description="True when reading the target back after the upstream's answer showed "
        "the planned effect; false otherwise (not verifiable, opted out, or not shown).",
    )
    check_with: CheckWithOut | None = Field(
        default=None,
        description="For accepted work (pending) or an unknown outcome: the read action "
        "that checks it, and the input to propose it with.",
    )


class RequesterOut(Schema):
    iss: str
    sub: str
    groups: list[str]


class ThresholdOut(Schema):
    group: str
    count: int
    approved: int = Field(description="Approvals counted toward this threshold so far.")
    after: int | None = Field(
        default=None,
        description="An escalation: the group may fill this threshold only once the plan "
        "has waited this many seconds since it was proposed (absent otherwise).",
    )
    eligible_from: datetime | None = Field(
        default=None, description="An escalation: when its group may start deciding."
    )
    escalated: bool | None = Field(
        default=None, description="An escalation: whether its time has come."
    )


class ClauseOut(Schema):
    any_of: list[ThresholdOut]
    met: bool


class ThresholdNeeded(Schema):
    group: str
    count: int


class ClauseNeeded(Schema):
    any_of: list[ThresholdNeeded]


class MetByOut(Schema):
    by: Literal["policy"]
    policies: list[str] = Field(description="The @approve policies that approved the plan.")
    rules: list[str] = Field(
        description="The decision rules behind the requirement, each of which lets "
        "policies approve its plans (policies_may_approve: true)."
    )


class RequirementOut(Schema):
    """Who may decide (docs/api.md, 'Who decides'): every clause of ``all_of`` must be
    met, a clause by any one of its thresholds; distinct people, each counted once."""

    rules: list[str] = Field(description="The catalog's decision rules that applied.")
    all_of: list[ClauseOut]
    met: bool
    missing: list[ClauseNeeded]
    met_by: MetByOut | None = Field(
        default=None,
        description="Set when a policy approved the plan, as every rule behind the "
        "requirement allows: the requirement is then met, by the policy, with no person.",
    )


class DecidedByOut(Schema):
    by: Literal["policy", "person", "grant"]
    policies: list[str] | None = Field(
        default=None, description="The @approve policies that approved it (by: policy)."
    )
    set: str | None = Field(default=None, description="The policy set's SHA-256 (by: policy).")
    version: int | None = Field(default=None, description="The policy set's version.")
    grant_id: UUID | None = Field(default=None, description="The session grant (by: grant).")


class HeldRuleOut(Schema):
    rule: str = Field(description="A decision rule that keeps the plan for its groups.")
    groups: list[str] = Field(description="The groups the rule names.")


class HeldOut(Schema):
    """Why an @approve that held did not approve the plan with no person."""

    policies: list[str] = Field(description="The @approve policies that would approve it.")
    reasons: list[
        Literal[
            "irreversible",
            "evaluation_error",
            "signed_action",
            "rule_owned",
            "revision",
            "no_preview",
        ]
    ] = Field(
        description="irreversible: an irreversible plan always has a person (the floor); "
        "evaluation_error: a policy failed to evaluate, so none approves; signed_action: "
        "the action needs passkey-signed approvals; rule_owned: a decision rule keeps it "
        "for its groups (see rules); revision: a reviewer's revision goes to a person; "
        "no_preview: an MCP call with no preview is always read by a person."
    )
    rules: list[HeldRuleOut] = Field(
        description="For rule_owned: the rules that keep the plan, and their groups."
    )


class PolicyOut(Schema):
    outcome: Literal["approve", "review"] = Field(
        description="approve: a policy approved it with no person; review: it went to "
        "people (a refusal makes no plan: it is a 403 policy-refused problem)."
    )
    policies: list[str] = Field(
        description="The policies that decided: the @approve ones that approved it, or "
        "the @require ones whose clauses were added to the requirement."
    )
    set: str
    version: int
    errors: list[str] = Field(
        description="Policies that failed to evaluate on this plan (it went to people)."
    )
    held: HeldOut | None = Field(
        default=None,
        description="Set when an @approve held but the plan went to people: which "
        "policies would approve it, and why none did.",
    )


class PlanOut(Schema):
    id: UUID
    action: str
    status: str
    fingerprint: str
    short_code: str
    consequence_class: str
    target: TargetOut
    input: dict[str, Any]
    reason: str
    preview: PreviewOut
    precondition: PreconditionOut
    approvals_required: int
    requirement: RequirementOut | None = Field(
        default=None,
        description="The decision rules' requirement: which groups must approve, what is "
        "met and what is missing. Null when no rule matched (approvals_required applies).",
    )
    approved_by: Literal["reviewers", "session_grant", "policy"] | None = Field(
        default=None,
        description="How the plan was approved: by reviewers' decisions, by a session "
        "grant a reviewer made, by the catalog's policies with no person, or null while "
        "not approved (or never approved).",
    )
    decided_by: DecidedByOut | None = Field(
        default=None,
        description="Who decided the plan (approved or denied): a policy (with the "
        "policies and the policy set's hash and version), a person (never named), or a "
        "grant; null while nobody has.",
    )
    policy: PolicyOut | None = Field(
        default=None,
        description="What the catalog's policies said of the plan at submission; null "
        "when no policy was in force.",
    )
    grant_id: UUID | None = Field(
        default=None, description="The session grant that approved the plan, if one did."
    )
    requester: RequesterOut | None = Field(
        default=None,
        description="The person the agent proposed the plan for (the ID token sent in "
        "Countersign-On-Behalf-Of), or null: the agent alone.",
    )
    review_url: str
    created_at: datetime
    expires_at: datetime
    outcome: OutcomeOut | None = None
    # Set when a reviewer made a newer revision of this plan (preview again, edit);
    # the agent follows that id. Null otherwise.
    superseded_by: UUID | None = None


class ProblemError(Schema):
    pointer: str
    message: str


class Problem(Schema):
    type: str
    title: str
    status: int
    detail: str
    correlation_id: UUID
    errors: list[ProblemError] | None = None
