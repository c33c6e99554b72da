"""Reads an agent is allowed to make. The JSON API and the MCP server both use these, so
an agent sees the same actions and the same plans through either door."""

from __future__ import annotations

import uuid

from django.db.models import QuerySet

from actions.lib.exceptions import NotFound
from actions.models import Action, Agent

from .models import Plan


def actions_for_agent(agent: Agent) -> QuerySet[Action]:
    """The enabled actions ``agent`` may propose, by name."""
    return agent.actions.filter(enabled=True).order_by("name")


def plan_for_agent(agent: Agent, plan_id: uuid.UUID | str) -> Plan:
    """One of the agent's own plans; another agent's plan is as absent as a missing one."""
    plan = Plan.objects.select_related("action").filter(id=plan_id, agent=agent).first()
    if plan is None:
        raise NotFound("no such plan for this agent")
    return plan
