"""clients/countersign_client.py, the typed Python client for agent developers: against the live
server (list, propose, wait, cancel, refusals), and on its own (a single vendorable file)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import datetime

import httpx
import pytest

from clients.countersign_client import SETTLED, Countersign, CountersignProblem, Plan
from demo.processes import ROOT
from tests.e2e.support import NEW_EMAIL

EMAIL = {"contact_id": "c-1001", "email": NEW_EMAIL}


@pytest.mark.e2e
def test_list_propose_wait_and_cancel(live, catalog, agent_token, rita, upstream):
    with Countersign(live["url"], agent_token) as cs:
        actions = {a.name: a for a in cs.actions()}
        assert set(actions) == set(catalog)
        delete = actions["delete_contact"]
        assert (delete.consequence_class, delete.kind, delete.approvers_required) == (
            "irreversible",
            "delete",
            2,
        )
        assert delete.card["effect"] == "Deletes one contact record; it cannot be restored."

        plan = cs.propose("update_contact_email", EMAIL, reason="asked", idempotency_key="t-1")
        assert isinstance(plan, Plan)
        assert (plan.status, plan.action, plan.reason) == (
            "awaiting_approval",
            "update_contact_email",
            "asked",
        )
        assert isinstance(plan.created_at, datetime) and plan.created_at.tzinfo is not None
        assert plan.review_url == f"{live['url']}/plans/{plan.id}/"
        assert not plan.settled and plan.outcome is None
        # The same key and body: the same plan, not a second one.
        replay = cs.propose("update_contact_email", EMAIL, reason="asked", idempotency_key="t-1")
        assert replay.id == plan.id

        rita.decide(plan.id, "approve")
        done = cs.wait(plan.id, timeout=60)
        assert done.status == "completed" and done.settled
        assert done.outcome.state == "completed"
        assert done.outcome.request_sent is True
        assert done.outcome.verified is True  # read back after the upstream's 200
        assert done.outcome.result["email"] == EMAIL["email"]
        assert set(actions["update_contact_email"].result_fields) == set(done.outcome.result)
        assert actions["get_contact"].kind == "read"
        assert len(upstream.writes()) == 1

        other = cs.propose("update_invoice_memo", {"invoice_id": "inv-2001", "memo": "hello"})
        cancelled = cs.cancel(other.id)
        assert cancelled.status == "cancelled" and cancelled.status in SETTLED
        with pytest.raises(CountersignProblem) as again:
            cs.cancel(other.id)
        assert (again.value.type, again.value.status) == ("invalid-state", 409)


@pytest.mark.e2e
def test_refusals_are_typed_problems(live, catalog, agent_token):
    with Countersign(live["url"], agent_token) as cs:
        with pytest.raises(CountersignProblem) as invalid:
            cs.propose("update_contact_email", {"contact_id": "c-1001", "emial": NEW_EMAIL})
        problem = invalid.value
        assert (problem.type, problem.status) == ("invalid-input", 422)
        assert {"pointer": "/input/emial", "message": "unknown field"} in problem.errors
        assert "/input/emial: unknown field" in str(problem)
        assert problem.correlation_id

    with Countersign(live["url"], "cs_wrong") as cs, pytest.raises(CountersignProblem) as denied:
        cs.actions()
    assert (denied.value.type, denied.value.status) == ("unauthenticated", 401)


def _plan_json(status: str) -> dict:
    return {
        "id": "6b8f4f7e-0000-4000-8000-000000000000",
        "action": "update_contact_email",
        "status": status,
        "fingerprint": "ab" * 32,
        "short_code": "ABAB-ABAB-ABAB",
        "consequence_class": "reversible",
        "target": {"connector": "demo", "path": "/contacts/c-1001"},
        "input": EMAIL,
        "reason": "",
        "preview": {"summary_markdown": "…"},
        "approvals_required": 1,
        "review_url": "http://x/plans/6b8f4f7e-0000-4000-8000-000000000000/",
        "created_at": "2026-05-01T09:00:00Z",
        "expires_at": "2026-05-01T10:00:00Z",
        "outcome": None,
    }


def test_wait_returns_the_plan_as_it_stands_when_time_is_up():
    waits: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        waits.append(request.url.params.get("wait"))
        return httpx.Response(200, json=_plan_json("awaiting_approval"))

    http = httpx.Client(transport=httpx.MockTransport(handler), base_url="http://cs/api/v1")
    plan = Countersign(http=http).wait("6b8f4f7e-0000-4000-8000-000000000000", timeout=0.01)
    assert plan.status == "awaiting_approval"
    assert waits[0] is None  # a first plain read, then long-polls of at most 30 s
    assert all(float(w) <= 30 for w in waits[1:])


def test_an_error_that_is_not_a_problem_document_is_still_a_problem():
    http = httpx.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(502, text="<html>bad")),
        base_url="http://cs/api/v1",
    )
    with pytest.raises(CountersignProblem) as raised:
        Countersign(http=http).actions()
    assert raised.value.status == 502


def test_the_client_is_one_file_without_django(tmp_path):
    """Agent developers copy clients/countersign_client.py alone: it needs httpx only."""
    shutil.copy(ROOT / "clients" / "countersign_client.py", tmp_path / "countersign_client.py")
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import countersign_client; "
        "assert not [m for m in sys.modules if m.startswith(('django', 'actions'))], 'imports'"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()


def test_the_clients_settled_statuses_are_the_servers():
    """The client is one file that imports nothing of Countersign, so it keeps its own
    list; this keeps the list equal to the server's grouping."""
    from approvals.models import PlanStatus

    assert SETTLED == {str(status) for status in PlanStatus.settled()}
