"""The catalog's policies with real processes (web server, Celery worker, PostgreSQL,
Redis, the demo upstream): the demo's three policies give their three outcomes on live
plans, the plan a policy approves executes once with no person; an irreversible plan an
@approve matches still goes to people; a policy that errors sends the plan to people and
the page says which."""

from __future__ import annotations

import httpx
import pytest
import yaml

from actions.catalog import load_catalog
from actions.lib.models import AuditEvent
from actions.policy.versions import policy_version_current
from approvals.models import Approval, Plan
from tests.approvals.test_policies import OVERFLOW, ROUTINE, demo_policy_text
from tests.e2e.test_core_loop import login
from tests.e2e.test_decision_rules import outcome, person

pytestmark = pytest.mark.e2e


@pytest.fixture
def api(live, agent_token):
    return httpx.Client(
        base_url=live["url"] + "/api/v1",
        headers={"Authorization": f"Bearer {agent_token}"},
        timeout=40,
    )


def propose(api: httpx.Client, action: str, data: dict) -> httpx.Response:
    return api.post("/plans", json={"action": action, "input": data})


def test_the_demo_policies_give_their_three_outcomes(live, demo_policies, api, upstream):
    person("bea", "billing-approvers")
    version = policy_version_current()

    routine = propose(api, "update_contact_email", ROUTINE)
    assert routine.status_code == 201, routine.text
    plan = routine.json()
    assert plan["approved_by"] == "policy"
    assert plan["decided_by"]["policies"] == ["routine-email"]
    done = outcome(api, plan["id"])
    assert done["status"] == "completed", done
    assert [w["method"] for w in upstream.writes()] == ["PATCH"]
    assert not Approval.objects.filter(plan_id=plan["id"]).exists()  # no person
    approved = AuditEvent.objects.get(plan_id=plan["id"], kind="plan.approved")
    assert approved.actor == "system:policy"
    assert approved.data["policies"] == ["routine-email"]
    assert approved.data["set"] == version.hash

    refused = propose(api, "delete_contact", {"contact_id": "c-1001"})
    assert refused.status_code == 403
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert "vip-contacts-stay" in refused.json()["detail"]
    assert not Plan.objects.filter(action__name="delete_contact").exists()

    invoice = propose(api, "send_invoice", {"invoice_id": "inv-2001"})
    assert invoice.status_code == 201, invoice.text
    assert invoice.json()["status"] == "awaiting_approval"
    assert invoice.json()["requirement"]["rules"] == ["policy:large-invoices"]
    assert len(upstream.writes()) == 1  # still only the routine change


def test_an_irreversible_plan_an_approve_matches_goes_to_people(live, api, upstream):
    load_catalog(
        yaml.safe_dump(
            {
                "version": 1,
                "policies": {
                    "enforce": [
                        {
                            "text": '@id("tidy-up") @approve\n'
                            'permit (principal, action == Action::"delete_contact", resource);'
                        }
                    ]
                },
            }
        )
    )
    created = propose(api, "delete_contact", {"contact_id": "c-1002"})
    assert created.status_code == 201, created.text
    assert created.json()["status"] == "awaiting_approval"
    assert created.json()["approved_by"] is None
    assert upstream.writes() == []


def test_a_policy_that_errors_sends_the_plan_to_people_and_the_page_says_which(
    live, api, upstream, reviewer
):
    load_catalog(yaml.safe_dump({"version": 1, "policies": {"enforce": [{"text": OVERFLOW}]}}))
    first = propose(api, "update_contact_email", ROUTINE)
    assert first.json()["approved_by"] == "policy"
    second = propose(
        api, "update_contact_email", {"contact_id": "c-1003", "email": "a.t@example.test"}
    )
    assert second.status_code == 201, second.text
    plan = second.json()
    assert plan["status"] == "awaiting_approval"
    assert plan["policy"]["errors"] == ["busy-hours"]
    web = httpx.Client(base_url=live["url"], timeout=20)
    login(web, reviewer.username, "pw-rita")
    page = web.get(f"/plans/{plan['id']}/").text
    assert 'data-testid="policy-errors"' in page and "busy-hours" in page


def test_demo_policy_files_are_what_is_in_force(demo_policies):
    version = policy_version_current()
    for name in ("routine-email", "large-invoices", "vip-contacts"):
        assert demo_policy_text(name).strip() in version.enforce
