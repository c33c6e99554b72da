"""The git MCP server (mcp-server-git from PyPI, pinned) as an upstream: creating a branch
has no preview (the exact call is shown, a person decides); a commit is previewed by the
staged diff, read as a delete of what is staged, and verified by nothing being staged
after it; something else staged between the preview and the commit ends stale with
nothing committed.

The repository is a real one made with ``git init``; the server is a real Python process
over stdio, limited to that repository. It speaks the 2026-07-28 protocol where the Node
servers speak 2025-11-25: both eras are in use through the same session pool."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from actions.catalog import load_catalog
from actions.connectors.base import TargetNotFound
from actions.connectors.mcp.reading import McpReader
from actions.connectors.mcp.sessions import pool_clear
from actions.models import Connector
from actions.services import agent_create
from approvals.models import Plan, PlanStatus
from approvals.services import plan_submit
from tests.executors.mcp_catalogs import git_catalog, load_confirmed, memory_catalog
from tests.mcp.upstreams.servers import git_server, memory_server

pytestmark = pytest.mark.usefixtures("executor_key")


def git(repo, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, timeout=30
    )
    return done.stdout


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Tess")
    git(path, "config", "user.email", "tess@example.com")
    git(path, "config", "commit.gpgsign", "false")
    (path / "f.txt").write_text("x\n")
    git(path, "add", "f.txt")
    git(path, "commit", "-q", "-m", "first")
    (path / "f.txt").write_text("x\ny\n")
    git(path, "add", "f.txt")
    return path


@pytest.fixture
def agent(db, repo):
    pool_clear()
    server = git_server(repo)
    connector, _ = load_confirmed(git_catalog(server.command, server.args), "git")
    agent, _ = agent_create(
        name="writer", action_names=["git_branch", "git_commit", "git_status"], active=True
    )
    yield agent
    pool_clear()


def submit(agent, action, **input) -> Plan:
    plan, _ = plan_submit(agent=agent, action_name=action, input=input, reason="")
    return plan


def test_a_commit_is_previewed_by_the_staged_diff_and_verified(agent, repo, approve, run):
    plan = submit(agent, "git_commit", repo_path=str(repo), message="second")
    assert plan.before.startswith("Staged changes:\ndiff --git a/f.txt b/f.txt\n")
    assert plan.before.endswith(" x\n+y")
    assert plan.after is None
    assert plan.precondition["kind"] == "version"
    assert plan.target["preview"] == {
        "recipe": "paired_read",
        "strength": "strong",
        "says": "computed from a read of the target",
        "read_tool": "git_diff_staged",
    }
    assert plan.write_request == {
        "method": "tools/call",
        "path": "git_commit",
        "body": {"repo_path": str(repo), "message": "second"},
    }
    assert git(repo, "log", "--format=%s") == "first\n", "the preview committed nothing"
    run(approve(plan))
    plan.refresh_from_db()
    assert plan.status == PlanStatus.COMPLETED, plan.outcome_detail
    assert plan.verified is True
    assert git(repo, "log", "--format=%s") == "second\nfirst\n"
    assert git(repo, "diff", "--cached") == ""
    # Nothing staged now: nothing to commit, said at the proposal.
    with pytest.raises(TargetNotFound):
        submit(agent, "git_commit", repo_path=str(repo), message="empty")


def test_something_else_staged_after_the_preview_ends_stale_with_nothing_committed(
    agent, repo, approve, run
):
    plan = approve(submit(agent, "git_commit", repo_path=str(repo), message="second"))
    (repo / "g.txt").write_text("someone else's\n")
    git(repo, "add", "g.txt")
    run(plan)
    plan.refresh_from_db()
    assert plan.status == PlanStatus.STALE, plan.outcome_detail
    assert git(repo, "log", "--format=%s") == "first\n"
    assert git(repo, "diff", "--cached", "--name-only") == "f.txt\ng.txt\n"


def test_a_branch_is_created_with_no_preview_and_a_person_decides(
    agent, repo, approve, run, client, reviewer
):
    plan = submit(agent, "git_branch", repo_path=str(repo), branch_name="feature")
    assert plan.target["preview"]["recipe"] == "none"
    assert plan.target["preview"]["strength"] == "none"
    client.force_login(reviewer)
    page = client.get(plan.get_absolute_url()).content.decode()
    said = re.search(r'<p[^>]*data-testid="preview-recipe"[^>]*>(.*?)</p>', page, re.S)
    assert said is not None
    assert " ".join(said.group(1).split()) == (
        "No preview: the exact call is shown, and nothing was computed."
    )
    assert plan.before is None
    assert plan.after == {"repo_path": str(repo), "branch_name": "feature"}
    assert plan.precondition["kind"] == "none"
    assert plan.write_request["body"] == {"repo_path": str(repo), "branch_name": "feature"}
    assert "feature" not in git(repo, "branch", "--list")
    run(approve(plan))
    plan.refresh_from_db()
    assert plan.status == PlanStatus.COMPLETED, plan.outcome_detail
    assert plan.verified is False, "nothing to read back"
    assert git(repo, "branch", "--list", "--format=%(refname:short)").split() == [
        "feature",
        "main",
    ]
    # The same call again: the server's own error, the plan rejected, nothing changed.
    again = approve(submit(agent, "git_branch", repo_path=str(repo), branch_name="feature"))
    run(again)
    again.refresh_from_db()
    assert again.status == PlanStatus.REJECTED, again.outcome_detail
    assert "reported an error" in again.outcome_detail
    assert git(repo, "branch", "--list", "--format=%(refname:short)").split() == [
        "feature",
        "main",
    ]


def test_the_git_server_and_a_node_server_speak_two_protocol_eras(agent, tmp_path):
    """mcp-server-git negotiates the 2026-07-28 era in auto mode; the Node servers answer
    2025-11-25. Both sessions live side by side in the pool."""
    server = memory_server(tmp_path / "memory.jsonl")
    load_catalog(json.dumps(memory_catalog(server.command, server.args, server.env)))
    eras = {}
    for name in ("git", "memory"):
        with McpReader(Connector.objects.get(name=name)) as reader:
            reader.tools()
            eras[name] = reader._session().protocol_version
    assert eras == {"git": "2026-07-28", "memory": "2025-11-25"}


def test_a_plain_text_read_gives_the_agent_its_text_as_the_declared_field(agent, repo, run):
    """git_status answers plain text: declared as the one ``text`` field, it reaches the
    agent whole, filtered and cut like any string field, and nothing is written."""
    (repo / "new.txt").write_text("x\n")
    before = git(repo, "status", "--porcelain")
    plan = submit(agent, "git_status", repo_path=str(repo))
    assert plan.status == PlanStatus.APPROVED, "an observation its action lets run at once"
    run(plan)
    plan.refresh_from_db()
    assert plan.status == PlanStatus.COMPLETED, plan.outcome_detail
    status = plan.result["status"]
    assert status.startswith("Repository status:") and "new.txt" in status
    assert git(repo, "status", "--porcelain") == before, "a read changes nothing"
