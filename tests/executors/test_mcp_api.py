"""An MCP upstream's action proposed the ways an agent proposes: through the JSON API
(``POST /api/v1/plans`` with an agent token) and through Countersign's own MCP server
(the official Python client, in process), then approved and executed in this process
against the real memory server. The plan says how its preview was made, on the page and
in the API (``preview.recipe``, ``strength``, ``says``)."""

from __future__ import annotations

import json
import re

import anyio
import pytest

from actions.connectors.mcp.sessions import pool_clear
from actions.services import agent_create
from approvals.models import Plan, PlanStatus
from tests.executors.mcp_catalogs import load_confirmed, memory_catalog
from tests.executors.test_mcp_memory import ALICE, graph, memory_file  # noqa: F401
from tests.mcp.conftest import in_process  # noqa: F401  (fixture)
from tests.mcp.upstreams.servers import memory_server

pytestmark = pytest.mark.usefixtures("executor_key")

PAIRED = {
    "recipe": "paired_read",
    "strength": "strong",
    "says": "computed from a read of the target",
}


@pytest.fixture
def token(db, memory_file):  # noqa: F811 - the memory tests' fixture
    pool_clear()
    server = memory_server(memory_file)
    connector, _ = load_confirmed(memory_catalog(server.command, server.args, server.env), "memory")
    _, token = agent_create(
        name="assistant", action_names=["memory_observe", "memory_delete"], active=True
    )
    yield token
    pool_clear()


def plan_page(client, reviewer, plan: Plan) -> str:
    client.force_login(reviewer)
    response = client.get(plan.get_absolute_url())
    assert response.status_code == 200
    return response.content.decode()


def test_proposed_through_the_api_approved_and_executed(
    client,
    token,
    memory_file,  # noqa: F811
    reviewer,
    approve,
    run,
):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    body = {
        "action": "memory_observe",
        "input": {"name": "alice", "contents": ["likes cake"]},
        "reason": "she said so",
    }
    response = client.post(
        "/api/v1/plans", data=json.dumps(body), content_type="application/json", **headers
    )
    assert response.status_code == 201, response.content
    shown = response.json()
    assert shown["status"] == "awaiting_approval"
    assert shown["target"] == {"connector": "memory", "path": "entity alice"}
    preview = shown["preview"]
    assert {k: preview[k] for k in PAIRED} == PAIRED
    assert preview["before"]["observations"] == ["likes tea"]
    assert preview["after"]["observations"] == ["likes tea", "likes cake"]
    assert preview["request"] == {
        "method": "tools/call",
        "path": "add_observations",
        "headers": {},
        "body": {"observations": [{"entityName": "alice", "contents": ["likes cake"]}]},
    }
    assert shown["precondition"]["kind"] == "version"

    plan = Plan.objects.get(pk=shown["id"])
    page = plan_page(client, reviewer, plan)
    said = re.search(r'<p[^>]*data-testid="preview-recipe"[^>]*>(.*?)</p>', page, re.S)
    assert said is not None, "the page says how the preview was made"
    assert " ".join(said.group(1).split()) == (
        "Preview: computed from a read of the target, read again right before the call "
        "and after it."
    )

    run(approve(plan))
    after = client.get(f"/api/v1/plans/{plan.id}", **headers).json()
    assert after["status"] == PlanStatus.COMPLETED, after["outcome"]
    assert after["outcome"]["verified"] is True
    assert after["outcome"]["request_sent"] is True
    assert graph(memory_file) == [{**ALICE, "observations": ["likes tea", "likes cake"]}]


def test_proposed_through_countersigns_mcp_server_approved_and_executed(
    in_process,  # noqa: F811
    token,
    memory_file,  # noqa: F811
    client,
    reviewer,
    approve,
    run,
):
    async def propose():
        async with in_process(token) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert {"memory_observe", "memory_delete"} <= set(tools)
            return await session.call_tool("memory_delete", {"name": "alice", "reason": "gone"})

    result = anyio.run(propose)
    assert not result.is_error, result.content
    plan = Plan.objects.get()
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert "nothing has been written" in result.content[0].text
    structured = result.structured_content
    assert structured["id"] == str(plan.id)
    assert {k: structured["preview"][k] for k in PAIRED} == PAIRED
    assert structured["preview"]["request"]["body"] == {"entityNames": ["alice"]}
    assert graph(memory_file) == [ALICE], "proposing wrote nothing upstream"

    page = plan_page(client, reviewer, plan)
    assert 'data-testid="preview-recipe"' in page

    run(approve(plan))
    plan.refresh_from_db()
    assert plan.status == PlanStatus.COMPLETED, plan.outcome_detail
    assert plan.verified is True
    assert graph(memory_file) == []


def test_an_http_plan_says_its_preview_is_a_read_of_the_target(client, make_plan, api_headers):
    """A plan of an HTTP upstream records no recipe: its precondition tells it."""
    plan = make_plan()
    preview = client.get(f"/api/v1/plans/{plan.id}", **api_headers).json()["preview"]
    assert (preview["recipe"], preview["strength"]) == ("read", "strong")
    reminder = {
        "customer_id": "cus-77",
        "channel": "sms",
        "send_at": "2030-01-02T09:00:00Z",
        "message": "Your invoice is due.",
    }
    invoke = make_plan("send_reminder", reminder)
    preview = client.get(f"/api/v1/plans/{invoke.id}", **api_headers).json()["preview"]
    assert (invoke.precondition["kind"], preview["recipe"], preview["strength"]) == (
        "none",
        "none",
        "none",
    )
