"""Session grants: who may make them and for what, what they cover at submission (and
what they never cover), the cap under concurrency, revocation, the API's account of
how a plan was approved, and the grants page."""

from __future__ import annotations

import copy
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from actions.fingerprint import plan_fingerprint_matches
from actions.lib.dispatch import EXECUTE_PLAN, NOTIFY_PLAN, task_of
from actions.lib.exceptions import InvalidInput, InvalidTransition, NotAllowed
from actions.lib.models import AuditEvent
from approvals.grants import grant_create, grant_revoke
from approvals.models import Approval, Plan, PlanStatus, SessionGrant
from approvals.services import approval_record, plan_submit
from tests.conftest import demo_catalog_text

MEMO = "update_invoice_memo"


def memo(text: str = "hello", invoice: str = "inv-2001") -> dict:
    return {"invoice_id": invoice, "memo": text}


@pytest.fixture
def make_grant(reviewer, agent):
    def make(**kw) -> SessionGrant:
        args = {
            "creator": reviewer,
            "agent": agent,
            "action_names": [MEMO],
            "duration_seconds": 3600,
        }
        args.update(kw)
        return grant_create(**args)

    return make


def pointers(exc: InvalidInput) -> list[str]:
    return [e["pointer"] for e in exc.errors]


# --- making a grant ----------------------------------------------------------------------


def test_the_demo_catalog_has_two_grant_eligible_actions(catalog):
    """The reversible memo update, and the plain contact read; not the sensitive read,
    and not the reads that need no approval at all."""
    from approvals.grants import grant_eligible_actions

    assert [a.name for a in grant_eligible_actions()] == ["get_contact", MEMO]


@pytest.mark.parametrize(
    "action", ["update_contact_email", "send_invoice", "send_reminder", "delete_contact"]
)
def test_a_grant_for_an_ineligible_action_is_refused(make_grant, action):
    with pytest.raises(InvalidInput) as refused:
        make_grant(action_names=[MEMO, action])
    assert pointers(refused.value) == ["/actions/1"]
    assert "cannot run under a session grant" in refused.value.errors[0]["message"]
    assert not SessionGrant.objects.exists()


def test_the_duration_is_bounded(make_grant, settings):
    settings.COUNTERSIGN_GRANT_MAX_SECONDS = 3600
    for too_long_or_empty in (3601, 0, -5):
        with pytest.raises(InvalidInput) as refused:
            make_grant(duration_seconds=too_long_or_empty)
        assert pointers(refused.value) == ["/duration_seconds"]
    grant = make_grant(duration_seconds=3600)
    assert grant.expires_at - grant.created_at <= timedelta(seconds=3601)


def test_only_reviewers_make_or_revoke_grants(make_grant, outsider):
    with pytest.raises(NotAllowed):
        make_grant(creator=outsider)
    grant = make_grant()
    with pytest.raises(NotAllowed):
        grant_revoke(grant_id=grant.id, reviewer=outsider)
    assert SessionGrant.objects.get().revoked_at is None


def test_a_grant_only_covers_actions_the_agent_may_propose(catalog, make_grant):
    from actions.services import agent_create

    emailer, _ = agent_create(name="emailer", action_names=["update_contact_email"], active=True)
    with pytest.raises(InvalidInput) as refused:
        make_grant(agent=emailer)
    assert pointers(refused.value) == ["/actions/0"]


def test_fixed_values_must_be_inputs_of_the_action_and_valid(make_grant):
    with pytest.raises(InvalidInput) as refused:
        make_grant(fixed_values={"contact_id": "c-1001", "invoice_id": "not-an-invoice"})
    assert sorted(pointers(refused.value)) == [
        "/fixed_values/contact_id",
        "/fixed_values/invoice_id",
    ]
    with pytest.raises(InvalidInput):
        make_grant(fixed_values=["inv-2001"])
    with pytest.raises(InvalidInput) as refused:
        make_grant(max_executions=0)
    assert pointers(refused.value) == ["/max_executions"]


def test_making_and_revoking_are_audited(make_grant, reviewer):
    grant = make_grant(max_executions=3, fixed_values={"invoice_id": "inv-2001"}, reason="batch")
    created = AuditEvent.objects.get(kind="grant.created")
    assert created.actor == "user:rita"
    assert created.data["grant"] == str(grant.id)
    assert created.data["actions"] == [MEMO]
    assert created.data["max_executions"] == 3
    assert created.data["fixed_values"] == {"invoice_id": "inv-2001"}
    grant_revoke(grant_id=grant.id, reviewer=reviewer)
    revoked = AuditEvent.objects.get(kind="grant.revoked")
    assert revoked.data["grant"] == str(grant.id)
    with pytest.raises(InvalidTransition):
        grant_revoke(grant_id=grant.id, reviewer=reviewer)


# --- what a grant covers -----------------------------------------------------------------------


def test_a_covered_plan_is_approved_by_the_grant(
    make_grant, make_plan, reviewer, django_capture_on_commit_callbacks
):
    grant = make_grant()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        plan = make_plan(MEMO, memo())
    plan = Plan.objects.get(pk=plan.pk)
    assert plan.status == PlanStatus.APPROVED
    # The grant is part of what was fingerprinted: the approval binds to it.
    assert plan.policy["mode"] == "session_grant"
    assert plan.policy["grant"] == str(grant.id)
    assert '"mode":"session_grant"' in plan.canonical
    assert plan_fingerprint_matches(plan)
    [approval] = plan.approvals.all()
    assert approval.grant_id == grant.id
    assert approval.reviewer == reviewer
    assert approval.decision == "approve" and approval.fingerprint == plan.fingerprint
    kinds = list(AuditEvent.objects.filter(plan=plan).values_list("kind", "actor"))
    assert kinds == [
        ("plan.proposed", "agent:test-agent"),
        ("approval.granted", f"grant:{grant.id}"),
        ("plan.approved", f"grant:{grant.id}"),
    ]
    granted = AuditEvent.objects.get(kind="approval.granted")
    assert granted.data["grant"] == str(grant.id) and granted.data["granted_by"] == "user:rita"
    # The worker is woken, and nobody is told the plan awaits a decision.
    tasks = [task_of(callback) for callback in callbacks]
    assert EXECUTE_PLAN in tasks
    assert NOTIFY_PLAN not in tasks


def test_the_same_input_without_a_grant_has_another_fingerprint(make_grant, make_plan):
    per_call = make_plan(MEMO, memo())
    make_grant()
    granted = make_plan(MEMO, memo())
    assert per_call.policy["mode"] == "per_call"
    assert per_call.fingerprint != granted.fingerprint


def test_a_plan_differing_on_a_fixed_value_awaits_a_decision(make_grant, make_plan):
    make_grant(fixed_values={"invoice_id": "inv-2001"})
    other = make_plan(MEMO, memo(invoice="inv-2002"))
    assert other.status == PlanStatus.AWAITING_APPROVAL
    assert other.policy["mode"] == "per_call" and "grant" not in other.policy
    assert not other.approvals.exists()
    assert make_plan(MEMO, memo(invoice="inv-2001")).status == PlanStatus.APPROVED


def test_once_the_cap_is_reached_plans_await_a_decision(make_grant, make_plan):
    grant = make_grant(max_executions=2)
    statuses = [make_plan(MEMO, memo(f"n{i}")).status for i in range(3)]
    assert statuses == [PlanStatus.APPROVED, PlanStatus.APPROVED, PlanStatus.AWAITING_APPROVAL]
    assert Approval.objects.filter(grant=grant).count() == 2


def test_another_agent_is_not_covered(make_grant, make_plan, other_agent):
    make_grant()
    theirs = make_plan(MEMO, memo(), by=other_agent[0])
    assert theirs.status == PlanStatus.AWAITING_APPROVAL


def test_an_action_outside_the_grant_is_not_covered(make_grant, make_plan):
    make_grant()
    plan = make_plan()  # update_contact_email
    assert plan.status == PlanStatus.AWAITING_APPROVAL


def test_revoked_or_expired_grants_cover_nothing_new(make_grant, make_plan, reviewer):
    revoked = make_grant()
    grant_revoke(grant_id=revoked.id, reviewer=reviewer)
    assert make_plan(MEMO, memo()).status == PlanStatus.AWAITING_APPROVAL
    expired = make_grant()
    SessionGrant.objects.filter(pk=expired.pk).update(expires_at=timezone.now())
    assert make_plan(MEMO, memo()).status == PlanStatus.AWAITING_APPROVAL


def test_plans_needing_two_approvers_are_never_covered(make_grant, make_plan, upstream):
    """An action whose definition later asks for two approvers: the grant made while it
    needed one covers none of its plans, and two people must still approve."""
    from actions.catalog import load_catalog

    make_grant()
    text = demo_catalog_text().replace(
        "approval: {session_grant: true}", "approval: {session_grant: true, approvers: 2}"
    )
    load_catalog(text, base_urls={"demo": upstream.url})
    plan = make_plan(MEMO, memo())
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert plan.required_approvals == 2


def test_a_reviewers_revision_goes_to_a_person(make_grant, make_plan, reviewer):
    from approvals.services import plan_edit

    plan = make_plan(MEMO, memo(invoice="inv-2002"))
    make_grant()
    revision = plan_edit(plan_id=plan.id, reviewer=reviewer, input=memo("edited"))
    assert revision.status == PlanStatus.AWAITING_APPROVAL
    assert revision.policy["mode"] == "per_call"


def test_a_grant_approved_plan_cannot_be_decided_again(make_grant, make_plan, second_reviewer):
    make_grant()
    plan = make_plan(MEMO, memo())
    with pytest.raises(InvalidTransition):
        approval_record(
            plan_id=plan.id,
            reviewer=second_reviewer,
            decision="deny",
            fingerprint_seen=plan.fingerprint,
        )


def test_the_cap_holds_under_concurrent_submissions(
    transactional_db, catalog, agent, reviewer, upstream, monkeypatch
):
    """Two submissions at the same moment against a cap of one: the row lock on the grant
    makes exactly one of them approved."""
    monkeypatch.setattr("actions.lib.dispatch.publish", lambda *a, **k: None)
    grant = grant_create(
        creator=reviewer,
        agent=agent,
        action_names=[MEMO],
        duration_seconds=600,
        max_executions=1,
    )
    barrier = threading.Barrier(4)
    statuses: list[str] = []
    errors: list[BaseException] = []

    def submit(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            plan, _ = plan_submit(agent=agent, action_name=MEMO, input=memo(f"race {i}"))
            statuses.append(plan.status)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert sorted(statuses) == ["approved"] + ["awaiting_approval"] * 3
    assert Approval.objects.filter(grant=grant).count() == 1


# --- the agent's view ------------------------------------------------------------------------


def test_the_api_says_how_a_plan_was_approved(
    client, api_headers, make_grant, make_plan, reviewer, django_capture_on_commit_callbacks
):
    grant = make_grant()
    response = client.post(
        "/api/v1/plans",
        {"action": MEMO, "input": memo()},
        content_type="application/json",
        **api_headers,
    )
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "approved"
    assert body["approved_by"] == "session_grant" and body["grant_id"] == str(grant.id)

    plan = make_plan()
    body = client.get(f"/api/v1/plans/{plan.id}", **api_headers).json()
    assert body["approved_by"] is None and body["grant_id"] is None
    with django_capture_on_commit_callbacks(execute=False):
        approval_record(
            plan_id=plan.id,
            reviewer=reviewer,
            decision="approve",
            fingerprint_seen=plan.fingerprint,
        )
    body = client.get(f"/api/v1/plans/{plan.id}", **api_headers).json()
    assert body["approved_by"] == "reviewers" and body["grant_id"] is None


# --- the grants page -------------------------------------------------------------------------


@pytest.fixture
def rita(client, reviewer):
    client.force_login(reviewer)
    return client


def form(for_agent, **kw) -> dict:
    data = {"agent": str(for_agent.id), "actions": [MEMO], "duration": "30"}
    data.update(kw)
    return data


def test_the_page_lists_grants_and_offers_the_form(rita, make_grant, reviewer, agent):
    active = make_grant(reason="month-end memos")
    ended = make_grant()
    grant_revoke(grant_id=ended.id, reviewer=reviewer)
    response = rita.get(reverse("approvals:grants"))
    assert response.status_code == 200
    html = response.content.decode()
    assert f'data-grant-id="{active.id}"' in html and f'data-grant-id="{ended.id}"' in html
    assert "month-end memos" in html
    assert f'action="{reverse("approvals:grant-create")}"' in html
    assert f'action="{reverse("approvals:grant-revoke", args=[active.id])}"' in html
    # Only eligible actions are offered.
    assert f'value="{MEMO}"' in html and 'value="send_invoice"' not in html
    assert 'name="csrfmiddlewaretoken"' in html


def test_making_a_grant_through_the_page(rita, agent):
    response = rita.post(
        reverse("approvals:grant-create"),
        form(agent, max_executions="5", fixed_values='{"invoice_id": "inv-2001"}', reason="x"),
    )
    assert response.status_code == 302
    grant = SessionGrant.objects.get()
    assert grant.agent == agent and grant.max_executions == 5
    assert grant.fixed_values == {"invoice_id": "inv-2001"}
    assert [a.name for a in grant.actions.all()] == [MEMO]
    assert timedelta(minutes=29) < grant.expires_at - timezone.now() <= timedelta(minutes=30)


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"actions": ["send_invoice"]}, "cannot run under a session grant"),
        ({"duration": "100000"}, "at most"),
        ({"duration": "soon"}, "whole number"),
        ({"fixed_values": "{nope"}, "Not valid JSON"),
        ({"agent": "not-a-uuid"}, "Choose an agent"),
    ],
)
def test_the_page_explains_a_refused_grant(rita, agent, changes, message):
    response = rita.post(reverse("approvals:grant-create"), form(agent, **changes))
    assert response.status_code == 422
    assert message in response.content.decode()
    assert not SessionGrant.objects.exists()


def test_revoking_through_the_page(rita, make_grant):
    grant = make_grant()
    response = rita.post(reverse("approvals:grant-revoke", args=[grant.id]))
    assert response.status_code == 302
    grant.refresh_from_db()
    assert grant.revoked_at is not None and grant.revoked_by.username == "rita"


def test_revoking_an_unknown_grant_is_404(rita, db):
    import uuid

    assert rita.post(reverse("approvals:grant-revoke", args=[uuid.uuid4()])).status_code == 404
    assert not AuditEvent.objects.filter(kind="grant.revoked").exists()


def test_revoking_a_revoked_grant_goes_back_with_the_reason(rita, make_grant, reviewer):
    grant = make_grant()
    grant_revoke(grant_id=grant.id, reviewer=reviewer)
    portuguese = {"HTTP_ACCEPT_LANGUAGE": "pt-BR"}
    response = rita.post(reverse("approvals:grant-revoke", args=[grant.id]), **portuguese)
    assert response.status_code == 302 and response["Location"] == reverse("approvals:grants")
    page = rita.get(response["Location"], **portuguese).content.decode()
    # The service words it in the reader's language already: shown as it is.
    assert '<li class="msg-error" role="status">esta concessão já foi revogada</li>' in page
    assert AuditEvent.objects.filter(kind="grant.revoked").count() == 1


def test_get_never_changes_state(rita, make_grant, agent):
    grant = make_grant()
    assert rita.get(reverse("approvals:grant-revoke", args=[grant.id])).status_code == 405
    assert rita.get(reverse("approvals:grant-create"), form(agent)).status_code == 405
    assert SessionGrant.objects.get().revoked_at is None
    assert SessionGrant.objects.count() == 1


@pytest.mark.parametrize("who", ["anonymous", "agent", "outsider"])
def test_nobody_else_sees_or_changes_grants(client, who, outsider, api_headers, make_grant, agent):
    grant = make_grant()
    headers = api_headers if who == "agent" else {}
    if who == "outsider":
        client.force_login(outsider)
    expected = 403 if who == "outsider" else 302
    page = client.get(reverse("approvals:grants"), **headers)
    assert page.status_code == expected
    assert str(grant.id) not in page.content.decode()
    made = client.post(reverse("approvals:grant-create"), form(agent), **headers)
    revoked = client.post(reverse("approvals:grant-revoke", args=[grant.id]), **headers)
    assert (made.status_code, revoked.status_code) == (expected, expected)
    if expected == 302:
        assert made["Location"].startswith(reverse("login"))
    assert SessionGrant.objects.count() == 1
    assert SessionGrant.objects.get().revoked_at is None


def test_the_page_costs_the_same_queries_for_one_grant_or_many(rita, make_grant):
    make_grant()
    with CaptureQueriesContext(connection) as one:
        assert rita.get(reverse("approvals:grants")).status_code == 200
    for _ in range(5):
        make_grant(max_executions=2)
    with CaptureQueriesContext(connection) as many:
        assert rita.get(reverse("approvals:grants")).status_code == 200
    assert len(many) == len(one)


def test_the_plan_page_says_a_grant_approved_it(rita, make_grant, make_plan):
    grant = make_grant()
    plan = make_plan(MEMO, memo())
    html = rita.get(plan.get_absolute_url()).content.decode()
    assert 'data-testid="approved-by-grant"' in html
    assert f"#grant-{grant.id}" in html
    per_call = make_plan()
    html = rita.get(per_call.get_absolute_url()).content.decode()
    assert 'data-testid="approved-by-grant"' not in html


def test_the_nav_links_to_the_grants_page(rita):
    html = rita.get(reverse("approvals:queue")).content.decode()
    assert f'href="{reverse("approvals:grants")}"' in html


def test_the_action_list_says_which_actions_a_grant_may_cover(client, api_headers):
    actions = {a["name"]: a for a in client.get("/api/v1/actions", **api_headers).json()}
    eligible = sorted(n for n, a in actions.items() if a["approval"]["session_grant_eligible"])
    assert eligible == ["get_contact", MEMO]


def test_fixed_values_are_checked_in_linear_time_whatever_the_pattern(make_grant, catalog):
    """A reviewer's fixed value is validated like an agent's input, by RE2: a pattern that
    backtracks catastrophically in Python's engine (~20 minutes for this value) answers
    at once."""
    from actions.catalog import action_define

    definition = copy.deepcopy(catalog[MEMO].definition)
    definition["input_schema"]["properties"]["invoice_id"]["pattern"] = "^(a+)+$"
    action_define(name=MEMO, definition=definition, actor="test")
    with pytest.raises(InvalidInput) as refused:
        make_grant(fixed_values={"invoice_id": "a" * 34 + "!"})
    assert pointers(refused.value) == ["/fixed_values/invoice_id"]
