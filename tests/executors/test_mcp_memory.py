"""The knowledge-graph memory MCP server (@modelcontextprotocol/server-memory, pinned) as
an upstream: creating an entity, adding observations to it (an update whose arrays are
appended to, as the server dedupes against what it stores) and deleting it, each
previewed by ``open_nodes`` on the entity's name and verified by reading it back; a
change between the preview and the write ends stale with nothing written.

The worker plays in this process (``executor_key``); the server is a real Node process
over stdio (one for the preview side, one for the worker), both on the same memory file."""

from __future__ import annotations

import json

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client

from actions.connectors.mcp.reading import McpReader
from actions.connectors.mcp.sessions import pool_clear
from actions.models import Connector
from actions.services import agent_create
from approvals.models import Plan, PlanStatus
from approvals.services import plan_submit
from tests.executors.mcp_catalogs import load_confirmed, memory_catalog
from tests.mcp.upstreams.servers import memory_server

pytestmark = pytest.mark.usefixtures("executor_key")

ALICE = {"type": "entity", "name": "alice", "entityType": "person", "observations": ["likes tea"]}


def graph(path) -> list[dict]:
    """The memory file's lines, as the server stores them (JSON lines)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def memory_file(tmp_path):
    path = tmp_path / "memory.jsonl"
    path.write_text(json.dumps(ALICE) + "\n")
    return path


@pytest.fixture
def memory(db, memory_file):
    pool_clear()
    server = memory_server(memory_file)
    connector, confirmed = load_confirmed(
        memory_catalog(server.command, server.args, server.env), "memory"
    )
    assert confirmed, "the catalog's tools are confirmed by a person"
    agent, _ = agent_create(
        name="writer",
        action_names=["memory_create", "memory_observe", "memory_delete"],
        active=True,
    )
    yield agent
    pool_clear()


def direct_call(memory_file, tool: str, arguments: dict):
    """One call by another client of its own (the official SDK's), on the same file."""

    async def call():
        params = memory_server(memory_file).params()
        async with Client(stdio_client(params), mode="auto") as client:
            return await client.call_tool(tool, arguments)

    return anyio.run(call)


def submit(agent, action, **input) -> Plan:
    plan, _ = plan_submit(agent=agent, action_name=action, input=input, reason="")
    return plan


def test_create_entities_is_previewed_as_absent_and_verified(memory, memory_file, approve, run):
    entity = {"name": "bob", "entityType": "person", "observations": ["plays chess"]}
    plan = submit(memory, "memory_create", **entity)
    assert plan.before is None
    assert plan.after == entity
    assert plan.precondition["kind"] == "absent"
    assert plan.target["path"] == "entity bob"
    assert plan.target["preview"]["read_tool"] == "open_nodes"
    assert set(plan.target["tools"]) == {"create_entities", "open_nodes"}
    assert plan.write_request == {
        "method": "tools/call",
        "path": "create_entities",
        "body": {"entities": [entity]},
    }
    assert [e["name"] for e in graph(memory_file)] == ["alice"], "the preview wrote nothing"
    run(approve(plan))
    plan.refresh_from_db()
    assert plan.status == PlanStatus.COMPLETED, plan.outcome_detail
    assert plan.verified is True
    assert {"type": "entity", **entity} in graph(memory_file)


def test_an_existing_entity_cannot_be_created_again(memory):
    from actions.connectors.base import TargetExists

    with pytest.raises(TargetExists):
        submit(memory, "memory_create", name="alice", entityType="person", observations=[])


def test_add_observations_appends_what_is_not_stored_yet_and_is_verified(
    memory, memory_file, approve, run
):
    plan = submit(memory, "memory_observe", name="alice", contents=["likes tea", "likes cake"])
    before = {"name": "alice", "entityType": "person", "observations": ["likes tea"]}
    assert plan.before == before
    assert plan.after == {**before, "observations": ["likes tea", "likes cake"]}
    assert plan.changes == [
        {
            "path": "/observations",
            "op": "replace",
            "before": ["likes tea"],
            "after": ["likes tea", "likes cake"],
        }
    ]
    assert plan.precondition["kind"] == "version"
    run(approve(plan))
    plan.refresh_from_db()
    assert plan.status == PlanStatus.COMPLETED, plan.outcome_detail
    assert plan.verified is True
    assert graph(memory_file) == [{**ALICE, "observations": ["likes tea", "likes cake"]}]


def test_delete_entities_is_verified_by_the_entity_being_gone(memory, memory_file, approve, run):
    plan = submit(memory, "memory_delete", name="alice")
    assert plan.before == {"name": "alice", "entityType": "person", "observations": ["likes tea"]}
    assert plan.after is None
    assert plan.write_request["body"] == {"entityNames": ["alice"]}
    run(approve(plan))
    plan.refresh_from_db()
    assert plan.status == PlanStatus.COMPLETED, plan.outcome_detail
    assert plan.verified is True
    assert graph(memory_file) == []


def test_an_observation_twice_in_one_input_is_refused(memory):
    from actions.lib.exceptions import InvalidInput

    with pytest.raises(InvalidInput):
        submit(memory, "memory_observe", name="alice", contents=["likes cake", "likes cake"])


def test_an_observation_added_by_a_direct_call_after_the_preview_ends_stale(
    memory, memory_file, approve, run
):
    plan = approve(submit(memory, "memory_observe", name="alice", contents=["likes cake"]))
    # Someone else's client, straight to the server (not through Countersign).
    answer = direct_call(
        memory_file,
        "add_observations",
        {"observations": [{"entityName": "alice", "contents": ["likes coffee"]}]},
    )
    assert not answer.is_error
    run(plan)
    plan.refresh_from_db()
    assert plan.status == PlanStatus.STALE, plan.outcome_detail
    assert graph(memory_file) == [{**ALICE, "observations": ["likes tea", "likes coffee"]}]


def test_the_memory_file_edited_after_the_preview_ends_stale(memory, memory_file, approve, run):
    plan = approve(submit(memory, "memory_delete", name="alice"))
    edited = {**ALICE, "observations": ["likes tea", "moved to Paris"]}
    memory_file.write_text(json.dumps(edited) + "\n")
    run(plan)
    plan.refresh_from_db()
    assert plan.status == PlanStatus.STALE, plan.outcome_detail
    assert graph(memory_file) == [edited], "nothing was deleted"


def test_the_node_server_speaks_the_2025_protocol(memory):
    connector = Connector.objects.get(name="memory")
    with McpReader(connector) as reader:
        reader.tools()
        assert reader._session().protocol_version == "2025-11-25"


def test_an_entity_created_by_someone_else_after_the_preview_ends_stale(
    memory, memory_file, approve, run
):
    plan = approve(
        submit(memory, "memory_create", name="bob", entityType="person", observations=["mine"])
    )
    theirs = {"name": "bob", "entityType": "robot", "observations": ["theirs"]}
    assert not direct_call(memory_file, "create_entities", {"entities": [theirs]}).is_error
    run(plan)
    plan.refresh_from_db()
    assert plan.status == PlanStatus.STALE, plan.outcome_detail
    assert graph(memory_file) == [ALICE, {"type": "entity", **theirs}]
