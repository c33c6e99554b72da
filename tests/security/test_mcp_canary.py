"""The canary holds for MCP upstreams: a stdio server given the read and write credentials
as ``env`` credentials (the suite's known READ_TOKEN and WRITE_TOKEN, tests/conftest.py)
that repeats them in every tool's description, in the write's result and in its errors
never gets one stored or shown: not in the plan, the attempt, the audit events, the tool
pins (what a person reviews and confirms), the agent's API answers, the plan page, the
logs or /metrics. A read that repeats a credential refuses the preview.

Besides these assertions, the autouse canary (tests/conftest.py) checks every response
and log record of the run, and ``secret_hits`` (test_canary_db) every column of every
table."""

from __future__ import annotations

import logging

import pytest

from actions.connectors.base import UpstreamEchoesSecrets
from actions.connectors.mcp.sessions import pool_clear
from actions.lib.redaction import REDACTED, forget_secrets
from actions.models import ToolPin
from approvals.models import Attempt, Plan, PlanStatus
from approvals.services import plan_submit
from tests.conftest import READ_TOKEN, WRITE_TOKEN
from tests.executors.mcp_hostile import notes_load
from tests.security.test_canary_db import secret_hits

pytestmark = pytest.mark.usefixtures("executor_key")

CREDENTIALS = {"read": {"SECRET_TOKEN": READ_TOKEN}, "write": {"SECRET_TOKEN": WRITE_TOKEN}}
SECRETS = (READ_TOKEN, WRITE_TOKEN)


@pytest.fixture(autouse=True)
def clean_pool():
    pool_clear()
    yield
    pool_clear()
    forget_secrets()


def clean(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{where} holds a credential"


@pytest.mark.parametrize(
    ("mode", "outcome"),
    [
        ("echo-secrets", PlanStatus.COMPLETED),
        ("tool-error", PlanStatus.REJECTED),
        ("rpc-error", PlanStatus.REJECTED),
    ],
)
def test_credentials_echoed_in_descriptions_results_and_errors_go_nowhere(
    db, tmp_path, approve, run, client, reviewer, settings, caplog, mode, outcome
):
    caplog.set_level(logging.DEBUG)
    settings.COUNTERSIGN_METRICS_ALLOW = ["127.0.0.1/32"]
    # The descriptions echo in every mode here (the tool pins see it); the results and
    # errors of the write tool only, so the paired read is clean and a plan is made.
    notes = notes_load(
        tmp_path,
        mode,
        credentials=CREDENTIALS,
        env={"ECHO_DESCRIPTIONS": "1"} if mode != "echo-secrets" else None,
    )
    agent = {"HTTP_AUTHORIZATION": f"Bearer {notes.token}"}
    proposed = client.post(
        "/api/v1/plans",
        {"action": "note_write", "input": {"text": "after\n"}},
        content_type="application/json",
        **agent,
    )
    assert proposed.status_code == 201, proposed.content
    clean(proposed.content.decode(), "the proposal's answer")
    plan = Plan.objects.get(pk=proposed.json()["id"])
    assert run(approve(plan)) == outcome
    plan = Plan.objects.get(pk=plan.pk)
    attempt = Attempt.objects.get(plan=plan)
    assert len(notes.calls("write_note")) == 1

    # The pins hold what the server served, a credential redacted where it stood.
    for pin in ToolPin.objects.filter(connector=notes.connector):
        assert REDACTED in pin.definition["description"], pin.tool
        assert REDACTED in pin.seen_definition["description"], pin.tool
    if mode == "echo-secrets":
        assert "repeated a credential" in attempt.error
        assert REDACTED in attempt.response_body
    else:
        assert plan.outcome_detail.startswith("the tool write_note reported an error")

    clean(repr(plan.__dict__), "the plan")  # before, after, changes, summary, request...
    clean(repr(attempt.__dict__), "the attempt")
    answer = client.get(f"/api/v1/plans/{plan.id}", **agent)
    assert answer.status_code == 200
    clean(answer.content.decode(), "the agent's API answer")
    client.force_login(reviewer)
    page = client.get(f"/plans/{plan.id}/")
    assert page.status_code == 200
    clean(page.content.decode(), "the plan page")
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    clean(metrics.content.decode(), "/metrics")
    for record in caplog.records:
        clean(record.getMessage(), f"a log record of {record.name}")
    hits, _ = secret_hits()
    assert hits == []


def test_a_read_that_echoes_a_credential_refuses_the_preview(db, tmp_path, client):
    # Every result echoes now, the paired read's too.
    notes = notes_load(tmp_path, "echo-secrets", fault_tool=None, credentials=CREDENTIALS)
    with pytest.raises(UpstreamEchoesSecrets):
        plan_submit(agent=notes.agent, action_name="note_write", input={"text": "x"}, reason="")
    answer = client.post(
        "/api/v1/plans",
        {"action": "note_write", "input": {"text": "after\n"}},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {notes.token}",
    )
    assert answer.status_code == 502
    assert answer.json()["type"].endswith("upstream-echoes-secrets")
    clean(answer.content.decode(), "the refusal")
    assert not Plan.objects.exists()
    assert notes.calls("write_note") == []
    hits, _ = secret_hits()
    assert hits == []
