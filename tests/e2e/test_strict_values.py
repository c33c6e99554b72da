"""No crafted yes, with real processes (web server, Celery worker, the demo upstream): with
the demo's decision rules and policies in force, the addresses the routine-email policy
once approved are refused at input, an address in another script waits for a person
while the worker runs what the policy approves, and when a person approves it the worker
writes exactly the address that was judged."""

from __future__ import annotations

import httpx
import pytest

from approvals.models import Plan
from approvals.services import approval_record
from tests.approvals.test_decision_rules import demo_rules, load_rules
from tests.conftest import demo_policies_load
from tests.e2e.test_decision_rules import outcome, person

pytestmark = pytest.mark.e2e

CRAFTED = [
    "grace@evil.example@example.test",
    "grace@evil.example\n@example.test",
    "grace@example.test ",
    "grace@example.test\t",
    "grace@\uff45xample.test",
    "grace@\u212axample.test",  # a Kelvin sign: refused as sent, never made a K
]


@pytest.fixture
def api(live, agent_token):
    client = httpx.Client(
        base_url=live["url"] + "/api/v1",
        headers={"Authorization": f"Bearer {agent_token}"},
        timeout=40,
    )
    yield client
    client.close()


def propose(api: httpx.Client, email: str) -> httpx.Response:
    return api.post(
        "/plans",
        json={"action": "update_contact_email", "input": {"contact_id": "c-1002", "email": email}},
    )


def test_a_hostile_address_is_never_written_without_a_person(live, api, upstream, reviewer):
    load_rules(demo_rules())
    demo_policies_load()
    person("bea", "billing-approvers")
    person("leo", "support-leads")

    for email in CRAFTED:
        refused = propose(api, email)
        assert refused.status_code == 422, (email, refused.text)
        assert [e["pointer"] for e in refused.json()["errors"]] == ["/input/email"]
        assert refused.json()["errors"][0]["message"].startswith("not a valid e-mail address: ")

    # Another script's "е": a valid address, another domain, so a person decides.
    cyrillic = propose(api, "grace@\u0435xample.test")
    assert cyrillic.status_code == 201, cyrillic.text
    waiting = cyrillic.json()
    assert waiting["status"] == "awaiting_approval" and waiting["approved_by"] is None

    # The worker is running: the routine change the policy approves is written...
    routine = propose(api, "g.hopper@example.test")
    assert routine.json()["approved_by"] == "policy"
    assert outcome(api, routine.json()["id"])["status"] == "completed"
    # ... and nothing else was.
    assert [w["body"] for w in upstream.writes()] == [{"email": "g.hopper@example.test"}]
    assert api.get(f"/plans/{waiting['id']}").json()["status"] == "awaiting_approval"
    assert Plan.objects.count() == 2  # no plan for a refused address

    # A person approves it after all: the worker writes the address as judged. (The
    # contact changed meanwhile, so the first preview is stale; propose it again.)
    again = propose(api, "grace@\u0435xample.test")
    assert again.status_code == 201, again.text
    plan = again.json()
    assert plan["approved_by"] is None
    approval_record(
        plan_id=plan["id"],
        reviewer=reviewer,
        decision="approve",
        fingerprint_seen=plan["fingerprint"],
    )
    assert outcome(api, plan["id"])["status"] == "completed"
    written = upstream.writes()[-1]["body"]["email"]
    assert written.encode() == plan["input"]["email"].encode() == "grace@\u0435xample.test".encode()
    assert Plan.objects.get(pk=plan["id"]).after["email"] == written
