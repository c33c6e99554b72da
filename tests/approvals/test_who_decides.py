"""Who decides, beyond the groups: rules that match the person a plan is for, escalation
to another group after a wait, break-glass by a superuser, and each person's own plans
first (the queue, the dashboard, the notifications), with the other plans read-only to
holders of the view permission."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, Permission
from django.core import mail
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from prometheus_client import REGISTRY

from actions.catalog import CatalogError
from actions.lib.audit import event_entry
from actions.lib.canonical import sha256_hex
from actions.lib.exceptions import InvalidInput, NoOneCanDecide, NotAllowed
from actions.lib.exceptions import NotEligibleToDecide as NotEligible
from actions.lib.models import AuditEvent
from approvals.decisions.escalations import escalations_announce
from approvals.decisions.requirements import claim_refusal, plan_requirement_answer
from approvals.lifecycle import approvals_spend
from approvals.models import Approval, DecidingGroup, NotificationTarget, Plan, PlanStatus
from approvals.services import approval_record, plan_edit
from tests.approvals.test_decision_rules import (
    DELETE,
    INVOICE,
    demo_rules,
    fresh,
    load_rules,
    person,
    send_invoice_plan,
)

ESCALATING = {
    "groups": ["billing-approvers", "support-leads", "finance-leads"],
    "rules": {
        "invoices-are-billings": {
            "match": {"actions": ["send_invoice"]},
            "any_of": [{"group": "billing-approvers", "count": 1}],
            "escalate_after": "30m",
            "escalate_to": "finance-leads",
        },
        "deleting-a-contact": {
            "match": {"actions": ["delete_contact"]},
            "all_of": [
                {"group": "support-leads", "count": 1},
                {"group": "billing-approvers", "count": 1},
            ],
        },
    },
}


@pytest.fixture
def escalating(catalog):
    load_rules(ESCALATING)
    return {
        "bea": person("bea", "billing-approvers"),
        "leo": person("leo", "support-leads"),
        "fin": person("fin", "finance-leads"),
    }


@pytest.fixture
def rules(catalog):
    load_rules(demo_rules())


@pytest.fixture
def committed(django_capture_on_commit_callbacks, settings):
    """Run what a commit triggers (notification tasks, in this process, and metrics)."""
    from config.celery import app

    saved = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager, app.conf.task_eager_propagates = True, True

    def run(fn, *args, **kw):
        with django_capture_on_commit_callbacks(execute=True):
            return fn(*args, **kw)

    yield run
    app.conf.task_always_eager, app.conf.task_eager_propagates = saved


def decide(plan, reviewer, decision="approve", **kw):
    return approval_record(
        plan_id=plan.id,
        reviewer=reviewer,
        decision=decision,
        fingerprint_seen=plan.fingerprint,
        **kw,
    )


def waited(plan: Plan, seconds: int) -> Plan:
    """The plan as if it had been proposed ``seconds`` ago (its deciding groups too)."""
    delta = timedelta(seconds=seconds)
    Plan.objects.filter(pk=plan.pk).update(
        created_at=plan.created_at - delta, expires_at=plan.expires_at - delta
    )
    for row in DecidingGroup.objects.filter(plan=plan):
        DecidingGroup.objects.filter(pk=row.pk).update(eligible_from=row.eligible_from - delta)
    return fresh(plan)


def emailed_to(group: str, *people) -> None:
    target_group = Group.objects.get(name=group)
    NotificationTarget.objects.create(group=target_group, kind=NotificationTarget.Kind.EMAIL)
    for user in people:
        user.email = f"{user.username}@example.test"
        user.save(update_fields=["email"])


# --- rules that match the requester -----------------------------------------------------------


def test_a_rule_may_match_the_groups_of_the_person_a_plan_is_for(make_plan, catalog):
    load_rules(
        {
            "groups": ["billing-approvers", "finance-leads"],
            "rules": {
                "for-contractors": {
                    "match": {"requester_groups": ["contractors"]},
                    "any_of": [{"group": "finance-leads", "count": 1}],
                }
            },
        }
    )
    person("fin", "finance-leads")
    contractor = {"iss": "https://idp.test", "sub": "c-1", "groups": ["contractors"], "name": "C"}
    staff = {"iss": "https://idp.test", "sub": "s-1", "groups": ["staff"], "name": "S"}
    assert make_plan(requester=contractor).requirement["rules"] == ["for-contractors"]
    other = {"contact_id": "c-1002", "email": "grace@new.example"}
    assert make_plan(input=other, requester=staff).requirement == {}
    third = {"contact_id": "c-1003", "email": "x@new.example"}
    assert make_plan(input=third).requirement == {}  # on behalf of nobody


def test_the_worker_sees_a_requester_rule_change_too(make_plan, catalog):
    section = {
        "groups": ["finance-leads"],
        "rules": {
            "for-contractors": {
                "match": {"requester_groups": ["contractors"]},
                "any_of": [{"group": "finance-leads", "count": 1}],
            }
        },
    }
    load_rules(section)
    fin = person("fin", "finance-leads")
    contractor = {"iss": "https://idp.test", "sub": "c-1", "groups": ["contractors"], "name": "C"}
    plan = make_plan(requester=contractor)
    decide(plan, fin)
    assert fresh(plan).status == PlanStatus.APPROVED
    section["rules"]["for-contractors"]["match"]["requester_groups"] = ["interns"]
    load_rules(section)
    assert "the decision rules changed" in claim_refusal(fresh(plan))


# --- escalation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"escalate_after": "30m"}, "give escalate_after and escalate_to together"),
        ({"escalate_to": "finance-leads"}, "give escalate_after and escalate_to together"),
        ({"escalate_after": "30m", "escalate_to": "nobody"}, "unknown group 'nobody'"),
        (
            {"escalate_after": "30m", "escalate_to": "billing-approvers"},
            "'billing-approvers' already decides under this rule",
        ),
        ({"escalate_after": "soon", "escalate_to": "finance-leads"}, "does not match"),
    ],
)
def test_a_bad_escalation_is_refused_at_load_with_the_rules_name(catalog, change, message):
    section = json.loads(json.dumps(ESCALATING))
    rule = section["rules"]["invoices-are-billings"]
    del rule["escalate_after"], rule["escalate_to"]
    rule.update(change)
    with pytest.raises(CatalogError) as info:
        load_rules(section)
    assert message in str(info.value)


def test_the_escalation_is_part_of_the_requirement_and_waits_its_time(make_plan, escalating):
    plan = send_invoice_plan(make_plan)
    thresholds = plan.requirement["all_of"][0]["any_of"]
    assert thresholds == [
        {"group": "billing-approvers", "count": 1},
        {"group": "finance-leads", "count": 1, "after": 1800},
    ]
    assert plan.policy["requirement"] == plan.requirement  # fingerprinted
    answer = plan_requirement_answer(plan)
    assert answer["all_of"][0]["any_of"][1]["escalated"] is False
    assert answer["missing"] == [{"any_of": [{"group": "billing-approvers", "count": 1}]}]
    # Not yet: the wait is not over.
    with pytest.raises(NotEligible, match="finance-leads may decide from"):
        decide(plan, escalating["fin"])
    assert not plan.approvals.exists()
    plan = waited(plan, 1801)
    answer = plan_requirement_answer(plan)
    assert answer["all_of"][0]["any_of"][1]["escalated"] is True
    decide(plan, escalating["fin"])
    plan = fresh(plan)
    assert plan.status == PlanStatus.APPROVED
    assert Approval.objects.get(plan=plan).counted_for == "finance-leads"
    assert claim_refusal(plan, list(plan.approvals.all())) is None


def test_an_escalated_approval_dated_before_its_time_does_not_count(make_plan, escalating):
    """Written past the decide service (or by a clock that ran ahead): the worker judges
    the approval by when it was given."""
    plan = waited(send_invoice_plan(make_plan), 1801)
    decide(plan, escalating["fin"])
    approval = Approval.objects.get(plan=plan)
    Approval.objects.filter(pk=approval.pk).update(
        created_at=plan.created_at + timedelta(seconds=60)
    )
    plan = fresh(plan)
    assert "do not meet the plan's requirement" in claim_refusal(plan, list(plan.approvals.all()))


def test_the_sweeper_announces_an_escalation_once_to_its_group_only(
    make_plan, escalating, committed
):
    emailed_to("finance-leads", escalating["fin"])
    emailed_to("billing-approvers", escalating["bea"])
    plan = committed(send_invoice_plan, make_plan)
    assert [m.to for m in mail.outbox] == [["bea@example.test"]]
    mail.outbox.clear()
    before = REGISTRY.get_sample_value("countersign_escalations_total") or 0
    assert committed(escalations_announce) == 0  # not yet
    waited(plan, 1801)
    assert committed(escalations_announce) == 1
    assert committed(escalations_announce) == 0  # once
    assert [m.to for m in mail.outbox] == [["fin@example.test"]]
    assert "Escalated to you" in mail.outbox[0].subject
    event = AuditEvent.objects.get(plan=plan, kind="plan.escalated")
    assert event.data == {"group": "finance-leads", "after_seconds": 1800}
    assert REGISTRY.get_sample_value("countersign_escalations_total") == before + 1


def test_a_decided_plan_is_not_escalated(make_plan, escalating, committed):
    plan = send_invoice_plan(make_plan)
    decide(plan, escalating["bea"])
    waited(plan, 1801)
    assert committed(escalations_announce) == 0


def test_an_empty_group_with_an_escalation_in_time_is_decidable(make_plan, escalating):
    Group.objects.get(name="billing-approvers").user_set.clear()
    assert send_invoice_plan(make_plan).status == PlanStatus.AWAITING_APPROVAL


def test_an_escalation_after_the_plan_expires_does_not_make_it_decidable(catalog, make_plan):
    section = json.loads(json.dumps(ESCALATING))
    # The demo's plans wait an hour (COUNTERSIGN_PLAN_TTL_SECONDS): past that, too late.
    section["rules"]["invoices-are-billings"]["escalate_after"] = "2h"
    load_rules(section)
    person("fin", "finance-leads")
    with pytest.raises(NoOneCanDecide, match="billing-approvers has no active member"):
        send_invoice_plan(make_plan)


# --- break-glass ------------------------------------------------------------------------------


@pytest.fixture
def root(rules):
    return person("root", superuser=True)


def test_break_glass_needs_a_reason_and_is_audited_when_refused(make_plan, root, rules):
    person("bea", "billing-approvers")
    plan = send_invoice_plan(make_plan)
    with pytest.raises(NotEligible):
        decide(plan, root)  # a superuser is not implicitly eligible
    with pytest.raises(InvalidInput):
        decide(plan, root, break_glass=True, comment="   ")
    assert not plan.approvals.exists()
    refused = AuditEvent.objects.get(plan=plan, kind="approval.break_glass_refused")
    assert refused.actor == "user:root"
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL


def test_only_a_superuser_breaks_glass(make_plan, rules):
    person("bea", "billing-approvers")
    leo = person("leo", "support-leads")
    plan = send_invoice_plan(make_plan)
    with pytest.raises(NotAllowed, match="only a superuser"):
        decide(plan, leo, break_glass=True, comment="the billing team is offline")
    assert not plan.approvals.exists()


def test_break_glass_is_audited_counted_and_told_to_every_group(make_plan, root, committed):
    bea, leo = person("bea", "billing-approvers"), person("leo", "support-leads")
    emailed_to("billing-approvers", bea)
    emailed_to("support-leads", leo)
    plan = make_plan("delete_contact", DELETE)
    mail.outbox.clear()
    before = REGISTRY.get_sample_value(
        "countersign_break_glass_decisions_total", {"decision": "approve"}
    )
    with CaptureQueriesContext(connection) as ctx:
        committed(
            decide, plan, root, break_glass=True, comment="incident 42: the account is abused"
        )
    approval = Approval.objects.get(plan=plan)
    assert approval.break_glass and approval.groups == []
    event = AuditEvent.objects.get(plan=plan, kind="approval.break_glass")
    assert event.hash == sha256_hex(event_entry(event))
    if connection.vendor == "postgresql":
        # The approval's INSERT is made in its event's statement.
        (insert,) = [q["sql"] for q in ctx if 'INSERT INTO "approvals_approval"' in q["sql"]]
        assert insert.startswith("WITH along0 AS (INSERT") and "approval.break_glass" in insert
    assert event.data["reason"] == "incident 42: the account is abused"
    assert event.data["decision"] == "approve"
    assert (
        REGISTRY.get_sample_value(
            "countersign_break_glass_decisions_total", {"decision": "approve"}
        )
        == (before or 0) + 1
    )
    assert sorted(m.to[0] for m in mail.outbox) == ["bea@example.test", "leo@example.test"]
    assert all("Break-glass decision" in m.subject for m in mail.outbox)
    # One place of an all_of, never more: the other group still has to approve.
    plan = fresh(plan)
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    decide(plan, leo)
    assert fresh(plan).status == PlanStatus.APPROVED


def test_break_glass_never_approves_the_superusers_own_request(make_plan, root):
    from approvals.decisions.requester import RequesterMayNotApprove
    from approvals.models import OidcIdentity

    person("bea", "billing-approvers")
    OidcIdentity.objects.create(user=root, issuer="https://idp.test", subject="root-1")
    mine = {"iss": "https://idp.test", "sub": "root-1", "groups": [], "name": "Root"}
    plan = make_plan("send_invoice", INVOICE, requester=mine)
    with pytest.raises(RequesterMayNotApprove):
        decide(plan, root, break_glass=True, comment="I need this now")
    assert not plan.approvals.exists()


def test_a_break_glass_approval_must_be_signed_where_signing_is_on(make_plan, root):
    person("bea", "billing-approvers")
    person("leo", "support-leads")
    plan = make_plan("delete_contact", DELETE)
    with override_settings(COUNTERSIGN_SIGNED_APPROVAL_CLASSES=["irreversible"]):
        with pytest.raises(Exception, match="passkey"):
            decide(plan, root, break_glass=True, comment="incident 42")
    assert not plan.approvals.exists()


def test_the_worker_refuses_a_break_glass_approval_whose_maker_is_no_longer_a_superuser(
    make_plan, root
):
    person("bea", "billing-approvers")
    plan = send_invoice_plan(make_plan)
    decide(plan, root, break_glass=True, comment="the billing team is offline")
    plan = fresh(plan)
    assert plan.status == PlanStatus.APPROVED
    assert claim_refusal(plan, list(plan.approvals.all())) is None
    root.is_superuser = False
    root.save(update_fields=["is_superuser"])
    assert "no longer an active superuser" in claim_refusal(plan, list(plan.approvals.all()))
    from django.utils import timezone

    assert approvals_spend(plan, timezone.now()) is False


def test_the_page_offers_break_glass_to_a_superuser_outside_the_groups(client, make_plan, root):
    person("bea", "billing-approvers")
    plan = send_invoice_plan(make_plan)
    client.force_login(root)
    url = reverse("approvals:plan-detail", args=[plan.id])
    page = client.get(url).content.decode()
    assert 'data-testid="break-glass-offer"' in page and 'name="break_glass"' in page
    decide_url = reverse("approvals:plan-decide", args=[plan.id])
    form = {"decision": "approve", "fingerprint": plan.fingerprint, "break_glass": "1"}
    response = client.post(decide_url, {**form, "reason": ""})
    assert response.status_code == 302 and not plan.approvals.exists()
    response = client.post(decide_url, {**form, "reason": "billing is offline, invoice is due"})
    assert response.status_code == 302
    assert Approval.objects.get(plan=plan).break_glass
    page = client.get(url).content.decode()
    assert 'data-testid="break-glass"' in page  # the decision is shown as break-glass


# --- each person's own plans ------------------------------------------------------------------


@pytest.fixture
def teams(rules):
    return {"bea": person("bea", "billing-approvers"), "leo": person("leo", "support-leads")}


def queue_ids(client, **params) -> set[str]:
    page = client.get(reverse("approvals:queue"), params).content.decode()
    return {pid for pid in page.split('data-plan-id="')[1:] for pid in [pid[:36]]}


def test_the_queue_shows_each_person_what_they_may_decide(client, make_plan, teams):
    invoice = send_invoice_plan(make_plan)
    deletion = make_plan("delete_contact", DELETE)
    anyone = make_plan()  # no rule: the class default, anyone who reviews
    client.force_login(teams["bea"])
    assert queue_ids(client) == {str(invoice.id), str(deletion.id), str(anyone.id)}
    client.force_login(teams["leo"])
    assert queue_ids(client) == {str(deletion.id), str(anyone.id)}
    # Without the view permission, "all" is still only what his groups decide.
    assert queue_ids(client, view="all") == {str(deletion.id), str(anyone.id)}
    assert client.get(reverse("approvals:plan-detail", args=[invoice.id])).status_code == 403
    # Decided: no longer his to decide, still his to see.
    decide(deletion, teams["leo"])
    assert queue_ids(client) == {str(anyone.id)}
    assert str(deletion.id) in queue_ids(client, view="all", status="any")
    # With the view permission: every plan under "all", read-only.
    teams["leo"].user_permissions.add(Permission.objects.get(codename="view_plan"))
    assert str(invoice.id) in queue_ids(client, view="all")
    assert queue_ids(client) == {str(anyone.id)}


def test_the_queue_leaves_out_what_a_person_requested(client, make_plan, teams):
    from approvals.models import OidcIdentity

    OidcIdentity.objects.create(user=teams["bea"], issuer="https://idp.test", subject="bea-1")
    mine = {"iss": "https://idp.test", "sub": "bea-1", "groups": [], "name": "Bea"}
    person("bill", "billing-approvers")  # someone else may decide it (the floor: not Bea)
    requested = make_plan("send_invoice", INVOICE, requester=mine)
    other = make_plan()
    client.force_login(teams["bea"])
    assert queue_ids(client) == {str(other.id)}
    assert str(requested.id) in queue_ids(client, view="all")


def test_the_queue_says_what_is_missing_for_a_ruled_plan(client, make_plan, teams):
    deletion = make_plan("delete_contact", DELETE)
    decide(deletion, teams["leo"])
    client.force_login(teams["bea"])
    page = client.get(reverse("approvals:queue")).content.decode()
    row = page.split(f'data-plan-id="{deletion.id}"')[1].split("</tr>")[0]
    assert 'data-testid="needed">1 of billing-approvers</td>' in row


def test_the_dashboard_counts_only_what_a_person_may_see(client, make_plan, teams):
    send_invoice_plan(make_plan)
    make_plan("delete_contact", DELETE)
    client.force_login(teams["leo"])
    page = client.get(reverse("approvals:dashboard")).content.decode()
    assert 'data-testid="mine">1<' in page and 'data-testid="pending">1<' in page
    assert 'data-testid="scope"' in page
    client.force_login(teams["bea"])
    page = client.get(reverse("approvals:dashboard")).content.decode()
    assert 'data-testid="mine">2<' in page and 'data-testid="pending">2<' in page


def test_notifications_go_only_to_the_groups_that_can_decide(make_plan, teams, committed):
    emailed_to("billing-approvers", teams["bea"])
    emailed_to("support-leads", teams["leo"])
    committed(send_invoice_plan, make_plan)
    assert [m.to for m in mail.outbox] == [["bea@example.test"]]
    mail.outbox.clear()
    committed(make_plan, "delete_contact", DELETE)
    assert sorted(m.to[0] for m in mail.outbox) == ["bea@example.test", "leo@example.test"]


def test_the_requester_is_not_asked_to_decide_their_own_plan(make_plan, teams, committed):
    from approvals.models import OidcIdentity

    other = person("bob", "billing-approvers")
    emailed_to("billing-approvers", teams["bea"], other)
    OidcIdentity.objects.create(user=teams["bea"], issuer="https://idp.test", subject="bea-1")
    mine = {"iss": "https://idp.test", "sub": "bea-1", "groups": [], "name": "Bea"}
    person("bill", "billing-approvers")  # someone else may decide it (the floor: not Bea)
    committed(make_plan, "send_invoice", INVOICE, requester=mine)
    assert [m.to for m in mail.outbox] == [["bob@example.test"]]


def test_a_person_outside_the_groups_cannot_edit_a_plan_away(make_plan, teams):
    from approvals.models import PlanStatus as S

    plan = make_plan("update_invoice_memo", {"invoice_id": "inv-2001", "memo": "thanks"})
    with pytest.raises(NotEligible):
        plan_edit(plan_id=plan.id, reviewer=teams["leo"], input={**plan.input, "memo": "no"})
    assert fresh(plan).status == S.AWAITING_APPROVAL
    assert AuditEvent.objects.filter(plan=plan, kind="approval.not_eligible").exists()


def test_the_api_tells_the_agent_about_the_escalation(client, api_headers, escalating):
    created = client.post(
        "/api/v1/plans",
        data={"action": "send_invoice", "input": INVOICE},
        content_type="application/json",
        **api_headers,
    )
    assert created.status_code == 201, created.content
    threshold = created.json()["requirement"]["all_of"][0]["any_of"][1]
    assert threshold["group"] == "finance-leads" and threshold["after"] == 1800
    assert threshold["escalated"] is False and threshold["eligible_from"]
    # Groups and counts, never people.
    assert set(threshold) == {"group", "count", "approved", "after", "eligible_from", "escalated"}


def test_break_glass_is_only_for_plans_outside_ones_groups(make_plan, rules):
    bea = person("bea", "billing-approvers", superuser=True)
    plan = send_invoice_plan(make_plan)
    with pytest.raises(InvalidInput, match="without breaking glass"):
        decide(plan, bea, break_glass=True, comment="no reason to")
    anyone = make_plan()  # the class default: every reviewer decides it already
    with pytest.raises(InvalidInput, match="without breaking glass"):
        decide(anyone, bea, break_glass=True, comment="no reason to")
    assert not Approval.objects.filter(plan__in=[plan, anyone]).exists()
