"""Outcomes at the plan level against a hostile MCP server (tests/mcp/upstreams/hostile.py):
an error from the write tool (and from the real filesystem server), a write with no
answer (hung, or the server gone, with or without the change applied) and its
reconciliation through the paired read, a no-preview call nobody can look up, requests
the server makes of us, floods and garbage during the write, and a server that does not
start at submission or at the worker.

Plans are submitted as an agent does (plan_submit or the API), approved by people and
executed by the worker in this process (``executor_key``); the server is a real stdio
process. Every tools/call it receives is logged (``CALL_LOG``), so "at most one call per
approval" is counted, not assumed."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import uuid

import pytest

from actions.catalog import load_catalog
from actions.connectors.mcp.pins import tools_confirm
from actions.connectors.mcp.reading import McpReader
from actions.connectors.mcp.sessions import pool_clear
from actions.lib.redaction import MAX_STORED_TEXT, forget_secrets
from actions.models import Connector
from actions.services import agent_create
from approvals.models import Attempt, Plan, PlanStatus
from approvals.services import plan_submit
from executors.reconciliation import NO_WAY_TO_LOOK, reconcile
from tests.conftest import WRITE_TOKEN
from tests.executors.mcp_catalogs import filesystem_catalog
from tests.executors.mcp_hostile import env_credential, notes_load
from tests.mcp.upstreams.servers import filesystem_server

pytestmark = pytest.mark.usefixtures("executor_key")

OURS = "the tool write_note reported an error; nothing is known to have changed"


@pytest.fixture(autouse=True)
def clean_pool():
    pool_clear()
    yield
    pool_clear()
    forget_secrets()


def settled(plan) -> Plan:
    return Plan.objects.get(pk=plan.pk)


# --- 1. the tool says it failed -----------------------------------------------------------


@pytest.mark.parametrize("mode", ["tool-error", "rpc-error"])
def test_an_error_from_the_write_tool_is_rejected_in_countersigns_words(
    db, tmp_path, approve, run, client, mode
):
    notes = notes_load(tmp_path, mode, credentials={"write": {"SECRET_TOKEN": WRITE_TOKEN}})
    plan = notes.submit("after\n")
    assert run(approve(plan)) == PlanStatus.REJECTED
    plan = settled(plan)
    assert plan.status == PlanStatus.REJECTED and plan.outcome_detail == OURS
    assert notes.note.read_text() == "before\n"
    assert len(notes.calls("write_note")) == 1

    attempt = Attempt.objects.get(plan=plan)
    body = attempt.response_body
    # The upstream's text, filtered for people: the useful line kept; the trace, the
    # address, the bearer header and the credential gone; the whole bounded.
    assert "note could not be written." in body
    assert "[stack trace removed]" in body and "Traceback" not in body
    assert 'File "' not in body and "PermissionError" not in body
    assert "internal.example" not in body and "abcdef1234567890" not in body
    assert WRITE_TOKEN not in body
    assert len(body) <= MAX_STORED_TEXT + len("…[truncated]")

    # The agent reads Countersign's words only.
    answer = client.get(f"/api/v1/plans/{plan.id}", HTTP_AUTHORIZATION=f"Bearer {notes.token}")
    assert answer.status_code == 200
    assert answer.json()["outcome"]["detail"] == OURS
    assert "could not be written" not in answer.content.decode()


# --- 2. a request that left and got no answer ---------------------------------------------


@pytest.mark.parametrize(
    ("mode", "state", "verdict", "note"),
    [
        ("hang", PlanStatus.REJECTED, "not applied", "before\n"),
        ("apply-then-hang", PlanStatus.COMPLETED, "applied", "after\n"),
        ("die-on-call", PlanStatus.REJECTED, "not applied", "before\n"),
        ("apply-then-die", PlanStatus.COMPLETED, "applied", "after\n"),
    ],
)
def test_no_answer_is_unknown_never_sent_again_and_reconciled_by_the_paired_read(
    db, tmp_path, approve, run, mode, state, verdict, note
):
    notes = notes_load(tmp_path, mode, read_timeout=1)
    plan = approve(notes.submit("after\n"))
    started = time.monotonic()
    assert run(plan) == PlanStatus.UNKNOWN
    assert time.monotonic() - started < 10
    plan = settled(plan)
    assert plan.status == PlanStatus.UNKNOWN and plan.next_check_at is not None
    attempt = Attempt.objects.get(plan=plan)
    assert attempt.state == Attempt.State.LOST and attempt.sends == 1
    assert attempt.error.startswith("the request left but no answer came")
    assert notes.note.read_text() == note

    # Running it again sends nothing; nor does the reconciliation (it only reads).
    assert run(plan) == "skipped:unknown"
    assert reconcile(plan_id=plan.id) == state
    plan = settled(plan)
    assert plan.status == state and plan.outcome_detail == f"reconciled: {verdict}"
    assert plan.verified is (state == PlanStatus.COMPLETED)
    assert len(notes.calls("write_note")) == 1, "one approval, one call"


def test_a_no_preview_call_with_no_answer_is_left_to_a_person(db, tmp_path, approve, run, client):
    notes = notes_load(tmp_path, "apply-then-hang", read_timeout=1)
    plan = approve(notes.submit("after\n", action="note_send"))
    assert plan.target["preview"]["recipe"] == "none"
    assert run(plan) == PlanStatus.UNKNOWN
    assert reconcile(plan_id=plan.id) == "unknown"
    plan = settled(plan)
    attempt = Attempt.objects.get(plan=plan)
    assert attempt.reconciliation["verdict"] == NO_WAY_TO_LOOK
    # Nothing to look at again: no automatic look is scheduled; a person decides.
    assert plan.status == PlanStatus.UNKNOWN and plan.next_check_at is None
    assert len(notes.calls("write_note")) == 1
    assert len(notes.calls()) == 1, "no read either: there is none to make"


# --- 4. requests the server makes, floods and garbage -------------------------------------


@pytest.mark.parametrize("fault_tool", [None, "write_note"], ids=["preview-and-write", "write"])
def test_requests_from_the_server_are_refused_and_the_plan_completes(
    db, tmp_path, approve, run, caplog, fault_tool
):
    caplog.set_level(logging.WARNING, logger="actions.connectors.mcp.sessions")
    notes = notes_load(tmp_path, "sampling", fault_tool=fault_tool)
    plan = notes.submit("after\n")
    assert plan.before == "before\n"
    assert run(approve(plan)) == PlanStatus.COMPLETED
    assert settled(plan).verified is True
    asked = [call for call in notes.calls() if "refused" in call]
    assert asked and (fault_tool is None or [c["tool"] for c in asked] == ["write_note"])
    for call in asked:
        codes = call["refused"].split(";")[0].removeprefix("refused: ").split(",")
        assert all(code.startswith("-32") for code in codes), call
    warned = {r.getMessage() for r in caplog.records if r.levelno == logging.WARNING}
    assert "An MCP server asked for sampling; Countersign refused it" in warned


@pytest.mark.parametrize(
    ("mode", "env", "problem"),
    [
        ("notification-flood", {}, "too many notifications"),
        ("invalid-json", {}, "too many invalid messages"),
        ("huge-line", {"HUGE_BYTES": str(8 << 20)}, "a message over"),
    ],
)
def test_a_write_drowned_in_noise_ends_unknown_in_bounded_time_and_is_recorded(
    db, tmp_path, approve, run, mode, env, problem
):
    notes = notes_load(tmp_path, mode, env=env)
    plan = approve(notes.submit("after\n"))
    started = time.monotonic()
    assert run(plan) == PlanStatus.UNKNOWN
    assert time.monotonic() - started < 15
    attempt = Attempt.objects.get(plan=Plan.objects.get(pk=plan.pk))
    assert attempt.state == Attempt.State.LOST and attempt.sends == 1
    assert problem in attempt.error
    assert len(notes.calls("write_note")) == 1
    # Whatever the server did before it was dropped, the read says which.
    applied = notes.note.read_text() == "after\n"
    expected = PlanStatus.COMPLETED if applied else PlanStatus.REJECTED
    assert reconcile(plan_id=plan.id) == expected
    assert len(notes.calls("write_note")) == 1


def test_a_stderr_flood_does_not_stop_the_plan(db, tmp_path, approve, run):
    notes = notes_load(tmp_path, "stderr-flood", fault_tool=None)
    plan = approve(notes.submit("after\n"))
    started = time.monotonic()
    assert run(plan) == PlanStatus.COMPLETED
    assert time.monotonic() - started < 10
    assert settled(plan).verified is True and notes.note.read_text() == "after\n"


# --- 5. a server that does not start ------------------------------------------------------


@pytest.mark.parametrize("how", ["bad-command", "exits-at-once"])
def test_a_server_that_does_not_start_refuses_the_submission_in_countersigns_words(
    db, tmp_path, client, how
):
    secret_ish = "env-value-" + uuid.uuid4().hex
    command = f"/nonexistent/mcp-server-{uuid.uuid4().hex}"
    env = {"SOME_SETTING": secret_ish}
    if how == "bad-command":
        notes = notes_load(tmp_path, env=env, command=command, confirm=False)
    else:
        notes = notes_load(tmp_path, env={**env, "REFUSE_START": "1"}, confirm=False)
    answer = client.post(
        "/api/v1/plans",
        {"action": "note_write", "input": {"text": "after\n"}},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {notes.token}",
    )
    assert answer.status_code == 502
    problem = answer.json()
    assert problem["type"].endswith("upstream-read-failed")
    assert problem["detail"].startswith("the MCP server could not be reached")
    text = answer.content.decode()
    for leak in (secret_ish, command, "hostile.py", "Traceback", "SOME_SETTING"):
        assert leak not in text
    assert not Plan.objects.exists()
    assert notes.calls() == []


def test_a_server_that_does_not_start_at_the_worker_releases_the_plan_unsent(
    db, tmp_path, approve, run
):
    notes = notes_load(tmp_path, credentials={"write": {"REFUSE_START": "refuse-to-start"}})
    plan = approve(notes.submit("after\n"))
    assert run(plan) == "deferred"
    plan = settled(plan)
    assert plan.status == PlanStatus.APPROVED, plan.outcome_detail
    attempt = Attempt.objects.get(plan=plan)
    assert attempt.state == Attempt.State.NOT_SENT and attempt.sends == 0
    assert "could not be asked for its tools" in attempt.error
    assert notes.calls("write_note") == []

    # Tried again later, with a credential the server starts with: done, once.
    env_credential(notes.connector, "write", {"NOTE_MOOD": "a-good-credential"})
    assert run(plan) == PlanStatus.COMPLETED
    assert settled(plan).verified is True
    assert len(notes.calls("write_note")) == 1


# --- the real filesystem server -----------------------------------------------------------


def test_the_real_filesystem_servers_error_is_rejected_and_kept_filtered(
    db, tmp_path, approve, run
):
    """write_file into a directory that does not exist: the paired read finds no file
    (ENOENT: a create), the write answers isError with the server's own words."""
    server = filesystem_server(tmp_path)
    load_catalog(json.dumps(filesystem_catalog(server.command, server.args)))
    connector = Connector.objects.get(name="files")
    with McpReader(connector) as reader:
        tools_confirm(connector, reader.tools(), names=None, actor="admin")
    agent, _ = agent_create(name="writer", action_names=["fs_create"], active=True)
    path = str(tmp_path / "missing" / "new.txt")
    plan, _ = plan_submit(
        agent=agent, action_name="fs_create", input={"path": path, "content": "x\n"}, reason=""
    )
    assert plan.before is None and plan.precondition["kind"] == "absent"
    assert run(approve(plan)) == PlanStatus.REJECTED
    plan = settled(plan)
    assert plan.outcome_detail == (
        "the tool write_file reported an error; nothing is known to have changed"
    )
    attempt = Attempt.objects.get(plan=plan)
    assert attempt.sends == 1 and "ENOENT" in attempt.response_body
    assert not (tmp_path / "missing").exists()


def test_a_server_killed_mid_call_is_unknown_and_reconciled_by_the_paired_read(
    db, tmp_path, approve, run
):
    """The worker's server applies the write and is then killed (SIGKILL, by its pid)
    while the worker waits for the answer: the call left and no answer came."""
    pids = tmp_path / "pids"
    notes = notes_load(tmp_path, "apply-then-hang", env={"PID_FILE": str(pids)}, read_timeout=20)
    plan = approve(notes.submit("after\n"))
    known = set(pids.read_text().split())  # the preview side's server

    def kill_the_writer() -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if notes.calls("write_note"):
                for pid in set(pids.read_text().split()) - known:
                    os.kill(int(pid), signal.SIGKILL)  # the worker's server, started by us
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_the_writer)
    killer.start()
    started = time.monotonic()
    assert run(plan) == PlanStatus.UNKNOWN
    killer.join()
    assert time.monotonic() - started < 15, "the lost answer was seen, not waited out"
    attempt = Attempt.objects.get(plan=plan)
    assert attempt.state == Attempt.State.LOST and attempt.sends == 1
    assert notes.note.read_text() == "after\n"
    assert reconcile(plan_id=plan.id) == PlanStatus.COMPLETED
    plan = settled(plan)
    assert plan.verified is True
    assert len(notes.calls("write_note")) == 1, "one approval, one call"
