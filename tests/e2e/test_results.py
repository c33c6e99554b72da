"""Results and reads with the live processes: the web server, a Celery worker (the only
holder of credentials) and the demo upstream. The agent speaks the JSON API and MCP."""

from __future__ import annotations

import anyio
import pytest

from actions.models import Agent
from approvals.grants import grant_create
from tests.e2e.support import eventually
from tests.mcp.conftest import http_client

pytestmark = pytest.mark.e2e

CANARY = "canary-undeclared-" + "7c3d" * 8
REMINDER = {
    "customer_id": "cus-77",
    "channel": "sms",
    "send_at": "2030-01-02T09:00:00Z",
    "message": "Your invoice is due.",
}


@pytest.fixture(autouse=True)
def _agent_in_ws_blue(live, agent):
    Agent.objects.filter(pk=agent.pk).update(attributes={"workspace": "ws-blue"})


def propose(agent_api, action: str, input: dict) -> dict:
    response = agent_api.http.post("/plans", json={"action": action, "input": input})
    assert response.status_code == 201, response.text
    return response.json()


def test_a_read_under_a_grant_returns_only_the_declared_fields(
    live, agent, agent_api, reviewer, rita, upstream, live_logs
):
    upstream.mutate("/contacts/c-1001", {"notes": CANARY})
    grant_create(creator=reviewer, agent=agent, action_names=["get_contact"], duration_seconds=600)
    plan = propose(agent_api, "get_contact", {"contact_id": "c-1001"})
    assert plan["status"] == "approved"  # the grant covered it
    done = agent_api.wait_for(plan["id"])
    assert done["status"] == "completed", done
    result = done["outcome"]["result"]
    assert set(result) == {"contact_id", "name", "email", "workspace", "version"}
    assert result["name"] == "Ada Lovelace" and result["workspace"] == "ws-blue"
    assert upstream.writes() == []
    # The canary the upstream held in an undeclared field reached nobody.
    assert CANARY not in agent_api.http.get(f"/plans/{plan['id']}").text
    assert CANARY not in rita.page(plan["id"])
    logs = "".join(p.read_text(errors="replace") for p in live_logs.glob("*.log"))
    assert CANARY not in logs


def test_a_sensitive_read_waits_for_a_reviewer(live, agent_api, rita, upstream):
    before = len(upstream.requests_log())
    plan = propose(agent_api, "get_contact_phone", {"contact_id": "c-1001"})
    assert plan["status"] == "awaiting_approval"
    page = rita.page(plan["id"])
    assert 'data-testid="read-fields"' in page and "<code>phone</code>" in page
    assert len(upstream.requests_log()) == before  # nothing was read to propose it
    rita.decide(plan["id"], "approve")
    done = agent_api.wait_for(plan["id"])
    assert done["status"] == "completed"
    assert done["outcome"]["result"] == {"contact_id": "c-1001", "phone": "+44 20 7946 0001"}


def test_send_reminder_returns_its_id_over_the_api_and_mcp(
    live, agent_token, agent_api, rita, upstream
):
    plan = propose(agent_api, "send_reminder", REMINDER)
    rita.decide(plan["id"], "approve")
    done = agent_api.wait_for(plan["id"])
    assert done["status"] == "completed"
    (reminder,) = upstream.state()["reminders"].values()
    assert done["outcome"]["result"]["reminder_id"] == reminder["id"]
    assert done["outcome"]["result"]["status"] == "scheduled"

    async def read(client):
        return await client.call_tool("get_plan", {"plan_id": plan["id"]})

    async def main():
        async with http_client(live["url"], agent_token) as client:
            return await read(client)

    over_mcp = anyio.run(main)
    assert over_mcp.structured_content["outcome"]["result"] == done["outcome"]["result"]
    assert f"`{reminder['id']}`" in over_mcp.content[0].text


def test_start_deployment_gives_its_id_at_pending_and_its_status_at_completed(
    live, agent_api, rita, upstream
):
    plan = propose(agent_api, "start_deployment", {"service": "api", "version": "v1.2.3"})
    rita.decide(plan["id"], "approve")
    pending = agent_api.wait_for(plan["id"], statuses={"pending", "completed"})
    deployment_id = pending["outcome"]["result"]["deployment_id"]
    assert deployment_id in upstream.state()["deployments"]
    if pending["status"] == "pending":
        assert pending["outcome"]["check_with"] == {
            "action": "get_deployment",
            "input": {"deployment_id": deployment_id},
        }
    done = agent_api.wait_for(plan["id"], statuses={"completed"}, timeout=30)
    assert done["outcome"]["result"] == {"deployment_id": deployment_id, "status": "succeeded"}
    # The read it named works, and needs nobody: the agent checks the job itself.
    check = propose(agent_api, "get_deployment", {"deployment_id": deployment_id})
    assert check["status"] == "approved"
    assert agent_api.wait_for(check["id"])["outcome"]["result"]["status"] == "succeeded"


def test_a_200_that_changed_nothing_ends_not_applied(live, agent_api, rita, upstream):
    before = upstream.state()["contacts"]["c-1001"]
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", ignore=True)
    plan = agent_api.propose()
    rita.decide(plan["id"], "approve")
    done = agent_api.wait_for(plan["id"])
    assert done["status"] == "not_applied"
    assert done["outcome"]["verified"] is False and done["outcome"]["upstream_status"] == 200
    assert [w["method"] for w in upstream.writes()] == ["PATCH"]
    assert upstream.state()["contacts"]["c-1001"] == before
    eventually(lambda: 'data-testid="not-applied"' in rita.page(plan["id"]), what="page")


def test_a_create_the_upstream_adds_a_version_to_is_verified(live, agent_api, rita, upstream):
    contact = {
        "contact_id": "c-2600",
        "name": "Dorothy Vaughan",
        "email": "dv@example.test",
        "workspace": "ws-blue",
    }
    plan = propose(agent_api, "create_contact", contact)
    rita.decide(plan["id"], "approve")
    done = agent_api.wait_for(plan["id"])
    assert done["status"] == "completed", done
    assert done["outcome"]["verified"] is True, done["outcome"]
    assert done["outcome"]["upstream_status"] == 201
    # The upstream's record carries a field of its own the plan never set.
    assert upstream.state()["contacts"]["c-2600"]["version"] == 1
    assert [w["method"] for w in upstream.writes()] == ["PUT"]
