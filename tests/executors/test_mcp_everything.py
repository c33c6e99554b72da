"""The "everything" reference MCP server (@modelcontextprotocol/server-everything, pinned)
as an upstream over Streamable HTTP: a read (a tool with structured content whose
declared result fields reach the agent) and a harmless write with no preview, sent with
the static header the connector's ``mcp.headers`` names.

One server process for the module (it starts in about half a second, but every test
would pay it); each test's connector opens its own HTTP sessions on it."""

from __future__ import annotations

import json

import pytest

from actions.catalog import load_catalog
from actions.connectors.mcp.pins import tools_confirm
from actions.connectors.mcp.reading import McpReader, ReadRefused
from actions.connectors.mcp.sessions import pool_clear
from actions.models import Connector
from actions.services import agent_create
from approvals.models import Plan, PlanStatus
from approvals.services import plan_submit
from tests.executors.mcp_catalogs import everything_catalog
from tests.mcp.upstreams.servers import everything_http

pytestmark = pytest.mark.usefixtures("executor_key")

HEADER = ("X-Team", "catalog-e2e")


@pytest.fixture(scope="module")
def url():
    with everything_http() as url:
        yield url
    pool_clear()


@pytest.fixture
def agent(db, url):
    pool_clear()
    load_catalog(json.dumps(everything_catalog(url, dict([HEADER]))))
    connector = Connector.objects.get(name="everything")
    with McpReader(connector) as reader:
        tools_confirm(connector, reader.tools(), names=None, actor="admin")
    agent, _ = agent_create(name="caller", action_names=["ev_weather", "ev_logging"], active=True)
    yield agent
    pool_clear()


def submit(agent, action, **input) -> Plan:
    plan, _ = plan_submit(agent=agent, action_name=action, input=input, reason="")
    return plan


def test_the_connector_is_reached_over_http_with_its_header(agent, url):
    connector = Connector.objects.get(name="everything")
    assert connector.server == {"transport": "http", "url": url, "headers": dict([HEADER])}
    assert connector.base_url == url
    with McpReader(connector) as reader:
        session = reader._session()
        assert reader._spec.transport == "http"
        assert HEADER in reader._spec.headers
        answer = reader.call("get-structured-content", {"location": "New York"})
        assert not answer.is_error
        assert set(answer.structured) == {"temperature", "conditions", "humidity"}
        with pytest.raises(ReadRefused):
            reader.call("echo", {"message": "not declared"})
        assert session.protocol_version == "2025-11-25"


def test_a_read_tool_with_structured_content_gives_its_declared_fields(agent, approve, run):
    plan = submit(agent, "ev_weather", location="Chicago")
    assert plan.target["preview"]["recipe"] == "read"
    assert plan.write_request == {
        "method": "tools/call",
        "path": "get-structured-content",
        "body": {"location": "Chicago"},
    }
    if plan.status == PlanStatus.AWAITING_APPROVAL:
        plan = approve(plan)
    if plan.status == PlanStatus.APPROVED:
        run(plan)
    plan.refresh_from_db()
    assert plan.status == PlanStatus.COMPLETED, plan.outcome_detail
    assert set(plan.result) == {"temperature", "conditions", "humidity"}
    assert isinstance(plan.result["temperature"], int | float)
    assert isinstance(plan.result["conditions"], str) and plan.result["conditions"]


def test_a_write_with_no_preview_is_called_once_after_a_person_approves(agent, approve, run):
    plan = submit(agent, "ev_logging")
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert plan.target["preview"] == {
        "recipe": "none",
        "strength": "none",
        "says": "no preview: the exact call is shown",
    }
    assert plan.write_request == {
        "method": "tools/call",
        "path": "toggle-simulated-logging",
        "body": {},
    }
    assert plan.precondition["kind"] == "none"
    run(approve(plan))
    plan.refresh_from_db()
    assert plan.status == PlanStatus.COMPLETED, plan.outcome_detail
    assert plan.verified is False, "nothing to read back"
    assert plan.upstream_status is None
