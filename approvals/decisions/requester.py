"""The requester: the person an agent proposed a plan for, and the floor that keeps that
person from approving their own request.

Who the person is comes from the ID token the agent attaches, checked by sign-in
(approvals/identity/requester.py) before the core sees it: the core receives a
:class:`Requester`, keeps it on the plan (``Plan.requester``: iss, sub, groups, name,
e-mail; the first three in its fingerprint) and applies the rules here, at each
decision, when a session grant would approve, and at the worker's claim. A plan without
a token is the agent's alone, and nobody is its requester.

Part of who decides (docs/catalog.md), so with the decisions and not with sign-in: the
core imports nothing of approvals.identity for it (pyproject.toml, [tool.importlinter]).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from actions.lib.exceptions import NotAllowed

from ..models import Approval, OidcIdentity


class RequesterMayNotApprove(NotAllowed):
    """The floor: the person a plan was proposed for is never one of its approvers."""

    type = "requester-may-not-approve"


REQUESTER_REFUSAL = "this plan was proposed on your behalf: another reviewer must approve it"


@dataclass(frozen=True)
class Requester:
    issuer: str
    subject: str
    groups: tuple[str, ...]
    name: str
    email: str

    def stored(self) -> dict[str, Any]:
        """What ``Plan.requester`` holds."""
        return {
            "iss": self.issuer,
            "sub": self.subject,
            "groups": sorted(self.groups),
            "name": self.name,
            "email": self.email,
        }


# --- the floor ------------------------------------------------------------------------------


def is_requester(requester: dict | None, user) -> bool:
    """Whether ``user`` is the person a plan was proposed for (``requester``: its
    ``Plan.requester``): their sign-in identity (issuer, subject) is the requester's. A
    plan the agent proposed alone has none."""
    if not requester or user is None or not getattr(user, "pk", None):
        return False
    return OidcIdentity.objects.filter(
        user_id=user.pk, issuer=requester.get("iss"), subject=requester.get("sub")
    ).exists()


def requester_approval_problem(plan) -> str | None:
    """For the worker: why the approvals cannot count, if one of them is the requester's
    (a row that got past the decide service, or a user linked to that identity since)."""
    requester = plan.requester
    if not requester:
        return None
    theirs = Approval.objects.filter(
        plan_id=plan.pk,
        decision=Approval.Decision.APPROVE,
        reviewer__oidc_identity__issuer=requester.get("iss"),
        reviewer__oidc_identity__subject=requester.get("sub"),
    )
    if theirs.exists():
        return "an approval is by the person the plan was requested for"
    return None


def requester_label(requester: dict | None) -> str:
    """ "Ada Lovelace (ada@example.com)", or the subject when the token named nobody."""
    if not requester:
        return ""
    name = requester.get("name") or requester.get("sub") or ""
    email = requester.get("email") or ""
    return f"{name} ({email})" if email and email != name else name
