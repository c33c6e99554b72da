"""A repeated proposal over MCP with the demo's policies in force: the official SDK's
client, over HTTP (the 2026-07-28 revision) and over stdio (the handshake one), against
the live processes, proposes the same change twice each; one plan comes back every time
while it awaits a decision. The policies judge each proposal at its own moment (the time,
the agent's rate, which the first proposal raised), and that moment is no part of what
the plan would do."""

from __future__ import annotations

import pytest

from approvals.models import Plan, PlanStatus
from tests.mcp.conftest import stdio_params
from tests.mcp.test_clients_2026 import EMAIL, over_http, over_stdio

pytestmark = pytest.mark.e2e


def test_the_same_call_twice_is_one_plan_over_http_and_stdio_with_policies_in_force(
    live, live_env, agent_token, demo_policies, upstream
):
    async def twice(client):
        first = await client.call_tool("update_contact_email", {**EMAIL, "reason": "asked"})
        again = await client.call_tool("update_contact_email", {**EMAIL, "reason": "retry"})
        return [r.structured_content for r in (first, again)]

    http = over_http(live["url"], agent_token, twice)
    stdio = over_stdio(stdio_params(live_env, agent_token, live["url"]), twice, mode="legacy")
    assert {p["id"] for p in http + stdio} == {http[0]["id"]}
    assert http[0]["policy"]["outcome"] == "review"  # the contact is a VIP: to a person
    plan = Plan.objects.get()
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert list(plan.events.values_list("kind", flat=True)).count("plan.repeated") == 3
    assert upstream.writes() == []
