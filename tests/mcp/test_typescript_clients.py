"""The official TypeScript MCP SDK clients against the live web server: 1.x (what most
desktop clients and IDEs are built on) and 2.x, in the eras each speaks, pinned in
tests/mcp/ts/package.json and installed by ``npm ci`` (.ci/run). Node runs the walk in
tests/mcp/ts/walk.mjs, which prints a JSON report; the assertions are here.

What they show: a refusal arrives as a readable tool result (the pointer, no -32602),
every structured result passes the SDK's own outputSchema validation (which it runs on
error results too in 1.x), the plan, the resources and the card read as they do with
the Python client, and a client that goes through an OAuth ``authProvider`` with a
refused token ends with an error that says how this server authenticates — not a parse
error on an HTML page."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import connections

from approvals.models import Plan, PlanStatus
from approvals.services import approval_record

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent / "ts"
CLIENTS = {
    # (script, era): the SDK version is read from its package.json by the script.
    "1.x": ("walk-v1.mjs", "legacy"),
    "2.x-handshake": ("walk-v2.mjs", "legacy"),
    "2.x-2026-07-28": ("walk-v2.mjs", "2026-07-28"),
}
PINNED = {"1.x": "1.32.2", "2.x-handshake": "2.4.0", "2.x-2026-07-28": "2.4.0"}
NO_AUTHORIZATION_SERVER = "Countersign has no OAuth authorization server"


@contextmanager
def approving(reviewer, reason: str):
    """A reviewer in another thread approves the plan proposed with ``reason`` as soon
    as it appears (the walk's task waits for that decision)."""
    stop = threading.Event()

    def run() -> None:
        try:
            while not stop.wait(0.2):
                plan = Plan.objects.filter(
                    reason=reason, status=PlanStatus.AWAITING_APPROVAL
                ).first()
                if plan is not None:
                    approval_record(
                        plan_id=plan.id,
                        reviewer=reviewer,
                        decision="approve",
                        fingerprint_seen=plan.fingerprint,
                    )
                    return
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


def node_walk(client: str, url: str, token: str, *, walk: str = "all") -> dict:
    node = shutil.which("node")
    installed = (HERE / "node_modules" / "@modelcontextprotocol").is_dir()
    if node is None or not installed:
        pytest.fail(
            "the TypeScript MCP clients need Node.js and their packages: "
            "npm ci --prefix tests/mcp/ts (as .ci/run does)",
            pytrace=False,
        )
    script, era = CLIENTS[client]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "COUNTERSIGN_URL": url,
        "COUNTERSIGN_TOKEN": token,
        "COUNTERSIGN_ERA": era,
        "COUNTERSIGN_WALK": walk,
    }
    done = subprocess.run(
        [node, script],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    lines = done.stdout.strip().splitlines()
    assert lines, f"no report from {script}: {done.stderr[-2000:]}"
    report = json.loads(lines[-1])
    assert "fatal" not in report, report
    assert done.returncode == 0, done.stderr[-2000:]
    return report


@pytest.mark.parametrize("client", list(CLIENTS))
def test_the_typescript_sdk_walk(live, agent_token, upstream, client):
    report = node_walk(client, live["url"], agent_token)
    steps = report["steps"]
    assert report["sdk"] == PINNED[client]
    if CLIENTS[client][1] == "legacy":
        assert report["protocolVersion"] == "2025-11-25"
    else:
        assert report["protocolVersion"] == "2026-07-28"
    caps = report["serverCapabilities"]
    # Nothing sends list_changed: both eras say so.
    assert caps["tools"].get("listChanged") is False
    assert caps["resources"].get("listChanged") is False

    # Every tool declares what its results are: the plan, or the problem of a refusal.
    assert {t["name"] for t in steps["tools"]} >= {"update_contact_email", "get_plan"}
    for tool in steps["tools"]:
        assert tool["outputSchemaType"] == "object", tool
        assert tool["outputSchemaBranches"] == ["#/$defs/PlanOut", "#/$defs/Problem"], tool

    # A refusal is a result the client shows, not an exception: the pointer and the
    # reason in the text, the problem document as structured content, checked by the SDK.
    refused = steps["refused"]
    assert refused["threw"] is None, refused["threw"]
    assert refused["isError"] is True
    assert refused["text"].startswith("**Refused: The input does not match the action's schema**")
    assert "`/arguments/email`" in refused["text"]
    assert "No plan was created." in refused["text"]
    problem = refused["structuredContent"]
    assert problem["type"] == "urn:countersign:problem:invalid-input"
    assert [e["pointer"] for e in problem["errors"]] == ["/arguments/email"]
    bad_id = steps["refusedGetPlan"]
    assert bad_id["threw"] is None and bad_id["isError"] is True
    assert "`/arguments/plan_id`" in bad_id["text"]

    # The proposal, get_plan and cancel_plan: plans that pass the SDK's validation.
    proposed = steps["proposed"]
    assert proposed["threw"] is None, proposed["threw"]
    plan = proposed["structuredContent"]
    assert plan["status"] == "awaiting_approval"
    assert proposed["text"].startswith("**Proposed — nothing has been written.**")
    assert proposed["contentTypes"] == ["text", "resource_link", "resource_link"]
    assert steps["getPlan"]["structuredContent"]["id"] == plan["id"]
    assert steps["cancelled"]["structuredContent"]["status"] == "cancelled"
    assert steps["cancelled"]["text"].startswith("**Plan `cancelled`** — withdrawn")
    again = steps["cancelledAgain"]
    assert again["threw"] is None and again["isError"] is True
    assert again["structuredContent"]["type"] == "urn:countersign:problem:invalid-state"
    assert Plan.objects.get(id=plan["id"]).status == PlanStatus.CANCELLED

    # The SDK checked each structured result (refusals included) and each passed.
    calls = [
        steps[k] for k in ("refused", "refusedGetPlan", "proposed", "getPlan", "cancelled")
    ] + [again]
    for step in calls:
        if client == "1.x" or not step["isError"]:
            assert step["checks"] == [{"valid": True, "error": None}], step
        else:
            assert step["checks"] == [], step  # 2.x does not check error results

    # Resources: the plan and the card, as the Python client reads them.
    assert steps["resourcePlan"]["threw"] is None
    assert steps["card"]["mimeTypes"] == ["text/markdown"]
    assert steps["card"]["text"].startswith("# ")
    assert "countersign://actions/update_contact_email/card" in steps["resources"]
    assert steps["resourceTemplates"] == ["countersign://plans/{plan_id}"]
    # Every exchange succeeded, but the 1.x SDK's try at a standing stream (GET, 405).
    failed = [r for r in steps["requests"] if r["status"] >= 400]
    assert failed in ([], [{"method": "GET", "path": "/mcp", "status": 405, "contentType": ""}])

    # A refused token through an OAuth authProvider: the error says how to authenticate.
    for flow in ("authProvider", "clientCredentials"):
        oauth = steps[flow]
        message = oauth["threw"]["message"]
        assert NO_AUTHORIZATION_SERVER in message, oauth
        assert "Authorization: Bearer <token>" in message
        assert "Unexpected token" not in message
        html = [r for r in oauth["requests"] if r["contentType"] == "text/html"]
        assert html == [], html
        assert oauth["redirected"] == []
    paths = [r["path"] for r in steps["authProvider"]["requests"]]
    assert "/.well-known/oauth-protected-resource/mcp" in paths
    assert paths[-1] == "/register"
    assert steps["clientCredentials"]["requests"][-1]["path"] == "/token"


def test_the_typescript_sdk_1x_takes_a_task_that_completes_when_the_plan_settles(
    live, agent_token, reviewer, upstream
):
    """The 2025-11-25 tasks form, as the 1.x SDK's ``callToolStream`` speaks it: a task
    for each proposal, polled with tasks/get, its result from tasks/result once the plan
    settled (checked by the SDK against the outputSchema); a refusal is the request's
    error, with the pointer; tasks/cancel withdraws the plan."""
    with approving(reviewer, "the walk: a task"):
        report = node_walk("1.x", live["url"], agent_token, walk="tasks")
    steps = report["steps"]
    assert report["serverCapabilities"]["tasks"] == {
        "cancel": {},
        "requests": {"tools": {"call": {}}},
    }
    executions = {t["name"]: t["execution"] for t in steps["tools"]}
    assert executions["update_contact_email"] == {"taskSupport": "optional"}
    assert executions["get_plan"] is None

    refused = steps["taskRefused"]["messages"]
    assert [m["type"] for m in refused] == ["error"], refused
    assert refused[0]["code"] == -32602
    assert "/arguments/email: not a valid e-mail address: there is no @" in refused[0]["message"]

    completed = steps["taskCompleted"]
    kinds = [m["type"] for m in completed["messages"]]
    assert kinds[0] == "taskCreated" and kinds[-1] == "result", completed
    created, result = completed["messages"][0], completed["messages"][-1]
    assert created["status"] == "working" and created["pollInterval"] == 5000
    assert "awaiting_approval" in created["statusMessage"]
    statuses = [m["status"] for m in completed["messages"] if m["type"] == "taskStatus"]
    assert statuses[-1] == "completed" and set(statuses[:-1]) <= {"working"}
    plan = Plan.objects.get(id=created["taskId"])
    assert plan.status == PlanStatus.COMPLETED
    assert result["isError"] is False
    assert result["structuredContent"]["id"] == str(plan.id)
    assert result["structuredContent"]["status"] == "completed"
    assert result["meta"]["io.modelcontextprotocol/related-task"] == {"taskId": str(plan.id)}
    assert result["text"].startswith("**Plan `completed`** — applied upstream; ")
    assert completed["checks"] == [{"valid": True, "error": None}]
    assert upstream.state()["contacts"]["c-1001"]["email"] == "task@example.org"

    cancelled = steps["taskCancelled"]["messages"]
    assert [m["type"] for m in cancelled] == ["taskCreated", "cancelTask", "taskStatus", "error"]
    assert cancelled[1]["status"] == "cancelled"
    assert cancelled[3]["message"].endswith("was cancelled")
    assert Plan.objects.get(id=cancelled[0]["taskId"]).status == PlanStatus.CANCELLED
