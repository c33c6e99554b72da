"""People who may no longer decide, with real processes (web server, Celery worker,
PostgreSQL, Redis, the demo upstream, and for on-behalf-of the real OpenID provider):

* a plan whose only possible approver is the person it is on behalf of is refused at
  submission, over the JSON API (a problem document) and over MCP (a tool error), and
  no plan is stored;
* an approver deactivated between the first and the second approval no longer counts:
  the plan waits for a third person, then the worker runs it;
* an approver deactivated after the plan was approved, before the worker's claim: the
  worker refuses it, audits the void approval, and the upstream receives nothing;
* a plan decided by people who may still decide runs as before."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest
from django.contrib.auth import get_user_model

from actions.catalog import load_catalog
from tests.e2e.support import orm
from tests.e2e.test_decision_rules import browser, decide, outcome, person
from tests.oidc.support import sign_in_without_a_browser

pytestmark = pytest.mark.e2e

HEADER = "Countersign-On-Behalf-Of"
INVOICE = {"invoice_id": "inv-2001"}
REFUSAL = (
    "no one can approve this: the only active member of billing is the person this plan is "
    "on behalf of"
)


def two_of_billing() -> None:
    load_catalog(
        json.dumps(
            {
                "version": 1,
                "reviewers": {
                    "groups": ["billing-approvers"],
                    "rules": {
                        "invoices-need-two": {
                            "match": {"actions": ["send_invoice"]},
                            "any_of": [{"group": "billing-approvers", "count": 2}],
                        }
                    },
                },
            }
        )
    )


@pytest.fixture
def billing(live):
    two_of_billing()
    return {name: person(name, "billing-approvers") for name in ("bea", "bill", "bob")}


@pytest.fixture
def api(live, agent_token):
    client = httpx.Client(
        base_url=live["url"] + "/api/v1",
        headers={"Authorization": f"Bearer {agent_token}"},
        timeout=40,
    )
    yield client
    client.close()


def deactivate(username: str) -> None:
    get_user_model().objects.filter(username=username).update(is_active=False)


def voided(plan_id: str) -> list[tuple[str, str, str]]:
    from actions.lib.models import AuditEvent

    return [
        (e.actor, e.data["reviewer"], e.data["reason"])
        for e in AuditEvent.objects.filter(plan_id=plan_id, kind="approval.voided")
    ]


def test_deactivated_between_two_approvals_the_first_no_longer_counts(live, billing, api, upstream):
    created = api.post("/plans", json={"action": "send_invoice", "input": INVOICE})
    assert created.status_code == 201, created.text
    plan = created.json()
    fingerprint = plan["fingerprint"]
    bea = browser(live, "bea")
    assert decide(live, bea, plan["id"], fingerprint=fingerprint).status_code == 302
    assert (
        api.get(f"/plans/{plan['id']}").json()["requirement"]["all_of"][0]["any_of"][0]["approved"]
        == 1
    )

    deactivate("bea")
    answer = api.get(f"/plans/{plan['id']}").json()
    assert answer["requirement"]["all_of"][0]["any_of"][0]["approved"] == 0
    assert decide(live, browser(live, "bill"), plan["id"], fingerprint=fingerprint).status_code == (
        302
    )
    answer = api.get(f"/plans/{plan['id']}").json()
    assert answer["status"] == "awaiting_approval"
    assert answer["requirement"]["met"] is False
    assert answer["requirement"]["missing"] == [
        {"any_of": [{"group": "billing-approvers", "count": 2}]}
    ]
    assert upstream.writes() == []
    assert voided(plan["id"]) == [("system", "user:bea", "deactivated")]

    assert decide(live, browser(live, "bob"), plan["id"], fingerprint=fingerprint).status_code == (
        302
    )
    result = outcome(api, plan["id"])
    assert result["status"] == "completed", result
    assert result["requirement"]["met"] is True
    assert len(upstream.writes()) == 1


def test_deactivated_before_the_workers_claim_nothing_is_sent(
    live, billing, api, upstream, monkeypatch
):
    from actions.lib import dispatch
    from approvals.services import approval_record

    created = api.post("/plans", json={"action": "send_invoice", "input": INVOICE})
    assert created.status_code == 201, created.text
    plan = created.json()
    # Both approve while the worker's wake-up is lost (the broker hiccups); Bea is then
    # deactivated, and the wake-up is published again (as the sweeper would) to the real
    # worker.
    with monkeypatch.context() as patched:
        patched.setattr("actions.lib.dispatch.publish", lambda *a, **k: None)
        for name in ("bea", "bill"):
            approval_record(
                plan_id=plan["id"],
                reviewer=billing[name],
                decision="approve",
                fingerprint_seen=plan["fingerprint"],
            )
    assert api.get(f"/plans/{plan['id']}").json()["status"] == "approved"
    deactivate("bea")
    assert dispatch.publish(dispatch.EXECUTE_PLAN, plan["id"])

    result = outcome(api, plan["id"])
    assert result["status"] == "refused", result
    assert result["outcome"]["detail"] == (
        "refused before sending: an approval no longer counts (its maker is deactivated), "
        "and the others do not decide the plan; the agent must propose again"
    )
    assert upstream.writes() == []
    assert voided(plan["id"]) == [("system:executor", "user:bea", "deactivated")]


def test_a_plan_people_who_may_decide_approved_still_runs(live, billing, api, upstream):
    created = api.post("/plans", json={"action": "send_invoice", "input": INVOICE})
    plan = created.json()
    for name in ("bea", "bill"):
        web = browser(live, name)
        assert decide(live, web, plan["id"], fingerprint=plan["fingerprint"]).status_code == 302
    result = outcome(api, plan["id"])
    assert result["status"] == "completed", result
    assert len(upstream.writes()) == 1
    assert voided(plan["id"]) == []


# --- on behalf of the only member of the deciding group ----------------------------------


@pytest.fixture
def ada_in_billing(sso):
    """A rule gives invoices to ``billing``; Ada (the provider's groups claim: reviewers,
    billing) signs in, which makes her its one member. Her ID token."""
    load_catalog(
        json.dumps(
            {
                "version": 1,
                "reviewers": {
                    "groups": ["billing"],
                    "rules": {
                        "invoices-are-billings": {
                            "match": {"actions": ["send_invoice"]},
                            "any_of": [{"group": "billing", "count": 1}],
                        }
                    },
                },
            }
        )
    )
    http = httpx.Client(base_url=sso["url"], timeout=10)
    answer = sign_in_without_a_browser(http, f"{sso['url']}/accounts/oidc/start/", "ada-sso")
    assert answer.status_code == 302, answer.text
    (token,) = sso["token_endpoint"].tokens
    yield token
    http.close()


def plans_made() -> int:
    from approvals.models import Plan

    return orm(lambda: Plan.objects.count())


def test_on_behalf_of_the_only_member_is_refused_over_the_api_and_mcp(
    sso, ada_in_billing, sso_agent_api, agent_token, upstream
):
    from actions.lib.models import AuditEvent
    from tests.mcp.conftest import http_client

    assert orm(
        lambda: list(
            get_user_model()
            .objects.filter(groups__name="billing")
            .values_list("username", flat=True)
        )
    ) == ["ada-sso"]
    refused = sso_agent_api.http.post(
        "/plans",
        json={"action": "send_invoice", "input": INVOICE, "reason": "Ada asked"},
        headers={HEADER: ada_in_billing},
    )
    assert refused.status_code == 409, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["type"].endswith("no-one-can-decide")
    assert refused.json()["detail"] == REFUSAL

    async def over_mcp():
        async with http_client(sso["url"], agent_token) as client:
            return await client.call_tool(
                "send_invoice",
                {**INVOICE, "reason": "Ada asked"},
                meta={"countersign/on-behalf-of": ada_in_billing},
            )

    tool = anyio.run(over_mcp)
    assert tool.is_error
    assert tool.structured_content["type"].endswith("no-one-can-decide")
    assert tool.structured_content["detail"] == REFUSAL
    assert plans_made() == 0
    reasons = orm(
        lambda: list(
            AuditEvent.objects.filter(kind="plan.refused").values_list("data__reason", flat=True)
        )
    )
    assert reasons == [REFUSAL, REFUSAL]

    # On behalf of nobody, Ada is the one who decides it.
    alone = sso_agent_api.http.post("/plans", json={"action": "send_invoice", "input": INVOICE})
    assert alone.status_code == 201, alone.text
