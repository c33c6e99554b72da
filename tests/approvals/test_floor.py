"""People who may no longer decide (approvals/decisions/requirements.py).

At submission, whether anyone can decide counts the floor: not the person the plan is on
behalf of, distinct approvers across an all_of, not the registrar alone on an
irreversible plan, superusers only as members. After it, membership is authority: an
approval counts only while its maker is still active, may still review and is still in
the group it approved for, at the next approval (the count, the page, the API's
requirement) and at the worker's claim (in this process here, against the real demo
upstream; with the real worker in tests/e2e/test_floor.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from actions.lib.exceptions import NoOneCanDecide
from actions.lib.models import AuditEvent
from actions.models import Agent
from approvals.decisions.requirements import plan_requirement_answer
from approvals.grants import grant_create
from approvals.models import Plan, PlanStatus
from approvals.services import approval_record
from executors.services import execution_run
from tests.approvals.test_decision_rules import (
    DELETE,
    INVOICE,
    fresh,
    load_rules,
    person,
    send_invoice_plan,
)
from tests.approvals.test_requester import link

ISSUER = "https://idp.test"
BEA = {"iss": ISSUER, "sub": "bea-1", "groups": ["staff"], "name": "Bea"}


def rules(**by_action) -> None:
    """One rule per action: ``send_invoice=[("billing-approvers", 2)]`` is an any_of;
    a list of several groups is an all_of."""
    section = {
        "groups": ["billing-approvers", "support-leads", "finance-leads"],
        "rules": {},
    }
    for action, thresholds in by_action.items():
        key = "any_of" if len(thresholds) == 1 else "all_of"
        section["rules"][f"rule-{action}"] = {
            "match": {"actions": [action]},
            key: [{"group": g, "count": n} for g, n in thresholds],
        }
    load_rules(section)


@pytest.fixture
def decide(django_capture_on_commit_callbacks):
    def decide(plan, reviewer, decision="approve", **kw):
        with django_capture_on_commit_callbacks(execute=False):
            return approval_record(
                plan_id=plan.id,
                reviewer=reviewer,
                decision=decision,
                fingerprint_seen=plan.fingerprint,
                **kw,
            )

    return decide


@pytest.fixture
def execute(executor_key, django_capture_on_commit_callbacks):
    def execute(plan):
        with django_capture_on_commit_callbacks(execute=False):
            return execution_run(plan_id=plan.id)

    return execute


def deactivate(user) -> None:
    # A bare UPDATE, as any way of deactivating someone ends: no signal is relied on.
    type(user).objects.filter(pk=user.pk).update(is_active=False)


def voided(plan) -> list[dict]:
    return [
        {"actor": e.actor, **e.data}
        for e in AuditEvent.objects.filter(plan_id=plan.id, kind="approval.voided").order_by("id")
    ]


def refused_at_submission() -> AuditEvent:
    return AuditEvent.objects.get(kind="plan.refused", data__check="decision_rules")


# --- at submission: whether anyone can decide counts the floor -------------------------------


def test_a_group_whose_only_member_is_the_requester_refuses_the_plan_up_front(make_plan, catalog):
    rules(send_invoice=[("billing-approvers", 1)])
    link(person("bea", "billing-approvers"), subject="bea-1", issuer=ISSUER)
    with pytest.raises(NoOneCanDecide) as info:
        make_plan("send_invoice", INVOICE, requester=BEA)
    assert str(info.value) == (
        "no one can approve this: the only active member of billing-approvers is the person "
        "this plan is on behalf of"
    )
    assert not Plan.objects.exists()
    assert refused_at_submission().data["reason"] == str(info.value)
    # On behalf of nobody, Bea decides it; for her, someone else must be there.
    assert send_invoice_plan(make_plan).status == PlanStatus.AWAITING_APPROVAL
    person("bill", "billing-approvers")
    plan = make_plan("send_invoice", INVOICE, requester=BEA)
    assert plan.status == PlanStatus.AWAITING_APPROVAL and plan.requester["sub"] == "bea-1"


def test_a_threshold_the_requester_would_complete_says_so(make_plan, catalog):
    rules(send_invoice=[("billing-approvers", 2)])
    link(person("bea", "billing-approvers"), subject="bea-1", issuer=ISSUER)
    person("bill", "billing-approvers")
    with pytest.raises(NoOneCanDecide) as info:
        make_plan("send_invoice", INVOICE, requester=BEA)
    assert str(info.value) == (
        "no one can approve this: billing-approvers has 1 active member besides the person "
        "this plan is on behalf of, and 2 must approve"
    )


def test_an_all_of_only_one_shared_person_could_meet_is_refused(make_plan, catalog):
    """Support leads and billing approvers: Ada is in both, Bea (the requester) in
    billing. Ada's one approval fills one threshold only, and Bea's never counts."""
    rules(delete_contact=[("support-leads", 1), ("billing-approvers", 1)])
    person("ada", "support-leads", "billing-approvers")
    link(person("bea", "billing-approvers"), subject="bea-1", issuer=ISSUER)
    with pytest.raises(NoOneCanDecide) as info:
        make_plan("delete_contact", DELETE, requester=BEA)
    assert str(info.value) == (
        "no one can approve this: billing-approvers, support-leads have too few distinct "
        "active members for 1 of billing-approvers and 1 of support-leads (each person's "
        "approval counts toward one threshold only, and never the person this plan is on "
        "behalf of)"
    )
    assert not Plan.objects.exists()
    person("bill", "billing-approvers")
    assert make_plan("delete_contact", DELETE, requester=BEA).status == "awaiting_approval"


def test_the_registrar_alone_cannot_make_an_irreversible_plan_decidable(make_plan, agent, catalog):
    rules(delete_contact=[("support-leads", 1)])
    leo = person("leo", "support-leads")
    Agent.objects.filter(pk=agent.pk).update(created_by=leo)
    with pytest.raises(NoOneCanDecide) as info:
        make_plan("delete_contact", DELETE, by=Agent.objects.get(pk=agent.pk))
    assert str(info.value) == (
        "no one can approve this: the only active member of support-leads registered the "
        "agent, and an irreversible plan needs someone else's approval"
    )
    # A reversible plan is theirs to approve alone; another lead makes the deletion
    # decidable (they approve first, or alone).
    rules(delete_contact=[("support-leads", 1)], send_invoice=[("support-leads", 1)])
    agent = Agent.objects.get(pk=agent.pk)
    assert make_plan("send_invoice", INVOICE, by=agent).status == "awaiting_approval"
    person("lena", "support-leads")
    assert make_plan("delete_contact", DELETE, by=agent).status == "awaiting_approval"


def test_superusers_and_inactive_people_do_not_make_a_group_able_to_decide(make_plan, catalog):
    rules(send_invoice=[("billing-approvers", 1)])
    person("root", superuser=True)  # in no group: break-glass only, never counted here
    gone = person("gone", "billing-approvers")
    deactivate(gone)
    with pytest.raises(NoOneCanDecide, match="billing-approvers has no active member"):
        send_invoice_plan(make_plan)
    person("admin", "billing-approvers", superuser=True)  # a member: counts
    assert send_invoice_plan(make_plan).status == PlanStatus.AWAITING_APPROVAL


# --- after it: an approval counts only while its maker may still give it ---------------------


def test_a_deactivated_approver_no_longer_counts_at_the_next_approval(
    make_plan, catalog, decide, execute, upstream
):
    rules(send_invoice=[("billing-approvers", 2)])
    bea, bill, bob = (person(n, "billing-approvers") for n in ("bea", "bill", "bob"))
    plan = send_invoice_plan(make_plan)
    decide(plan, bea)
    assert plan_requirement_answer(fresh(plan))["all_of"][0]["any_of"][0]["approved"] == 1
    deactivate(bea)
    # The page and the API's answer stop counting her at once...
    answer = plan_requirement_answer(fresh(plan))
    assert answer["all_of"][0]["any_of"][0]["approved"] == 0 and answer["met"] is False
    # ...and the next approval does not complete the plan with hers.
    decide(plan, bill)
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    assert voided(plan) == [
        {
            "actor": "system",
            "approval": str(plan.approvals.get(reviewer=bea).pk),
            "reviewer": "user:bea",
            "reason": "deactivated",
        }
    ]
    recorded = AuditEvent.objects.filter(plan_id=plan.id, kind="approval.recorded").last()
    assert recorded.data["approvals"] == 1 and recorded.data["void"] == 1
    assert recorded.data["requirement_met"] is False
    decide(plan, bob)
    assert fresh(plan).status == PlanStatus.APPROVED
    assert len(voided(plan)) == 1  # audited once
    counted = dict(plan.approvals.values_list("reviewer__username", "counted_for"))
    assert counted == {"bea": "", "bill": "billing-approvers", "bob": "billing-approvers"}
    # Two people who may still decide approved it: it runs.
    assert execute(plan) == PlanStatus.COMPLETED
    assert len(upstream.writes()) == 1


def test_a_class_default_plan_does_not_count_a_deactivated_approver_either(
    make_plan, reviewer, second_reviewer, outsider, decide
):
    """No decision rule: an irreversible plan needs two distinct reviewers."""
    plan = make_plan("delete_contact", DELETE)
    assert plan.required_approvals == 2
    decide(plan, reviewer)
    deactivate(reviewer)
    decide(plan, second_reviewer)
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    assert [v["reason"] for v in voided(plan)] == ["deactivated"]


def test_a_class_default_plans_page_and_queue_count_only_approvals_that_still_count(
    client, make_plan, reviewer, second_reviewer, outsider, decide
):
    plan = make_plan("delete_contact", DELETE)
    decide(plan, reviewer)
    client.force_login(second_reviewer)

    def shown() -> tuple[str, str]:
        page = client.get(reverse("approvals:plan-detail", args=[plan.id])).content.decode()
        progress = page.split('data-testid="approval-progress">')[1].split("</span>")[0]
        queue = client.get(reverse("approvals:queue")).content.decode()
        row = queue.split(f'data-plan-id="{plan.id}"')[1].split("</tr>")[0]
        cell = row.split('data-testid="needed"')[1].split(">", 1)[1].split("</td>")[0]
        return " ".join(progress.split()), " ".join(cell.split())

    counted = shown()
    assert counted[0] == "1 of 2"
    deactivate(reviewer)
    after = shown()
    assert after[0] == "0 of 2"
    assert after[1] != counted[1] and "2" in after[1]


def test_deactivated_after_approval_the_worker_sends_nothing(
    make_plan, catalog, decide, execute, upstream
):
    rules(send_invoice=[("billing-approvers", 2)])
    bea, bill = person("bea", "billing-approvers"), person("bill", "billing-approvers")
    plan = send_invoice_plan(make_plan)
    decide(plan, bea)
    decide(plan, bill)
    assert fresh(plan).status == PlanStatus.APPROVED
    deactivate(bea)
    assert execute(plan) == "skipped:refused"
    plan = fresh(plan)
    assert plan.status == PlanStatus.REFUSED
    assert plan.outcome_detail == (
        "refused before sending: an approval no longer counts (its maker is deactivated), "
        "and the others do not decide the plan; the agent must propose again"
    )
    assert upstream.writes() == []
    assert voided(plan) == [
        {
            "actor": "system:executor",
            "approval": str(plan.approvals.get(reviewer=bea).pk),
            "reviewer": "user:bea",
            "reason": "deactivated",
        }
    ]
    refused = AuditEvent.objects.get(plan_id=plan.id, kind="execution.refused")
    assert "no longer counts" in refused.data["reason"]
    # Nobody is named to the agent: groups and counts, never people.
    assert "bea" not in plan.outcome_detail


def memo_plan(make_plan, memo: str):
    return make_plan("update_invoice_memo", {"invoice_id": "inv-2001", "memo": memo})


def test_removed_from_the_group_after_approving_no_longer_counts(
    make_plan, catalog, decide, execute, upstream
):
    rules(update_invoice_memo=[("billing-approvers", 2)])
    bea, bill, bob = (person(n, "billing-approvers") for n in ("bea", "bill", "bob"))
    billing = Group.objects.get(name="billing-approvers")
    plan = memo_plan(make_plan, "first")
    decide(plan, bea)
    bea.groups.remove(billing)  # as the groups claim at her next sign-in would
    decide(plan, bill)
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    assert [v["reason"] for v in voided(plan)] == ["no longer a member of billing-approvers"]
    # Back in the group before the plan was decided: her approval counts again.
    bea.groups.add(billing)
    assert plan_requirement_answer(fresh(plan))["met"] is True
    decide(plan, bob)
    assert fresh(plan).status == PlanStatus.APPROVED
    # Out again before the claim: two of the three still decide it, and it runs.
    bea.groups.remove(billing)
    assert execute(plan) == PlanStatus.COMPLETED
    assert len(upstream.writes()) == 1

    # Removed after the approval that decided it, with no one to spare: not sent.
    other = memo_plan(make_plan, "second")
    decide(other, bob)
    decide(other, bill)
    assert fresh(other).status == PlanStatus.APPROVED
    bill.groups.remove(billing)
    assert execute(other) == "skipped:refused"
    assert fresh(other).outcome_detail == (
        "refused before sending: an approval no longer counts (its maker is no longer a "
        "member of billing-approvers), and the others do not decide the plan; the agent "
        "must propose again"
    )
    assert len(upstream.writes()) == 1


def test_a_member_of_another_group_it_was_recorded_for_still_counts(
    make_plan, catalog, decide, execute, upstream
):
    """Any of billing or finance: Fay approved as a member of both; out of billing, she
    still counts for finance."""
    load_rules(
        {
            "groups": ["billing-approvers", "finance-leads"],
            "rules": {
                "invoices": {
                    "match": {"actions": ["send_invoice"]},
                    "any_of": [
                        {"group": "billing-approvers", "count": 1},
                        {"group": "finance-leads", "count": 1},
                    ],
                }
            },
        }
    )
    fay = person("fay", "billing-approvers", "finance-leads")
    plan = send_invoice_plan(make_plan)
    decide(plan, fay)
    fay.groups.remove(Group.objects.get(name="billing-approvers"))
    assert execute(plan) == PlanStatus.COMPLETED
    assert voided(plan) == []


def test_a_session_grants_maker_deactivated_stops_its_plans(
    make_plan, agent, catalog, reviewer, execute, upstream
):
    """The same rule for the standing consent of a grant, by the worker."""
    grant_create(
        creator=reviewer, agent=agent, action_names=["update_invoice_memo"], duration_seconds=600
    )
    plan = memo_plan(make_plan, "under a grant")
    assert plan.status == PlanStatus.APPROVED and plan.policy["mode"] == "session_grant"
    deactivate(reviewer)
    assert execute(plan) == "skipped:refused"
    assert "its maker is deactivated" in fresh(plan).outcome_detail
    assert upstream.writes() == []
    assert [v["reason"] for v in voided(plan)] == ["deactivated"]


def test_a_break_glass_approval_by_someone_no_longer_a_superuser_stops_the_plan(
    make_plan, catalog, decide, execute, upstream
):
    rules(send_invoice=[("billing-approvers", 1)])
    person("bea", "billing-approvers")
    root = person("root", superuser=True)
    plan = send_invoice_plan(make_plan)
    decide(plan, root, break_glass=True, comment="billing is out today")
    assert fresh(plan).status == PlanStatus.APPROVED
    type(root).objects.filter(pk=root.pk).update(is_superuser=False)
    assert execute(plan) == "skipped:refused"
    assert "no longer a superuser" in fresh(plan).outcome_detail
    assert [v.get("break_glass") for v in voided(plan)] == [True]
    assert upstream.writes() == []


def test_the_queue_counts_only_approvals_that_still_count(client, make_plan, catalog, decide):
    rules(delete_contact=[("support-leads", 1), ("billing-approvers", 1)])
    leo, bea = person("leo", "support-leads"), person("bea", "billing-approvers")
    person("lena", "support-leads")
    deletion = make_plan("delete_contact", DELETE)
    decide(deletion, leo)
    client.force_login(bea)

    def needed() -> str:
        page = client.get(reverse("approvals:queue")).content.decode()
        row = page.split(f'data-plan-id="{deletion.id}"')[1].split("</tr>")[0]
        cell = row.split('data-testid="needed"')[1]
        return cell.split(">", 1)[1].split("</td>")[0]

    assert needed() == "1 of billing-approvers"
    deactivate(leo)
    assert needed() == "1 of billing-approvers and 1 of support-leads"


def test_ordinary_plans_still_run(make_plan, reviewer, decide, execute, upstream):
    plan = make_plan()
    decide(plan, reviewer)
    assert execute(plan) == PlanStatus.COMPLETED
    assert voided(plan) == [] and len(upstream.writes()) == 1
