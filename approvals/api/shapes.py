"""What the agent API says of an action and of a plan: the shapes its answers take, which
the MCP tools and resources give too (approvals/mcp/rendering.py), so that both say the
same thing of the same plan."""

from __future__ import annotations

from typing import Any

from actions.models import Action
from actions.textdiff import is_text_document, line_diff

from ..decisions.policies import MODE as POLICY_MODE
from ..decisions.policies import policy_decided_by
from ..decisions.requirements import plan_requirement_answer
from ..models import Attempt, Plan, PlanStatus


def action_hints(action: Action) -> dict[str, bool]:
    """The MCP tool hints for an action, by what the call eventually does once approved
    (the MCP tools carry exactly these).

    A read changes nothing. A delete, an external commitment (a message sent, an
    invoice issued) and an irreversible change are destructive: clients that shield
    destructive tools ask their user first, a barrier in front of the reviewer's. No
    proposal is idempotent: a repeat returns the same plan only while it awaits a
    decision, and after that it adds a plan (services.plan_submit).
    """
    kind, klass = action.kind, action.consequence_class
    read = kind == "read"
    return {
        "readOnlyHint": read,
        "destructiveHint": not read and (kind == "delete" or klass in ("external", "irreversible")),
        "idempotentHint": False,
        "openWorldHint": klass in ("external", "irreversible"),
    }


def action_out(action: Action) -> dict[str, Any]:
    spec = action.spec
    kind = action.kind
    return {
        "name": action.name,
        "title": action.title,
        "description": action.description,
        "card": spec.card,
        "consequence_class": action.consequence_class,
        "kind": kind,
        "input_schema": spec.input_schema,
        "approval": {
            "mode": spec.approval.mode,
            "approvers_required": spec.approval.approvers,
            "approval_ttl_seconds": spec.approval.approval_ttl,
            "plan_ttl_seconds": spec.approval.plan_ttl,
            # A reviewer's session grant may approve this action's plans (approvals.grants).
            "session_grant_eligible": spec.approval.session_grant and spec.approval.approvers == 1,
            "signed": spec.approval.signed,
        },
        "annotations": action_hints(action),
        "result": [{"name": f.name, "type": f.type} for f in spec.result],
        "sensitive": spec.sensitive,
        "verify": spec.verify,
    }


_UNREAD = object()


def request_sent(plan: Plan) -> bool | None:
    """Did the write leave the gateway? True, False, or None when nobody can know.

    The attempt's state as read with the plan (selectors.plan_for_agent), or read now."""
    state = getattr(plan, "attempt_state", _UNREAD)
    if state is _UNREAD:
        state = Attempt.objects.filter(plan=plan).values_list("state", flat=True).first()
    if state is None:
        return False
    sent = Attempt.State(state).request_sent()
    # It may have left and no answer came; once the change is found applied (by
    # reconciliation or by a person), it did.
    if sent is None and plan.status == PlanStatus.COMPLETED:
        return True
    return sent


def check_with(plan: Plan) -> dict[str, Any] | None:
    """The read action that checks accepted work or an unknown outcome, where the
    action names one, with the input this plan provides (a missing value is left out)."""
    check = plan.action.spec.check_with
    if check is None or plan.status not in PlanStatus.unsettled():
        return None
    sources = {"$input": plan.input or {}, "$result": plan.result or {}}
    values = {}
    for field_name, source in check.input.items():
        ((kind, name),) = source.items()
        if sources[kind].get(name) is not None:
            values[field_name] = sources[kind][name]
    return {"action": check.action, "input": values}


def approval_source(plan: Plan) -> dict[str, Any]:
    """How the plan was approved and who decided, from its fingerprinted policy and its
    state (no query): by a session grant, by the catalog's policies, by people, or not
    (yet). People are never named."""
    part = policy_decided_by(plan)
    mode = plan.policy.get("mode")
    decided = plan.decided_at is not None and plan.status not in (
        PlanStatus.EXPIRED,
        PlanStatus.CANCELLED,
    )
    if mode == "session_grant":
        source = {"approved_by": "session_grant", "grant_id": plan.policy.get("grant")}
        decided_by = {"by": "grant", "grant_id": plan.policy.get("grant")}
    elif mode == POLICY_MODE and part:
        source = {"approved_by": "policy", "grant_id": None}
        decided_by = {
            "by": "policy",
            "policies": part["policies"],
            "set": part["set"],
            "version": part["version"],
        }
    else:
        approved = decided and plan.status != PlanStatus.DENIED
        source = {"approved_by": "reviewers" if approved else None, "grant_id": None}
        decided_by = {"by": "person"} if decided else None
    return {**source, "decided_by": decided_by, "policy": part}


def requester_out(requester: dict | None) -> dict[str, Any] | None:
    """The person the plan is for, as the agent sent them (issuer, subject, groups)."""
    if not requester:
        return None
    return {k: requester[k] for k in ("iss", "sub", "groups")}


def text_change(plan: Plan) -> dict[str, Any]:
    """``{"text": {...}}`` with the line counts of a text document's change (the numbers
    the plan page shows), or nothing for a JSON document."""
    if plan.kind in ("invoke", "read") or not is_text_document(plan.before, plan.after):
        return {}
    diff = line_diff(plan.before, plan.after, context=0)
    return {
        "text": {
            "lines_added": diff.lines_added,
            "lines_removed": diff.lines_removed,
            "too_long": diff.too_long,
        }
    }


# How an HTTP plan's preview was made, said as an MCP plan's is (target["preview"]).
HTTP_RECIPES = {
    "read": ("strong", "computed from a read of the target"),
    "none": ("none", "no preview: the exact request is shown"),
    "observation": ("none", "a read: nothing changes"),
}


def preview_recipe(plan: Plan) -> dict[str, Any]:
    """How the preview was made: ``recipe``, ``strength`` and what the page says of it.
    An MCP plan records it when it is proposed; an HTTP plan's is told by its
    precondition (a version or an absence was read: the preview is a read of the target)."""
    recorded = (plan.target or {}).get("preview")
    if isinstance(recorded, dict) and recorded.get("recipe"):
        return {
            "recipe": recorded["recipe"],
            "strength": recorded.get("strength"),
            "says": recorded.get("says"),
        }
    if (plan.target or {}).get("tools") is not None:
        return {"recipe": None, "strength": None, "says": None}  # an MCP plan from before
    if plan.kind == "read":
        recipe, (strength, says) = "read", HTTP_RECIPES["observation"]
    else:
        read = (plan.precondition or {}).get("kind") in ("version", "absent")
        recipe = "read" if read else "none"
        strength, says = HTTP_RECIPES[recipe]
    return {"recipe": recipe, "strength": strength, "says": says}


def plan_out(plan: Plan) -> dict[str, Any]:
    request = plan.write_request
    outcome = None
    if plan.status in PlanStatus.settled():
        outcome = {
            "state": plan.status,
            "detail": plan.outcome_detail,
            "upstream_status": plan.upstream_status,
            "correlation_id": plan.correlation_id,
            "finished_at": plan.finished_at,
            "request_sent": request_sent(plan),
            "result": plan.result,
            "verified": bool(plan.verified),
            "check_with": check_with(plan),
        }
    return {
        "id": plan.id,
        "action": plan.action.name,
        "status": plan.status,
        "fingerprint": plan.fingerprint,
        "short_code": plan.short_code,
        "consequence_class": plan.consequence_class,
        "target": {"connector": plan.target["connector"], "path": plan.target["path"]},
        "input": plan.input,
        "reason": plan.reason,
        "preview": {
            "before": plan.before,
            "after": plan.after,
            "changes": plan.changes,
            "summary_markdown": plan.summary_markdown,
            **text_change(plan),
            **preview_recipe(plan),
            "request": {
                "method": request["method"],
                "path": request["path"],
                "headers": request.get("headers") or {},
                "body": request.get("body"),
            },
        },
        "precondition": {
            "kind": plan.precondition["kind"],
            "expected": plan.precondition.get("expected"),
            "enforced_by": plan.precondition.get("enforced_by", "none"),
            "weak": bool(plan.precondition.get("weak", False)),
        },
        "approvals_required": plan.required_approvals,
        "requirement": plan_requirement_answer(plan) or None,
        **approval_source(plan),
        "requester": requester_out(plan.requester),
        "review_url": plan.review_url,
        # A reviewer previewed this plan again or edited it: follow the newer plan.
        "superseded_by": plan.superseded_by_id,
        "created_at": plan.created_at,
        "expires_at": plan.expires_at,
        "outcome": outcome,
    }
