"""What a team sees, read without a browser: "All plans" lists every plan whatever its
state, with who decided each (people, a policy, a session grant); the active view is
marked; the dashboard's shadow disagreements link to those plans; who must decide
comes before the decision, and a person who cannot decide is told which groups can;
the change is worded by the plan's state; the login page's first button signs in; and
the counts and times read as sentences ("1 plan", no "a.m..")."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from approvals.grants import grant_create
from approvals.models import Plan, PlanStatus
from approvals.selectors import plan_decided_by
from approvals.services import approval_record
from executors.services import execution_run
from tests.approvals.test_decision_rules import DELETE, demo_rules, load_rules, person

MEMO = {"invoice_id": "inv-2001", "memo": "paid by card"}
# Within the contact's own domain, not a VIP: the demo's routine-email policy approves it.
ROUTINE_EMAIL = {"contact_id": "c-1002", "email": "g.hopper@example.test"}


@pytest.fixture
def teams(catalog):
    """The demo's decision rules, a billing approver and a support lead."""
    load_rules(demo_rules())
    return {"bea": person("bea", "billing-approvers"), "leo": person("leo", "support-leads")}


@pytest.fixture
def rita(client, reviewer):
    client.force_login(reviewer)
    return client


def row_of(page: str, plan: Plan) -> str:
    return re.search(rf'data-plan-id="{plan.id}".*?</tr>', page, re.S).group(0)


def decided_by(page: str, plan: Plan) -> str:
    cell = re.search(r'data-testid="decided-by"[^>]*>(.*?)</td>', row_of(page, plan), re.S)
    return re.sub(r"<[^>]+>", "", cell.group(1))


def decide(plan: Plan, reviewer, decision: str = "approve") -> Plan:
    return approval_record(
        plan_id=plan.id, reviewer=reviewer, decision=decision, fingerprint_seen=plan.fingerprint
    )


def test_all_plans_lists_every_state_and_who_decided_each(
    rita, reviewer, second_reviewer, make_plan, agent, demo_policies, executor_key
):
    by_person = make_plan()
    decide(by_person, reviewer)
    assert execution_run(plan_id=by_person.id)
    by_policy = make_plan(input=ROUTINE_EMAIL)
    grant_create(
        creator=second_reviewer,
        agent=agent,
        action_names=["update_invoice_memo"],
        duration_seconds=600,
    )
    by_grant = make_plan("update_invoice_memo", MEMO)
    denied = make_plan(input={"contact_id": "c-1001", "email": "ada+2@new.example"})
    decide(denied, second_reviewer, "deny")
    waiting = make_plan(input={"contact_id": "c-1001", "email": "ada+3@new.example"})
    states = {p.id: Plan.objects.get(id=p.id).status for p in (by_person, by_policy, by_grant)}
    assert states == {
        by_person.id: PlanStatus.COMPLETED,
        by_policy.id: PlanStatus.APPROVED,
        by_grant.id: PlanStatus.APPROVED,
    }

    response = rita.get(reverse("approvals:queue"), {"view": "all"})
    page = response.content.decode()
    # Every plan, not only those awaiting a decision; the status filter is there, on "any".
    listed = set(re.findall(r'data-plan-id="([0-9a-f-]{36})"', page))
    assert listed == {str(p.id) for p in (by_person, by_policy, by_grant, denied, waiting)}
    assert re.search(r'<option value="any" selected>', page)
    assert decided_by(page, by_person) == "rita"
    assert decided_by(page, by_policy).split() == ["policy", "routine-email"]
    assert decided_by(page, by_grant).startswith("session grant ")
    assert decided_by(page, denied) == "sam"
    assert decided_by(page, waiting) == "—"
    # A status asked for still filters.
    awaiting = rita.get(reverse("approvals:queue"), {"view": "all", "status": "awaiting_approval"})
    assert set(re.findall(r'data-plan-id="([0-9a-f-]{36})"', awaiting.content.decode())) == {
        str(waiting.id)
    }


def test_break_glass_is_named_among_who_decided(client, make_plan, teams):
    root = person("root", superuser=True)
    deletion = make_plan("delete_contact", DELETE)
    approval_record(
        plan_id=deletion.id,
        reviewer=root,
        decision="approve",
        fingerprint_seen=deletion.fingerprint,
        break_glass=True,
        comment="support is away; the customer asked twice",
    )
    decide(deletion, teams["bea"])
    client.force_login(root)
    page = client.get(reverse("approvals:queue"), {"view": "all"}).content.decode()
    assert decided_by(page, deletion) == "root (break-glass), bea"


def test_the_active_view_is_marked(rita, make_plan):
    make_plan()
    url = reverse("approvals:queue")
    mine = rita.get(url).content.decode()
    assert re.search(r'data-testid="view-mine" aria-current="page"', mine)
    assert not re.search(r'data-testid="view-all" aria-current', mine)
    every = rita.get(url, {"view": "all"}).content.decode()
    assert re.search(r'data-testid="view-all" aria-current="page"', every)
    assert not re.search(r'data-testid="view-mine" aria-current', every)
    # Who decided is a column of every plan; what is mine to decide is undecided.
    assert 'data-testid="decided-by"' in every and 'data-testid="decided-by"' not in mine


def test_the_dashboard_links_shadow_disagreements_to_those_plans(rita, make_plan):
    disagreed = make_plan()
    agreed = make_plan(input={"contact_id": "c-1001", "email": "ada+2@new.example"})
    make_plan(input={"contact_id": "c-1001", "email": "ada+3@new.example"})
    Plan.objects.filter(id=disagreed.id).update(
        shadow={"outcome": "approve"}, status=PlanStatus.DENIED
    )
    Plan.objects.filter(id=agreed.id).update(shadow={"outcome": "review"})
    page = rita.get(reverse("approvals:dashboard")).content.decode()
    assert re.search(r'data-testid="shadow-disagreements">1<', page)
    link = re.search(r'href="([^"]+)" data-testid="shadow-disagreements-link"', page)
    listed = rita.get(link.group(1).replace("&amp;", "&")).content.decode()
    assert set(re.findall(r'data-plan-id="([0-9a-f-]{36})"', listed)) == {str(disagreed.id)}
    assert 'data-testid="shadow-filter"' in listed  # the filter is said, and can be left
    # None: a count with no link.
    Plan.objects.filter(id=disagreed.id).update(shadow={})
    page = rita.get(reverse("approvals:dashboard")).content.decode()
    assert 'data-testid="shadow-disagreements-link"' not in page


def test_the_dashboard_counts_one_plan_in_the_singular(rita, make_plan):
    make_plan()
    page = rita.get(reverse("approvals:dashboard")).content.decode()
    assert re.search(r'data-testid="total">1</strong> plan proposed', page)
    make_plan(input={"contact_id": "c-1001", "email": "ada+2@new.example"})
    page = rita.get(reverse("approvals:dashboard")).content.decode()
    assert re.search(r'data-testid="total">2</strong> plans proposed', page)


def test_who_decides_comes_before_the_decision_and_names_the_groups(
    client,
    make_plan,
    teams,
):
    deletion = make_plan("delete_contact", DELETE)
    url = reverse("approvals:plan-detail", args=[deletion.id])
    client.force_login(teams["leo"])
    page = client.get(url).content.decode()
    assert page.index('data-testid="requirement"') < page.index('id="decide-form"')
    assert page.index('data-testid="requirement"') < page.index('id="changes-title"')
    assert 'data-testid="cannot-decide"' not in page
    # Someone outside both groups who may see every plan is told which groups decide it.
    outside = person("olga")
    outside.user_permissions.add(Permission.objects.get(codename="view_plan"))
    client.force_login(outside)
    page = client.get(url).content.decode()
    needed = re.search(r'data-testid="needed-groups">(.*?)</span>', page, re.S).group(1)
    assert "billing-approvers, support-leads" in needed
    assert 'id="decide-form"' not in page


def test_the_live_refresh_carries_who_decides_along(client, make_plan, teams):
    deletion = make_plan("delete_contact", DELETE)
    decide(deletion, teams["leo"])
    client.force_login(teams["bea"])
    url = reverse("approvals:plan-detail", args=[deletion.id])
    fragment = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    block = re.search(r'<div class="requirement" id="who-decides"[^>]*>', fragment).group(0)
    assert 'hx-swap-oob="true"' in block
    assert "1 of support-leads: 1 of 1" in fragment


@pytest.mark.parametrize(
    "status,heading",
    [
        (PlanStatus.AWAITING_APPROVAL, "What would change"),
        (PlanStatus.APPROVED, "What would change"),
        (PlanStatus.COMPLETED, "What changed"),
        (PlanStatus.DENIED, "What was planned"),
        (PlanStatus.UNKNOWN, "What was planned"),
    ],
)
def test_the_change_is_worded_by_the_plans_state(rita, make_plan, status, heading):
    plan = make_plan()
    Plan.objects.filter(id=plan.id).update(status=status)
    page = rita.get(plan.get_absolute_url()).content.decode()
    assert re.search(rf'data-testid="changes-title">{heading}</h2>', page)


def test_a_completed_deletion_says_the_target_was_deleted(rita, make_plan):
    plan = make_plan("delete_contact", {"contact_id": "c-1002"})
    Plan.objects.filter(id=plan.id).update(status=PlanStatus.COMPLETED)
    page = rita.get(plan.get_absolute_url()).content.decode()
    assert "The target was <strong>deleted</strong>, with everything it held:" in page
    assert "will be <strong>deleted</strong>" not in page


def test_the_login_pages_first_button_signs_in(client, db):
    page = client.get(reverse("login")).content.decode()
    first_submit = re.search(r"<button[^>]*type=\"submit\"[^>]*>(.*?)</button>", page, re.S)
    assert first_submit.group(1) == "Log in"
    # The language switcher is still on the page, after the content.
    assert page.index('data-testid="language-switcher"') > page.index("</main>")


def test_a_grants_confirmation_has_no_double_period(rita, agent, catalog):
    response = rita.post(
        reverse("approvals:grant-create"),
        {
            "agent": str(agent.id),
            "actions": ["update_invoice_memo"],
            "duration": "30",
        },
        follow=True,
    )
    [message] = [str(m) for m in response.context["messages"]]
    assert message.startswith("Session grant made for agent test-agent (until ")
    assert ".." not in message and message.endswith(").")


def test_a_plain_read_that_needs_no_decision_is_decided_by_no_one():
    # The mode is in the plan's fingerprinted policy (an action with ``approval: none``).
    read = Plan(policy={"mode": "none"}, status=PlanStatus.COMPLETED, decided_at=timezone.now())
    assert plan_decided_by(read, []) == {"by": "no_one"}
    undecided = Plan(policy={"mode": "per_call"}, status=PlanStatus.AWAITING_APPROVAL)
    assert plan_decided_by(undecided, []) is None
