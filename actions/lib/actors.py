"""Who did something, as the audit trail and the records name them."""

from __future__ import annotations

SYSTEM = "system"
EXECUTOR = "system:executor"  # a worker executing, following or reconciling a plan
SWEEPER = "system:sweeper"
# A plan the catalog's policies approved: the event's data names the policies and the
# set's hash and version.
POLICY = "system:policy"


def agent_actor(agent) -> str:
    return f"agent:{agent.name}"


def user_actor(user) -> str:
    return f"user:{user.get_username()}"


def grant_actor(grant) -> str:
    """A plan approved by a session grant is approved by the grant, on its maker's
    behalf (the event's data names the person)."""
    return f"grant:{grant.id}"
