"""The resources as an agent lists, reads and subscribes to them: the action cards and its
own plans (approvals/mcp/resources.py keeps the plans' resources and subscriptions)."""

from __future__ import annotations

import uuid

import mcp.types as types
from mcp.shared.exceptions import MCPError

from actions.lib.exceptions import CountersignError
from actions.lib.problems import problem_body, problem_line

from ..selectors import plan_for_agent
from . import resources
from .boundary import INVALID_PARAMS, authenticate
from .rendering import CARD_URI, card_markdown
from .tools import offered


def list_resources(token: str | None, how: str) -> list[types.Resource]:
    agent = authenticate(token, how=how)
    cards = [
        types.Resource(
            uri=CARD_URI.format(name=a.name),
            name=f"{a.name} card",
            title=f"Card: {a.title}",
            description=f"What {a.name} does once approved, its scope, and who must consent.",
            mime_type="text/markdown",
        )
        for a in offered(agent)
    ]
    return cards + resources.plan_resources(agent)


def _not_found(detail: str) -> MCPError:
    problem = problem_body(status=404, type="not-found", title="Not found", detail=detail)
    return MCPError(code=INVALID_PARAMS, message=problem_line(problem), data=problem)


def read_resource(token: str | None, how: str, uri: str) -> types.ReadResourceResult:
    agent = authenticate(token, how=how)
    plan_id = resources.plan_id_from_uri(uri)
    if plan_id is not None:
        try:
            return resources.plan_contents(plan_for_agent(agent, plan_id))
        except CountersignError:
            raise _not_found("no such plan for this agent") from None
    for action in offered(agent):
        if CARD_URI.format(name=action.name) == uri:
            return types.ReadResourceResult(
                contents=[
                    types.TextResourceContents(
                        uri=uri, mime_type="text/markdown", text=card_markdown(action)
                    )
                ]
            )
    raise _not_found("no such card for this agent")


def subscribable_plan(token: str | None, how: str, uri: str) -> uuid.UUID:
    agent = authenticate(token, how=how)
    plan_id = resources.plan_id_from_uri(uri)
    if plan_id is None or not resources.owned_plan_ids(agent, [uri]):
        raise _not_found("only your own plans (countersign://plans/{id}) can be subscribed to")
    return plan_id
