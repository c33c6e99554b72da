"""Results the agent can act on: read actions, declared results, verified effects.

The worker plays in this process against the demo upstream (a real HTTP server); the
live-process versions are in tests/e2e/test_results.py."""

from __future__ import annotations

import copy
import re

import pytest

from actions.catalog import action_define, load_catalog, validate_action_definition
from actions.clients import read_client
from actions.export import export_catalog
from actions.lib.dispatch import EXECUTE_PLAN, task_of
from actions.lib.exceptions import InvalidInput
from actions.lib.http import ReadOnlyViolation
from actions.lib.models import AuditEvent
from actions.models import Action, Agent, Connector
from approvals.grants import grant_create
from approvals.mcp.rendering import card_markdown
from approvals.models import Approval, Attempt, Plan, PlanStatus
from approvals.services import approval_record, plan_submit
from executors import services
from executors.reconciliation import pending_follow, reconcile
from executors.services import execution_run
from executors.sweeper import sweep
from tests.conftest import READ_TOKEN
from tests.executors.test_execution import REMINDER, attempt_of, fresh

pytestmark = pytest.mark.usefixtures("executor_key")
CANARY = "canary-undeclared-" + "5f1e" * 8
CONTACT = {"contact_id": "c-1001"}


@pytest.fixture(autouse=True)
def _no_real_sleep(monkeypatch):
    monkeypatch.setattr("executors.services._sleep", lambda seconds: None)


@pytest.fixture(autouse=True)
def _agent_in_ws_blue(agent):
    """The demo contact c-1001 lives in ws-blue; the agent works there."""
    Agent.objects.filter(pk=agent.pk).update(attributes={"workspace": "ws-blue"})


@pytest.fixture
def grant_for(reviewer, agent):
    def grant_for(*names: str):
        return grant_create(
            creator=reviewer, agent=agent, action_names=list(names), duration_seconds=600
        )

    return grant_for


def kinds_of(plan) -> list[str]:
    return list(AuditEvent.objects.filter(plan=plan).values_list("kind", flat=True))


# --- reads ----------------------------------------------------------------------------------


def test_a_read_under_a_session_grant_returns_exactly_the_declared_fields(
    upstream, make_plan, run, grant_for, client, api_headers, caplog
):
    # The upstream's record carries more than the action declares, a canary among it.
    upstream.mutate("/contacts/c-1001", {"notes": CANARY, "phone": "+44 " + CANARY[:10]})
    grant_for("get_contact")
    plan = make_plan("get_contact", CONTACT)
    assert plan.status == PlanStatus.APPROVED  # the grant approved it
    assert plan.before is None and plan.changes == []  # nothing read before approval
    assert run(plan) == PlanStatus.COMPLETED
    result = fresh(plan).result
    assert set(result) == {"contact_id", "name", "email", "workspace", "version"}
    assert result["contact_id"] == "c-1001" and result["name"] == "Ada Lovelace"
    assert result["version"].startswith('"')
    # One GET, with the read credential; nothing else ever left.
    (read,) = [r for r in upstream.requests_log() if r["path"] == "/contacts/c-1001"][-1:]
    assert read["method"] == "GET" and read["headers"]["authorization"] == f"Bearer {READ_TOKEN}"
    assert upstream.writes() == []
    # The agent's view, the reviewer's page and the logs never carry the undeclared field.
    api = client.get(f"/api/v1/plans/{plan.id}", **api_headers)
    assert api.json()["outcome"]["result"] == result
    assert CANARY not in api.content.decode()
    assert CANARY not in repr(Plan.objects.filter(pk=plan.pk).values().get())
    assert CANARY not in repr(Attempt.objects.filter(plan=plan).values().get())
    assert all(CANARY not in r.getMessage() for r in caplog.records)
    # A read never appears as a write in the audit trail.
    kinds = kinds_of(plan)
    assert "read.claimed" in kinds and "read.completed" in kinds
    assert not [k for k in kinds if k.startswith("execution.")]


def test_the_reviewer_sees_the_result_and_no_undeclared_field(
    upstream, make_plan, run, grant_for, reviewer, client
):
    upstream.mutate("/contacts/c-1001", {"notes": CANARY})
    grant_for("get_contact")
    plan = make_plan("get_contact", CONTACT)
    run(plan)
    client.force_login(reviewer)
    page = client.get(f"/plans/{plan.id}/").content.decode()
    assert 'data-testid="result"' in page and "Ada Lovelace" in page
    assert CANARY not in page


def test_a_sensitive_read_needs_a_reviewer_and_no_grant_covers_it(
    upstream, make_plan, run, grant_for, reviewer, client
):
    with pytest.raises(InvalidInput):
        grant_for("get_contact_phone")
    plan = make_plan("get_contact_phone", CONTACT)
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert execution_run(plan_id=plan.id) == "skipped:awaiting_approval"
    assert not [r for r in upstream.requests_log() if r["path"] == "/contacts/c-1001"]
    # The page says it is private and lists what the agent would receive.
    client.force_login(reviewer)
    page = client.get(f"/plans/{plan.id}/").content.decode()
    assert 'data-testid="read-fields"' in page
    assert "<code>contact_id</code>, <code>phone</code>" in page
    assert '<span class="verb">READ</span>' in page
    approval_record(
        plan_id=plan.id, reviewer=reviewer, decision="approve", fingerprint_seen=plan.fingerprint
    )
    assert run(plan) == PlanStatus.COMPLETED
    assert fresh(plan).result == {"contact_id": "c-1001", "phone": "+44 20 7946 0001"}


def test_a_read_that_needs_no_approval_is_approved_as_it_is_proposed(
    upstream, make_plan, run, django_capture_on_commit_callbacks
):
    started = make_plan("start_deployment", {"service": "api", "version": "v1.2.3"})
    assert started.status == PlanStatus.AWAITING_APPROVAL
    upstream._data["deployments"]["dep-9"] = {
        "id": "dep-9",
        "service": "api",
        "version": "v1.2.3",
        "status": "running",
    }
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        plan, _ = plan_submit(
            agent=started.agent, action_name="get_deployment", input={"deployment_id": "dep-9"}
        )
    assert plan.status == PlanStatus.APPROVED
    assert plan.policy["mode"] == "none"
    assert not Approval.objects.filter(plan=plan).exists()
    assert EXECUTE_PLAN in [task_of(c) for c in callbacks]
    approved = AuditEvent.objects.get(plan=plan, kind="plan.approved")
    assert approved.actor == "system" and approved.data["approval"] == "none"
    assert run(plan) == PlanStatus.COMPLETED
    assert fresh(plan).result["status"] in ("running", "succeeded")


def test_a_read_outside_the_agents_scope_returns_nothing(upstream, make_plan, run, grant_for):
    Agent.objects.update(attributes={"workspace": "ws-red"})  # c-1001 is in ws-blue
    grant_for("get_contact")
    plan = make_plan("get_contact", CONTACT)
    assert run(plan) == PlanStatus.REJECTED
    plan = fresh(plan)
    assert plan.result is None
    assert "another workspace" in plan.outcome_detail


def test_a_read_of_a_missing_target_is_rejected_with_nothing_returned(
    upstream, make_plan, run, grant_for
):
    grant_for("get_contact")
    plan = make_plan("get_contact", {"contact_id": "c-999"})
    assert run(plan) == PlanStatus.REJECTED
    assert fresh(plan).result is None and "not found" in fresh(plan).outcome_detail


def test_a_read_can_never_send_a_write(upstream, make_plan, run, grant_for):
    """The plan's request is fingerprinted; the executor refuses anything but GET before
    the read-only client (which refuses it too) could send it."""
    with pytest.raises(ReadOnlyViolation):
        read_client(Connector.objects.get(name="demo")).request("POST", "/contacts/c-1001")
    grant_for("get_contact")
    plan = make_plan("get_contact", CONTACT)
    tampered = {**plan.write_request, "method": "POST"}
    Plan.objects.filter(pk=plan.pk).update(write_request=tampered)
    assert run(plan) == "skipped:refused"
    assert "fingerprint" in fresh(plan).outcome_detail
    assert upstream.writes() == []


def test_the_loader_refuses_reads_that_could_write_or_leak(catalog):
    def refused(name: str, **changes) -> str:
        definition = {**copy.deepcopy(catalog[name].definition), **changes}
        definition = {k: v for k, v in definition.items() if v is not None}
        problems = validate_action_definition("probe", definition)
        assert problems, f"{changes} was accepted"
        return " | ".join(f"{p.pointer}: {p.message}" for p in problems)

    assert "/write: a read sends only the GET" in refused(
        "get_contact", write={"method": "POST", "body": {}}
    )
    assert "observation" in refused("get_contact", consequence_class="reversible")
    assert "declare them" in refused("get_contact", result={})
    assert "a read has no version" in refused("get_contact", version={"source": "etag"})
    needs_reviewer = "a sensitive read needs a reviewer for every call"
    assert needs_reviewer in refused("get_contact", sensitive=True, approval="none")
    assert needs_reviewer in refused(
        "get_contact", sensitive=True, approval={"session_grant": True}
    )
    assert "only an observation read may run without" in refused(
        "update_contact_email", approval="none"
    )
    assert "only a read can be sensitive" in refused("update_contact_email", sensitive=True)
    assert "promises 'id'" in refused(
        "send_reminder", result={"status": {"pointer": "/status", "type": "string"}}
    )
    assert "'send_invoice' is not a read" in refused(
        "send_reminder", check_with={"action": "send_invoice"}
    )
    assert "get_contact needs contact_id" in refused(
        "send_reminder", check_with={"action": "get_contact", "input": {}}
    )
    # What the demo catalog declares is accepted as it is.
    for name in ("get_contact", "get_contact_phone", "get_deployment", "start_deployment"):
        assert validate_action_definition(name, catalog[name].definition) == []


# --- declared results of writes ------------------------------------------------------------


def test_send_reminder_returns_its_reminder_id(upstream, approved, run, client, api_headers):
    plan = approved("send_reminder", REMINDER)
    assert run(plan) == PlanStatus.COMPLETED
    outcome = client.get(f"/api/v1/plans/{plan.id}", **api_headers).json()["outcome"]
    (reminder,) = upstream.state()["reminders"].values()
    assert outcome["result"] == {
        "reminder_id": reminder["id"],
        "status": "scheduled",
        "scheduled_at": REMINDER["send_at"],
    }
    assert outcome["verified"] is False  # an invoke has no readable state to check


def test_start_deployment_returns_its_id_at_pending_and_its_status_at_completed(
    upstream, approved, run, client, api_headers, django_capture_on_commit_callbacks
):
    plan = approved("start_deployment", {"service": "api", "version": "v1.2.3"})
    assert run(plan) == PlanStatus.PENDING
    pending = client.get(f"/api/v1/plans/{plan.id}", **api_headers).json()["outcome"]
    deployment_id = pending["result"]["deployment_id"]
    assert deployment_id.startswith("dep-") and pending["result"]["status"] == "queued"
    # The read action that checks it, with the input to propose it with.
    assert pending["check_with"] == {
        "action": "get_deployment",
        "input": {"deployment_id": deployment_id},
    }
    with django_capture_on_commit_callbacks(execute=False):
        while pending_follow(plan_id=plan.id) == "following":
            pass
    done = client.get(f"/api/v1/plans/{plan.id}", **api_headers).json()["outcome"]
    assert done["state"] == PlanStatus.COMPLETED
    assert done["result"] == {"deployment_id": deployment_id, "status": "succeeded"}
    assert done["check_with"] is None


def test_a_result_value_is_typed_bounded_and_filtered(upstream, catalog, approved, run):
    definition = copy.deepcopy(catalog["send_reminder"].definition)
    definition["result"] = {
        "reminder_id": {"pointer": "/id", "type": "integer"},  # it is a string: null
        "message": {"pointer": "/message", "type": "string", "max_length": 500},
        "channel": {"pointer": "/channel", "type": "string", "max_length": 2},  # too long
        "location": {"header": "Location", "type": "string"},
        "http_status": {"status": True, "type": "integer"},
    }
    definition["check_with"] = None
    definition = {k: v for k, v in definition.items() if v is not None}
    action_define(name="send_reminder", definition=definition, actor="test")
    message = f"see http://10.0.0.9/internal and Bearer {READ_TOKEN}"
    plan = approved("send_reminder", {**REMINDER, "message": message})
    assert run(plan) == PlanStatus.COMPLETED
    result = fresh(plan).result
    assert result["reminder_id"] is None and result["channel"] is None
    assert result["http_status"] == 201
    assert result["location"].startswith("/reminders/")
    assert "http://" not in result["message"] and READ_TOKEN not in result["message"]


# --- verified effects ---------------------------------------------------------------------


def test_a_2xx_is_verified_by_reading_the_target_back(upstream, approved, run, client, api_headers):
    plan = approved()
    assert run(plan) == PlanStatus.COMPLETED
    outcome = client.get(f"/api/v1/plans/{plan.id}", **api_headers).json()["outcome"]
    assert outcome["verified"] is True
    assert outcome["result"]["email"] == plan.input["email"]
    methods = [r["method"] for r in upstream.requests_log() if r["path"] == "/contacts/c-1001"]
    assert methods[-2:] == ["PATCH", "GET"]  # the write, then the read-back


def test_a_200_that_changed_nothing_ends_not_applied_and_is_never_resent(
    upstream, approved, run, client, api_headers, reviewer
):
    before = upstream.state()["contacts"]["c-1001"]
    plan = approved()
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", ignore=True)
    assert run(plan) == PlanStatus.NOT_APPLIED
    assert [w["method"] for w in upstream.writes()] == ["PATCH"]
    assert upstream.state()["contacts"]["c-1001"] == before
    outcome = client.get(f"/api/v1/plans/{plan.id}", **api_headers).json()["outcome"]
    assert outcome["state"] == "not_applied" and outcome["verified"] is False
    assert outcome["upstream_status"] == 200 and outcome["request_sent"] is True
    assert "was not applied" in outcome["detail"]
    assert attempt_of(plan).state == Attempt.State.ANSWERED
    client.force_login(reviewer)
    page = client.get(f"/plans/{plan.id}/").content.decode()
    assert 'data-testid="not-applied"' in page
    # Never sent again, whatever re-delivers the message.
    assert execution_run(plan_id=plan.id) == "skipped:not_applied"
    assert len(upstream.writes()) == 1


def test_an_action_may_opt_out_of_verification(
    upstream, catalog, approved, run, client, api_headers, reviewer
):
    definition = copy.deepcopy(catalog["update_contact_email"].definition)
    action_define(
        name="update_contact_email", definition={**definition, "verify": False}, actor="test"
    )
    actions = {a["name"]: a for a in client.get("/api/v1/actions", **api_headers).json()}
    assert actions["update_contact_email"]["verify"] is False
    assert actions["send_invoice"]["verify"] is True
    plan = approved()
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", ignore=True)
    assert run(plan) == PlanStatus.COMPLETED  # taken at its word, and said so
    outcome = client.get(f"/api/v1/plans/{plan.id}", **api_headers).json()["outcome"]
    assert outcome["verified"] is False
    methods = [r["method"] for r in upstream.requests_log() if r["path"] == "/contacts/c-1001"]
    assert methods[-1] == "PATCH"  # no read-back
    # The card says so before anyone approves: on the page and in the MCP card.
    client.force_login(reviewer)
    page = client.get(f"/plans/{plan.id}/").content.decode()
    assert re.search(r'data-testid="card-verify">Not read back', page)
    assert "**Checked.** Not read back" in card_markdown(Action.objects.get(pk=plan.action_id))
    assert "**Checked.** After the upstream says yes" in card_markdown(
        Action.objects.get(name="update_contact_phone")
    )


def test_a_worker_lost_while_verifying_is_reconciled_by_the_same_read_back(
    upstream, approved, run, settings, monkeypatch, django_capture_on_commit_callbacks
):
    plan = approved()

    def dies(plan):
        raise SystemExit("killed")

    monkeypatch.setattr(services, "read_back", dies)
    with pytest.raises(SystemExit):
        run(plan)
    monkeypatch.undo()
    assert fresh(plan).status == PlanStatus.EXECUTING
    assert attempt_of(plan).state == Attempt.State.ANSWERED  # the answer was kept
    settings.COUNTERSIGN_EXECUTION_LEASE_SECONDS = 0
    with django_capture_on_commit_callbacks(execute=False):
        assert sweep()["unknown"] == 1
        assert reconcile(plan_id=plan.id) == PlanStatus.COMPLETED
    assert fresh(plan).verified is True
    assert len(upstream.writes()) == 1


def test_an_unknown_outcome_names_the_read_that_verifies_the_target(
    upstream, approved, run, client, api_headers
):
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", status=503, apply=True)
    plan = approved()
    assert run(plan) == PlanStatus.UNKNOWN
    outcome = client.get(f"/api/v1/plans/{plan.id}", **api_headers).json()["outcome"]
    assert outcome["check_with"] == {"action": "get_contact", "input": CONTACT}


def test_the_demo_catalog_declares_a_result_for_every_action(catalog):
    assert all(action.spec.result for action in Action.objects.all())


def test_a_catalog_file_with_reads_and_follow_ups_round_trips(catalog):
    text = export_catalog()
    load_catalog(text)
    assert Action.objects.get(name="get_contact_phone").spec.sensitive
    assert Action.objects.get(name="get_deployment").spec.approval.mode == "none"
    assert Action.objects.get(name="start_deployment").spec.check_with.action == "get_deployment"


def test_a_read_that_needs_no_approval_is_still_rate_limited(
    upstream, client, api_headers, settings
):
    settings.COUNTERSIGN_RATE_LIMIT = "2/hour"
    upstream._data["deployments"]["dep-9"] = {"id": "dep-9", "service": "api", "status": "queued"}

    def propose():
        return client.post(
            "/api/v1/plans",
            {"action": "get_deployment", "input": {"deployment_id": "dep-9"}},
            content_type="application/json",
            **api_headers,
        )

    assert [propose().status_code for _ in range(3)] == [201, 201, 429]
    assert Plan.objects.filter(action__name="get_deployment").count() == 2
