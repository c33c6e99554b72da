"""Who decides, with real processes (web server, Celery worker, PostgreSQL, Redis, the
demo upstream): a plan only billing-approvers may decide is refused to a support lead
(403, audited, nothing decided) and approved by a billing approver; the demo's all_of
rule executes a deletion only once a support lead and a billing approver both approved;
a plan nobody can decide is refused up front."""

from __future__ import annotations

import json
import re

import httpx
import pytest
import yaml
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission

from actions.catalog import load_catalog
from actions.lib.models import AuditEvent
from approvals.models import Approval
from tests.conftest import demo_catalog_text
from tests.e2e.test_core_loop import login

pytestmark = pytest.mark.e2e


def person(username: str, *groups: str):
    user = get_user_model().objects.create_user(username=username, password="pw-" + username)
    user.user_permissions.add(Permission.objects.get(codename="review_plan"))
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    return user


@pytest.fixture
def rules(live):
    section = yaml.safe_load(demo_catalog_text(decision_rules=True))["reviewers"]
    load_catalog(json.dumps({"version": 1, "reviewers": section}))
    person("bea", "billing-approvers")
    person("leo", "support-leads")


@pytest.fixture
def api(live, agent_token):
    return httpx.Client(
        base_url=live["url"] + "/api/v1",
        headers={"Authorization": f"Bearer {agent_token}"},
        timeout=40,
    )


def browser(live, username: str) -> httpx.Client:
    web = httpx.Client(base_url=live["url"], timeout=20)
    login(web, username, "pw-" + username)
    return web


def decide(live, web: httpx.Client, plan_id: str, *, fingerprint: str, **extra) -> httpx.Response:
    # The token from the queue: a person outside the plan's groups cannot open its page.
    page = web.get("/plans/")
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    return web.post(
        f"/plans/{plan_id}/decide",
        data={
            "decision": "approve",
            "fingerprint": fingerprint,
            "csrfmiddlewaretoken": csrf,
            **extra,
        },
        headers={"Referer": live["url"]},
    )


def outcome(api: httpx.Client, plan_id: str) -> dict:
    for _ in range(4):
        result = api.get(f"/plans/{plan_id}", params={"wait": 10}).json()
        if result["status"] not in ("approved", "executing"):
            break
    return result


def test_only_billing_decides_an_invoice(live, rules, api, upstream):
    created = api.post(
        "/plans", json={"action": "send_invoice", "input": {"invoice_id": "inv-2001"}}
    )
    assert created.status_code == 201, created.text
    plan = created.json()
    assert plan["requirement"]["rules"] == ["invoices-are-billings"]
    assert plan["requirement"]["missing"] == [
        {"any_of": [{"group": "billing-approvers", "count": 1}]}
    ]

    leo = browser(live, "leo")
    # Another group's plan: not in his queue, and its page is not his to open.
    assert plan["id"] not in leo.get("/plans/").text
    assert leo.get(f"/plans/{plan['id']}/").status_code == 403
    refused = decide(live, leo, plan["id"], fingerprint=plan["fingerprint"])
    assert refused.status_code == 403
    assert not Approval.objects.filter(plan_id=plan["id"]).exists()
    event = AuditEvent.objects.get(plan_id=plan["id"], kind="approval.not_eligible")
    assert event.actor == "user:leo"
    assert "billing-approvers" in event.data["reason"]
    assert api.get(f"/plans/{plan['id']}").json()["status"] == "awaiting_approval"

    bea = browser(live, "bea")
    assert decide(live, bea, plan["id"], fingerprint=plan["fingerprint"]).status_code == 302
    result = outcome(api, plan["id"])
    assert result["status"] == "completed", result
    assert result["requirement"]["met"] is True
    assert len(upstream.writes()) == 1


def test_the_all_of_rule_executes_only_after_both_groups_approved(live, rules, api, upstream):
    created = api.post(
        "/plans", json={"action": "delete_contact", "input": {"contact_id": "c-1001"}}
    )
    assert created.status_code == 201, created.text
    plan = created.json()
    # Someone in both groups fills one threshold only.
    person("ada", "billing-approvers", "support-leads")
    ada = browser(live, "ada")
    approved = decide(live, ada, plan["id"], fingerprint=plan["fingerprint"], confirm="c-1001")
    assert approved.status_code == 302
    answer = api.get(f"/plans/{plan['id']}").json()
    assert answer["status"] == "awaiting_approval"
    assert answer["requirement"]["met"] is False
    assert upstream.writes() == []

    bea = browser(live, "bea")
    approved = decide(live, bea, plan["id"], fingerprint=plan["fingerprint"], confirm="c-1001")
    assert approved.status_code == 302
    result = outcome(api, plan["id"])
    assert result["status"] == "completed", result
    assert [w["method"] for w in upstream.writes()] == ["DELETE"]
    counted = dict(
        Approval.objects.filter(plan_id=plan["id"]).values_list("reviewer__username", "counted_for")
    )
    assert counted == {"ada": "support-leads", "bea": "billing-approvers"}


def test_a_plan_nobody_can_decide_is_refused_up_front(live, rules, api):
    Group.objects.get(name="billing-approvers").user_set.clear()
    refused = api.post(
        "/plans", json={"action": "send_invoice", "input": {"invoice_id": "inv-2001"}}
    )
    assert refused.status_code == 409
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["detail"] == (
        "no one can approve this: billing-approvers has no active member"
    )


def test_an_escalation_reaches_the_second_group_which_then_decides(live, api, upstream):
    """A rule escalates invoices to finance-leads after 2 s: before, a finance lead is
    refused; after, the sweep announces it (the live worker delivers the notice to the
    finance group's webhook, not the billing group's), and the finance lead decides."""
    import time

    from approvals.decisions.escalations import escalations_announce
    from approvals.models import NotificationTarget
    from tests.approvals.test_notifications import Receiver

    section = yaml.safe_load(demo_catalog_text(decision_rules=True))["reviewers"]
    section["groups"].append("finance-leads")
    invoices = section["rules"]["invoices-are-billings"]
    invoices.update({"escalate_after": "2s", "escalate_to": "finance-leads"})
    load_catalog(json.dumps({"version": 1, "reviewers": section}))
    person("bea", "billing-approvers")
    person("fin", "finance-leads")
    with Receiver() as finance, Receiver() as billing:
        for group, receiver in (("finance-leads", finance), ("billing-approvers", billing)):
            NotificationTarget.objects.create(
                group=Group.objects.get(name=group),
                kind=NotificationTarget.Kind.WEBHOOK,
                address=receiver.url,
                secret="whsec-" + "e" * 32,
            )
        created = api.post(
            "/plans", json={"action": "send_invoice", "input": {"invoice_id": "inv-2001"}}
        )
        assert created.status_code == 201, created.text
        plan = created.json()
        fin = browser(live, "fin")
        assert decide(live, fin, plan["id"], fingerprint=plan["fingerprint"]).status_code == 403
        assert not Approval.objects.filter(plan_id=plan["id"]).exists()

        eligible_from = plan["requirement"]["all_of"][0]["any_of"][1]["eligible_from"]
        assert plan["requirement"]["all_of"][0]["any_of"][1]["escalated"] is False
        time.sleep(2.2)
        assert api.get(f"/plans/{plan['id']}").json()["requirement"]["all_of"][0]["any_of"][1][
            "escalated"
        ]
        assert escalations_announce() == 1  # the sweeper's step, run here
        deadline = time.monotonic() + 15
        while not any(b"plan.escalated" in r["body"] for r in finance.requests):
            assert time.monotonic() < deadline, "the escalation notice never arrived"
            time.sleep(0.1)
        assert not any(b"plan.escalated" in r["body"] for r in billing.requests)
        event = AuditEvent.objects.get(plan_id=plan["id"], kind="plan.escalated")
        assert event.data["group"] == "finance-leads" and eligible_from

        assert decide(live, fin, plan["id"], fingerprint=plan["fingerprint"]).status_code == 302
        result = outcome(api, plan["id"])
        assert result["status"] == "completed", result
        assert result["requirement"]["met"] is True
        assert len(upstream.writes()) == 1
        assert Approval.objects.get(plan_id=plan["id"]).counted_for == "finance-leads"
