"""The filesystem MCP server (@modelcontextprotocol/server-filesystem, pinned) as an
upstream: write_file previewed by its paired read_text_file, edit_file by its own dry run,
a file changed between the preview and the write ending stale with nothing written, and
the preview side refusing any tool the catalog does not declare a read.

The worker plays in this process (``executor_key``); the server is a real Node process
over stdio, kept in this process's session pool."""

from __future__ import annotations

import pytest

from actions.connectors.mcp.reading import McpReader, ReadRefused
from actions.connectors.mcp.sessions import pool_clear
from actions.models import Connector
from actions.services import agent_create
from approvals.models import Plan, PlanStatus
from approvals.services import plan_submit
from tests.executors.mcp_catalogs import filesystem_catalog, load_confirmed
from tests.mcp.upstreams.servers import filesystem_server

pytestmark = pytest.mark.usefixtures("executor_key")


@pytest.fixture
def root(tmp_path):
    (tmp_path / "notes.txt").write_text("one\ntwo\n")
    return tmp_path


@pytest.fixture
def files(db, root):
    pool_clear()
    server = filesystem_server(root)
    connector, _ = load_confirmed(filesystem_catalog(server.command, server.args), "files")
    agent, _ = agent_create(
        name="writer", action_names=["fs_read", "fs_write", "fs_create", "fs_edit"], active=True
    )
    yield agent
    pool_clear()


def submit(agent, action, **input) -> Plan:
    plan, _ = plan_submit(agent=agent, action_name=action, input=input, reason="")
    return plan


def test_write_file_is_previewed_by_its_paired_read_and_verified(files, root, approve, run):
    path = str(root / "notes.txt")
    plan = submit(files, "fs_write", path=path, content="one\nTWO\nthree\n")
    assert plan.before == "one\ntwo\n"
    assert plan.after == "one\nTWO\nthree\n"
    assert plan.target["preview"]["recipe"] == "paired_read"
    assert plan.target["preview"]["strength"] == "strong"
    assert plan.write_request == {
        "method": "tools/call",
        "path": "write_file",
        "body": {"path": path, "content": "one\nTWO\nthree\n"},
    }
    assert (root / "notes.txt").read_text() == "one\ntwo\n", "the preview wrote nothing"
    run(approve(plan))
    plan.refresh_from_db()
    assert plan.status == PlanStatus.COMPLETED, plan.outcome_detail
    assert plan.verified is True
    assert (root / "notes.txt").read_text() == "one\nTWO\nthree\n"


def test_a_file_changed_after_the_preview_ends_stale_with_nothing_written(
    files, root, approve, run
):
    path = str(root / "notes.txt")
    plan = approve(submit(files, "fs_write", path=path, content="mine\n"))
    (root / "notes.txt").write_text("someone else's\n")
    run(plan)
    plan.refresh_from_db()
    assert plan.status == PlanStatus.STALE
    assert (root / "notes.txt").read_text() == "someone else's\n"


def test_edit_file_is_previewed_by_its_own_dry_run(files, root, approve, run):
    path = str(root / "notes.txt")
    edits = [{"oldText": "two", "newText": "TWO"}]
    plan = submit(files, "fs_edit", path=path, edits=edits)
    assert plan.target["preview"]["recipe"] == "dry_run"
    assert "promises it writes nothing" in plan.target["preview"]["says"]
    assert "-two" in plan.after and "+TWO" in plan.after
    assert plan.write_request["body"]["dryRun"] is False, "the real call says so explicitly"
    assert (root / "notes.txt").read_text() == "one\ntwo\n", "the dry run wrote nothing"
    run(approve(plan))
    plan.refresh_from_db()
    assert plan.status == PlanStatus.COMPLETED, plan.outcome_detail
    assert (root / "notes.txt").read_text() == "one\nTWO\n"


def test_a_dry_run_that_differs_before_the_write_ends_stale(files, root, approve, run):
    path = str(root / "notes.txt")
    plan = approve(submit(files, "fs_edit", path=path, edits=[{"oldText": "two", "newText": "2"}]))
    (root / "notes.txt").write_text("one\ntwo\nthree\n")
    run(plan)
    plan.refresh_from_db()
    assert plan.status == PlanStatus.STALE
    assert (root / "notes.txt").read_text() == "one\ntwo\nthree\n"


def test_the_preview_side_refuses_a_tool_not_declared_a_read(files, root):
    connector = Connector.objects.get(name="files")
    target = root / "notes.txt"
    with McpReader(connector) as reader:
        with pytest.raises(ReadRefused):
            reader.call("write_file", {"path": str(target), "content": "x"})
        with pytest.raises(ReadRefused, match="only as a dry run"):
            reader.call("edit_file", {"path": str(target), "edits": [], "dryRun": False})
        with pytest.raises(ReadRefused):
            reader.call("move_file", {"source": str(target), "destination": str(target) + ".b"})
    assert target.read_text() == "one\ntwo\n"
