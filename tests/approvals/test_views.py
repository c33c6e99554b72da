"""The reviewer pages: queue (filters, search, sort, keyset pages, the poll keeping its
place), plan page (word diff, countdown, expiry), preview-again and edit revisions."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from actions.lib.models import AuditEvent
from approvals.models import Plan, PlanStatus
from approvals.views.dashboard import OUTCOME_GROUPS
from tests.conftest import ROOT

LONG_MEMO_BEFORE = (
    "Thank you for your business. Payment is due within thirty days of the invoice date."
)
LONG_MEMO_AFTER = (
    "Thank you for your order. Payment is due within fourteen days of the <b>invoice</b> date."
)


@pytest.fixture
def rita(client, reviewer):
    client.force_login(reviewer)
    return client


@pytest.fixture
def oscar(client, outsider):
    client.force_login(outsider)
    return client


def codes(response) -> list[str]:
    return re.findall(r'data-plan-id="([0-9a-f-]{36})"', response.content.decode())


def stale(plan: Plan) -> Plan:
    """As the executor leaves it after a failed revalidation (its path is tested elsewhere)."""
    Plan.objects.filter(id=plan.id).update(status=PlanStatus.STALE, outcome_detail="stale")
    plan.refresh_from_db()
    return plan


# --- permissions ---------------------------------------------------------------------------


# Every page about one plan, with a request that would change something if it were let
# through (the fingerprint is the plan's own, so a decision would count).
PLAN_PAGES = [
    ("approvals:plan-detail", "get", {}),
    ("approvals:plan-edit", "get", {}),
    ("approvals:plan-edit", "post", {"input-contact_id": "c-1001", "input-email": "a@b.example"}),
    ("approvals:plan-decide", "post", {"decision": "approve"}),
    ("approvals:plan-revoke", "post", {}),
    ("approvals:plan-check", "post", {}),
    ("approvals:plan-resolve", "post", {"state": "completed", "note": "seen upstream"}),
    ("approvals:plan-preview-again", "post", {}),
]
PAGE_IDS = [f"{method}-{name.split(':')[1]}" for name, method, _ in PLAN_PAGES]


def request(client, name: str, method: str, data: dict, plan_id, **extra):
    url = reverse(name, args=[plan_id])
    return getattr(client, method)(url, data if method == "post" else None, **extra)


def footprint(plan: Plan) -> tuple:
    """What any of these requests could change: the plan, its decisions, revisions, audit."""
    plan.refresh_from_db()
    return (
        plan.status,
        plan.approvals.count(),
        Plan.objects.filter(revision_of=plan).count(),
        AuditEvent.objects.count(),
    )


@pytest.mark.parametrize("name,method,data", PLAN_PAGES, ids=PAGE_IDS)
def test_an_unknown_plan_is_404(rita, db, name, method, data):
    response = request(rita, name, method, {"fingerprint": "0" * 64, **data}, uuid.uuid4())
    assert response.status_code == 404
    assert AuditEvent.objects.count() == 0


@pytest.mark.parametrize(
    "name,data",
    [
        ("approvals:plan-resolve", {"state": "nonsense", "note": ""}),
        ("approvals:plan-decide", {"decision": "maybe"}),
    ],
)
def test_an_unknown_plan_is_404_even_when_the_input_is_refused_first(rita, db, name, data):
    """These services check the input before they look the plan up."""
    assert rita.post(reverse(name, args=[uuid.uuid4()]), data).status_code == 404


@pytest.mark.parametrize("name,method,data", PLAN_PAGES, ids=PAGE_IDS)
def test_outsiders_get_403_and_change_nothing(oscar, make_plan, name, method, data):
    plan = make_plan()
    before = footprint(plan)
    response = request(oscar, name, method, {"fingerprint": plan.fingerprint, **data}, plan.id)
    assert response.status_code == 403
    assert footprint(plan) == before


@pytest.mark.parametrize("name,method,data", PLAN_PAGES, ids=PAGE_IDS)
def test_anonymous_is_sent_to_log_in(client, make_plan, name, method, data):
    plan = make_plan()
    before = footprint(plan)
    response = request(client, name, method, {"fingerprint": plan.fingerprint, **data}, plan.id)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")
    assert footprint(plan) == before


@pytest.mark.parametrize(
    "name",
    ["approvals:queue", "approvals:audit", "approvals:dashboard", "approvals:grants"],
)
def test_the_other_pages_are_for_reviewers_only(client, outsider, name):
    response = client.get(reverse(name))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    client.force_login(outsider)
    assert client.get(reverse(name)).status_code == 403


@pytest.mark.parametrize(
    "name,status,data,message",
    [
        (
            "approvals:plan-decide",
            PlanStatus.DENIED,
            {"decision": "approve"},
            "this plan is denied and can no longer be decided",
        ),
        (
            "approvals:plan-revoke",
            PlanStatus.AWAITING_APPROVAL,
            {},
            "only an approved plan can be revoked; this one is awaiting_approval",
        ),
        (
            "approvals:plan-check",
            PlanStatus.AWAITING_APPROVAL,
            {},
            "only an unknown or pending outcome can be checked; this one is awaiting_approval",
        ),
        (
            "approvals:plan-resolve",
            PlanStatus.COMPLETED,
            {"state": "rejected", "note": "seen upstream"},
            "only an unknown outcome can be resolved; this one is completed",
        ),
        (
            "approvals:plan-preview-again",
            PlanStatus.COMPLETED,
            {},
            "only a stale plan, or one whose target changed since its preview, can be "
            "previewed again; this one is completed",
        ),
    ],
    ids=lambda v: v.split(":")[1] if isinstance(v, str) and ":" in v else None,
)
def test_a_plan_in_the_wrong_state_goes_back_to_its_page_with_the_reason(
    rita, make_plan, name, status, data, message
):
    plan = make_plan()
    Plan.objects.filter(id=plan.id).update(status=status)
    before = footprint(plan)
    response = rita.post(reverse(name, args=[plan.id]), {"fingerprint": plan.fingerprint, **data})
    assert response.status_code == 302 and response["Location"] == plan.get_absolute_url()
    page = rita.get(response["Location"]).content.decode()
    assert re.search(r'<li class="msg-error" role="status">([^<]*)</li>', page).group(1) == message
    assert footprint(plan) == before


@pytest.mark.parametrize(
    "status,forms",
    [
        (PlanStatus.AWAITING_APPROVAL, {"decide"}),
        (PlanStatus.APPROVED, {"revoke"}),
        (PlanStatus.PENDING, {"check"}),
        (PlanStatus.UNKNOWN, {"check", "resolve"}),
        (PlanStatus.STALE, {"preview-again"}),
        (PlanStatus.DENIED, set()),
        (PlanStatus.COMPLETED, set()),
    ],
)
def test_the_plan_page_offers_only_what_the_plans_state_allows(rita, make_plan, status, forms):
    plan = make_plan()
    Plan.objects.filter(id=plan.id).update(status=status)
    page = rita.get(plan.get_absolute_url())
    assert page.status_code == 200
    text = page.content.decode()
    assert (
        set(re.findall(rf'<form method="post" action="/plans/{plan.id}/([\w-]+)"', text)) == forms
    )
    assert (reverse("approvals:plan-edit", args=[plan.id]) in text) == ("decide" in forms)


def test_the_edit_page_of_a_decided_plan_offers_no_form(rita, make_plan):
    plan = make_plan()
    Plan.objects.filter(id=plan.id).update(status=PlanStatus.DENIED)
    page = rita.get(reverse("approvals:plan-edit", args=[plan.id]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "This plan is denied and can no longer be edited." in text
    assert 'name="input-email"' not in text


def test_resolving_an_unknown_outcome_through_the_page(rita, make_plan):
    plan = make_plan()
    Plan.objects.filter(id=plan.id).update(status=PlanStatus.UNKNOWN)
    url = reverse("approvals:plan-resolve", args=[plan.id])
    response = rita.post(url, {"state": "completed", "note": ""})
    assert response.status_code == 302 and response["Location"] == plan.get_absolute_url()
    assert "say what you found" in rita.get(response["Location"]).content.decode()
    plan.refresh_from_db()
    assert plan.status == PlanStatus.UNKNOWN

    response = rita.post(url, {"state": "completed", "note": "the CRM shows the new email"})
    assert response.status_code == 302
    assert "Resolution recorded." in rita.get(response["Location"]).content.decode()
    plan.refresh_from_db()
    assert plan.status == PlanStatus.COMPLETED
    event = AuditEvent.objects.get(plan=plan, kind="reconcile.resolved_by_person")
    assert event.actor == "user:rita" and event.data["note"] == "the CRM shows the new email"


def test_preview_again_only_allows_post(rita, make_plan):
    plan = stale(make_plan())
    assert rita.get(reverse("approvals:plan-preview-again", args=[plan.id])).status_code == 405
    assert not Plan.objects.filter(revision_of=plan).exists()


def test_edit_refuses_other_methods(rita, make_plan):
    plan = make_plan()
    assert rita.put(reverse("approvals:plan-edit", args=[plan.id])).status_code == 405


def test_posts_need_csrf(reviewer, make_plan):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    plan = stale(make_plan())
    assert client.post(reverse("approvals:plan-preview-again", args=[plan.id])).status_code == 403


# --- the queue --------------------------------------------------------------------------


def distinct_email(n: int) -> dict:
    """Input for one more plan: the same proposal again would be a repeat of the first
    (the same plan while it awaits a decision)."""
    return {"contact_id": "c-1001", "email": f"ada+{n}@new.example"}


def test_queue_lists_awaiting_plans_with_class_agent_target_and_approvals_needed(
    rita, make_plan, catalog
):
    plan = make_plan()
    delete = make_plan("delete_contact", {"contact_id": "c-1002"})
    decided = make_plan(input={"contact_id": "c-1001", "email": "ada+2@new.example"})
    Plan.objects.filter(id=decided.id).update(status=PlanStatus.DENIED)
    page = rita.get(reverse("approvals:queue"))
    assert page.status_code == 200
    text = page.content.decode()
    assert set(codes(page)) == {str(plan.id), str(delete.id)}
    assert "badge-irreversible" in text and "Irreversible" in text
    assert "/contacts/c-1001" in text and "test-agent" in text
    assert "data-expires-at=" in text
    row = re.search(rf'data-plan-id="{delete.id}".*?</tr>', text, re.S).group(0)
    assert 'data-testid="needed">2</td>' in row  # two distinct approvers (irreversible)


def test_queue_filters_by_class_agent_action_status_and_search(
    rita, make_plan, other_agent, catalog
):
    email = make_plan()
    memo = make_plan("update_invoice_memo", {"invoice_id": "inv-2001", "memo": "hi"})
    theirs = make_plan(
        "update_invoice_memo", {"invoice_id": "inv-2001", "memo": "x"}, by=other_agent[0]
    )
    denied = make_plan(input={"contact_id": "c-1001", "email": "ada+2@new.example"})
    Plan.objects.filter(id=denied.id).update(status=PlanStatus.DENIED)
    url = reverse("approvals:queue")

    def ids(**params):
        return set(codes(rita.get(url, params)))

    assert ids(action="update_invoice_memo") == {str(memo.id), str(theirs.id)}
    assert ids(agent="other-agent") == {str(theirs.id)}
    # A filter without a status means any status: decided plans are listed too.
    assert ids(cls="reversible") == {str(p.id) for p in (email, memo, theirs, denied)}
    assert ids(cls="reversible", status="awaiting_approval") == {
        str(email.id),
        str(memo.id),
        str(theirs.id),
    }
    assert ids(cls="irreversible") == set()
    assert ids(status="denied") == {str(denied.id)}
    assert ids(status="any") == {str(p.id) for p in (email, memo, theirs, denied)}
    assert ids(q="invoices/inv-2001") == {str(memo.id), str(theirs.id)}
    assert ids(q="contact's email") == {str(email.id), str(denied.id)}  # the action title


def test_queue_keyset_pages_are_stable_when_plans_arrive(rita, make_plan):
    plans = [make_plan(input=distinct_email(i)) for i in range(5)]
    newest_first = [str(p.id) for p in reversed(plans)]
    url = reverse("approvals:queue")
    first = rita.get(url, {"per_page": 2})
    assert codes(first) == newest_first[:2]
    next_url = re.search(r'href="([^"]+)" rel="next"', first.content.decode()).group(1)
    next_url = next_url.replace("&amp;", "&")
    assert "after=" in next_url and "per_page=2" in next_url
    make_plan(input=distinct_email(5))  # with OFFSET the second page would shift by one
    second = rita.get(url + next_url)
    assert codes(second) == newest_first[2:4]
    third_url = re.search(r'href="([^"]+)" rel="next"', second.content.decode()).group(1)
    third = rita.get(url + third_url.replace("&amp;", "&"))
    assert codes(third) == newest_first[4:]
    assert 'rel="next"' not in third.content.decode()
    assert 'rel="first"' in third.content.decode()


def test_queue_sorts_most_urgent_first(rita, make_plan):
    a, b, c = (make_plan(input=distinct_email(i)) for i in range(3))
    now = timezone.now()
    Plan.objects.filter(id=a.id).update(expires_at=now + timedelta(minutes=30))
    Plan.objects.filter(id=b.id).update(expires_at=now + timedelta(minutes=5))
    Plan.objects.filter(id=c.id).update(expires_at=now + timedelta(minutes=50))
    url = reverse("approvals:queue")
    page = rita.get(url, {"sort": "urgent", "per_page": 2})
    assert codes(page) == [str(b.id), str(a.id)]
    next_url = re.search(r'href="([^"]+)" rel="next"', page.content.decode()).group(1)
    assert codes(rita.get(url + next_url.replace("&amp;", "&"))) == [str(c.id)]
    # Expiring within ten minutes: a warning style and words, not colour alone.
    row = re.search(
        rf'<tr class="([^"]+)" data-plan-id="{b.id}".*?</tr>', page.content.decode(), re.S
    )
    assert "expiring-soon" in row.group(1) and "expires soon" in row.group(0)
    other = re.search(rf'<tr class="([^"]+)" data-plan-id="{a.id}"', page.content.decode())
    assert "expiring-soon" not in other.group(1)


def test_queue_poll_keeps_the_query_string_and_htmx_gets_the_fragment(rita, make_plan):
    make_plan()
    make_plan("update_invoice_memo", {"invoice_id": "inv-2001", "memo": "hi"})
    url = reverse("approvals:queue")
    page = rita.get(url, {"action": "update_invoice_memo", "per_page": "1"})
    text = page.content.decode()
    poll = re.search(r'<div id="queue" hx-get="([^"]+)"', text).group(1)
    assert "action=update_invoice_memo" in poll and "per_page=1" in poll
    fragment = rita.get(url, {"action": "update_invoice_memo"}, HTTP_HX_REQUEST="true")
    body = fragment.content.decode()
    assert "<html" not in body and 'id="queue"' not in body
    assert len(codes(fragment)) == 1
    assert fragment["Vary"] and "HX-Request" in fragment["Vary"]


def test_queue_ignores_a_garbled_cursor(rita, make_plan):
    make_plan()
    assert len(codes(rita.get(reverse("approvals:queue"), {"after": "nonsense"}))) == 1


def test_queue_get_changes_nothing(rita, make_plan):
    make_plan()
    events = AuditEvent.objects.count()
    rita.get(reverse("approvals:queue"), {"status": "any"})
    assert AuditEvent.objects.count() == events


# --- the plan page ------------------------------------------------------------------------


def test_long_text_gets_an_escaped_word_diff(rita, make_plan, upstream):
    upstream.mutate("/invoices/inv-2001", {"memo": LONG_MEMO_BEFORE})
    plan = make_plan("update_invoice_memo", {"invoice_id": "inv-2001", "memo": LONG_MEMO_AFTER})
    text = rita.get(plan.get_absolute_url()).content.decode()
    diff = re.search(r'<p class="word-diff"[^>]*>(.*?)</p>', text, re.S).group(1)
    assert "<del>business.</del><ins>order.</ins>" in diff
    assert "<del>thirty</del><ins>fourteen</ins>" in diff
    assert "&lt;b&gt;invoice&lt;/b&gt;" in diff and "<b>" not in diff


def test_short_values_get_no_word_diff(rita, make_plan):
    text = rita.get(make_plan().get_absolute_url()).content.decode()
    assert 'class="word-diff"' not in text


def test_plan_page_shows_a_countdown_and_loads_the_static_script(rita, make_plan):
    plan = make_plan()
    text = rita.get(plan.get_absolute_url()).content.decode()
    assert 'data-expires-at="' in text and 'data-testid="expires"' in text
    assert '<script src="/static/js/countdown.js"' in text
    assert "<script>" not in text and "onclick" not in text and "style=" not in text


def test_an_expired_plan_cannot_be_approved(rita, make_plan):
    plan = make_plan()
    Plan.objects.filter(id=plan.id).update(expires_at=timezone.now() - timedelta(seconds=1))
    text = rita.get(plan.get_absolute_url()).content.decode()
    assert "Expired: this plan can no longer be approved." in text
    assert "Approve " + plan.short_code not in text
    assert "Edit the input" not in text


# --- stale, then again -------------------------------------------------------------------


def test_preview_again_makes_a_linked_revision_and_shows_what_moved(
    rita, reviewer, make_plan, upstream, client, api_headers
):
    plan = stale(make_plan(reason="customer asked"))
    page = rita.get(plan.get_absolute_url()).content.decode()
    assert "Preview again" in page
    upstream.mutate("/contacts/c-1001", {"phone": "+1 555 0100"})

    response = rita.post(reverse("approvals:plan-preview-again", args=[plan.id]))
    revision = Plan.objects.get(revision_of=plan)
    assert response.status_code == 302 and response["Location"] == revision.get_absolute_url()
    assert revision.status == PlanStatus.AWAITING_APPROVAL
    assert (revision.agent_id, revision.action_id) == (plan.agent_id, plan.action_id)
    assert (revision.input, revision.reason) == (plan.input, plan.reason)
    assert revision.fingerprint != plan.fingerprint
    assert AuditEvent.objects.filter(kind="plan.revised", plan=revision, actor="user:rita").exists()

    text = rita.get(revision.get_absolute_url()).content.decode()
    moved = re.search(r'<table class="diff target-moved">.*?</table>', text, re.S).group(0)
    assert "/phone" in moved and "+1 555 0100" in moved
    assert "Same field changes as before" in text
    stale_page = rita.get(plan.get_absolute_url()).content.decode()
    assert "Preview again</button>" not in stale_page and "Superseded by plan" in stale_page

    # The agent's view of the original points to the revision.
    body = client.get(f"/api/v1/plans/{plan.id}", **api_headers).json()
    assert body["superseded_by"] == str(revision.id)
    assert client.get(f"/api/v1/plans/{revision.id}", **api_headers).json()["superseded_by"] is None

    # Only once, and only for stale plans.
    rita.post(reverse("approvals:plan-preview-again", args=[plan.id]))
    assert Plan.objects.filter(revision_of=plan).count() == 1


def test_preview_again_says_when_only_the_version_moved(rita, make_plan, upstream):
    plan = stale(make_plan())
    upstream.mutate("/contacts/c-1001", {})  # a touch: only the version moves
    rita.post(reverse("approvals:plan-preview-again", args=[plan.id]))
    revision = Plan.objects.get(revision_of=plan)
    text = rita.get(revision.get_absolute_url()).content.decode()
    assert "Same change as before: only the target's version moved." in text


def test_preview_again_refuses_an_awaiting_plan_whose_target_did_not_move(rita, make_plan):
    plan = make_plan()
    response = rita.post(reverse("approvals:plan-preview-again", args=[plan.id]), follow=True)
    assert "the target has not changed since this preview" in response.content.decode()
    assert not Plan.objects.filter(revision_of=plan).exists()
    plan.refresh_from_db()
    assert plan.status == PlanStatus.AWAITING_APPROVAL


# --- edit, then approve -----------------------------------------------------------------


def test_edit_form_has_one_field_per_input_property(rita, make_plan):
    plan = make_plan()
    text = rita.get(reverse("approvals:plan-edit", args=[plan.id])).content.decode()
    assert 'name="input-contact_id" value="c-1001"' in text
    assert 'name="input-email" value="ada@new.example"' in text


def test_edit_makes_a_revision_and_supersedes_the_original(rita, make_plan, client, api_headers):
    plan = make_plan(reason="customer asked")
    response = rita.post(
        reverse("approvals:plan-edit", args=[plan.id]),
        {"input-contact_id": "c-1001", "input-email": "ada@fixed.example"},
    )
    revision = Plan.objects.get(revision_of=plan)
    assert response.status_code == 302 and response["Location"] == revision.get_absolute_url()
    assert revision.input == {"contact_id": "c-1001", "email": "ada@fixed.example"}
    assert revision.agent_id == plan.agent_id and revision.reason == "customer asked"
    assert revision.status == PlanStatus.AWAITING_APPROVAL
    assert revision.fingerprint != plan.fingerprint
    plan.refresh_from_db()
    assert plan.status == PlanStatus.CANCELLED
    assert plan.outcome_detail == "superseded by a reviewer's edit"
    assert AuditEvent.objects.filter(kind="plan.superseded", plan=plan, actor="user:rita").exists()
    body = client.get(f"/api/v1/plans/{plan.id}", **api_headers).json()
    assert body["status"] == "cancelled" and body["superseded_by"] == str(revision.id)
    text = rita.get(revision.get_absolute_url()).content.decode()
    assert "The change differs from plan" in text and "A revision of plan" in text


def test_edit_is_validated_by_the_actions_schema(rita, make_plan):
    plan = make_plan()
    response = rita.post(
        reverse("approvals:plan-edit", args=[plan.id]),
        {"input-contact_id": "c-1001", "input-email": "x"},
    )
    assert response.status_code == 422
    assert 'aria-invalid="true"' in response.content.decode()
    assert not Plan.objects.filter(revision_of=plan).exists()
    plan.refresh_from_db()
    assert plan.status == PlanStatus.AWAITING_APPROVAL


def test_edit_is_held_to_the_agents_scope(rita, agent, make_plan):
    agent.attributes = {"workspace": "ws-blue"}
    agent.save(update_fields=["attributes"])
    plan = make_plan("update_contact_phone", {"contact_id": "c-1001", "phone": "+1 555 0101"})
    response = rita.post(
        reverse("approvals:plan-edit", args=[plan.id]),
        {"input-contact_id": "c-1003", "input-phone": "+1 555 0101"},  # ws-red
    )
    assert response.status_code == 422
    assert "another workspace" in response.content.decode()
    assert not Plan.objects.filter(revision_of=plan).exists()
    plan.refresh_from_db()
    assert plan.status == PlanStatus.AWAITING_APPROVAL


def test_edit_with_no_change_is_refused(rita, make_plan):
    plan = make_plan()
    response = rita.post(
        reverse("approvals:plan-edit", args=[plan.id]),
        {"input-contact_id": "c-1001", "input-email": "ada@new.example"},
    )
    assert response.status_code == 422 and "nothing was changed" in response.content.decode()


def test_a_decided_plan_cannot_be_edited(rita, make_plan):
    plan = make_plan()
    Plan.objects.filter(id=plan.id).update(status=PlanStatus.DENIED)
    response = rita.post(
        reverse("approvals:plan-edit", args=[plan.id]),
        {"input-contact_id": "c-1001", "input-email": "ada@fixed.example"},
    )
    assert response.status_code == 422
    assert not Plan.objects.filter(revision_of=plan).exists()


# --- the audit log ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["/plans/audit/", "/plans/audit/export.csv", "/plans/audit/export.jsonl"]
)
def test_audit_is_for_reviewers_only(oscar, url):
    assert oscar.get(url).status_code == 403


def test_audit_exports_only_allow_get(rita):
    assert rita.post("/plans/audit/export.csv").status_code == 405
    assert rita.get("/plans/audit/export.xml").status_code == 404


def test_audit_lists_every_event_and_filters(rita, make_plan, other_agent, reviewer):
    mine = make_plan()
    theirs = make_plan(
        "update_invoice_memo", {"invoice_id": "inv-2001", "memo": "x"}, by=other_agent[0]
    )
    rita.post(
        reverse("approvals:plan-decide", args=[mine.id]),
        {"decision": "deny", "fingerprint": mine.fingerprint},
    )

    def ids(**params):
        page = rita.get("/plans/audit/", params)
        assert page.status_code == 200
        return [int(i) for i in re.findall(r'data-event-id="(\d+)"', page.content.decode())]

    everything = list(AuditEvent.objects.order_by("-id").values_list("id", flat=True))
    assert ids() == everything
    by_plan = list(
        AuditEvent.objects.filter(plan=mine).order_by("-id").values_list("id", flat=True)
    )
    assert ids(plan=str(mine.id)) == by_plan
    assert ids(plan="not-a-uuid") == []
    assert set(ids(agent="other-agent")) == set(
        AuditEvent.objects.filter(plan=theirs).values_list("id", flat=True)
    )
    denied = AuditEvent.objects.get(kind="plan.denied")
    assert ids(actor="user:rita") == [denied.id]
    assert ids(kind="plan.denied") == [denied.id]
    later = (denied.at + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S")
    assert ids(since=later) == []
    assert ids(until=later) == everything


def test_audit_pages_by_keyset(rita, make_plan, monkeypatch):
    monkeypatch.setattr("approvals.views.audit.AUDIT_PAGE_SIZE", 2)
    for _ in range(3):
        make_plan()
    everything = list(
        AuditEvent.objects.filter(actor="agent:test-agent")
        .order_by("-id")
        .values_list("id", flat=True)
    )
    seen = []
    url = "/plans/audit/?actor=agent:test-agent"
    while url:
        page = rita.get(url).content.decode()
        seen += [int(i) for i in re.findall(r'data-event-id="(\d+)"', page)]
        found = re.search(r'href="([^"]+)" rel="next"', page)
        url = "/plans/audit/" + found.group(1).replace("&amp;", "&") if found else ""
    assert seen == everything and len(seen) == 3


def test_audit_exports_stream_csv_and_json_lines(rita, make_plan, agent):
    import csv
    import io
    import json

    plan = make_plan(reason='=HYPERLINK("http://evil")')
    response = rita.get("/plans/audit/export.jsonl", {"plan": str(plan.id)})
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "application/x-ndjson"
    assert "attachment" in response["Content-Disposition"]
    lines = [json.loads(x) for x in b"".join(response.streaming_content).decode().splitlines()]
    assert [x["kind"] for x in lines] == ["plan.proposed"]
    assert lines[0]["plan"] == str(plan.id) and lines[0]["actor"] == "agent:test-agent"

    response = rita.get("/plans/audit/export.csv", {"agent": "test-agent"})
    assert response.status_code == 200 and response.streaming
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0] == ["id", "at", "kind", "actor", "plan", "fingerprint", "data", "hash"]
    assert len(rows) == 1 + AuditEvent.objects.filter(plan=plan).count()
    assert all(not cell.startswith(("=", "+", "@")) for row in rows for cell in row)


# --- the dashboard ------------------------------------------------------------------------


def test_dashboard_is_for_reviewers_only(oscar):
    assert oscar.get("/plans/dashboard/").status_code == 403


def test_dashboard_counts_outcomes_decision_times_and_top_agents(rita, make_plan, other_agent):
    now = timezone.now()
    waiting = make_plan()
    denied = make_plan(input={"contact_id": "c-1001", "email": "ada+2@new.example"})
    done = make_plan("delete_contact", {"contact_id": "c-1002"})
    make_plan("update_invoice_memo", {"invoice_id": "inv-2001", "memo": "x"}, by=other_agent[0])
    old = make_plan(input={"contact_id": "c-1001", "email": "ada+3@new.example"})
    Plan.objects.filter(id=denied.id).update(
        status=PlanStatus.DENIED, decided_at=denied.created_at + timedelta(seconds=30)
    )
    Plan.objects.filter(id=done.id).update(
        status=PlanStatus.COMPLETED, decided_at=done.created_at + timedelta(seconds=90)
    )
    Plan.objects.filter(id=old.id).update(created_at=now - timedelta(days=20))
    page = rita.get("/plans/dashboard/")
    assert page.status_code == 200
    text = page.content.decode()
    assert re.search(r'data-testid="pending">(\d+)<', text).group(1) == "3"  # incl. the old one
    assert re.search(r'data-testid="total">(\d+)<', text).group(1) == "4"  # last 14 days
    assert re.search(r'data-testid="p50">([^<]+)<', text).group(1) == "30 s"
    assert re.search(r'data-testid="p90">([^<]+)<', text).group(1) == "90 s"
    reversible = re.search(r'<tr data-class="reversible">(.*?)</tr>', text, re.S).group(1)
    # completed, failed, denied, lapsed, open, total
    assert re.findall(r"<td>(\d+)</td>", reversible) == ["0", "0", "1", "0", "2", "3"]
    irreversible = re.search(r'<tr data-class="irreversible">(.*?)</tr>', text, re.S).group(1)
    assert re.findall(r"<td>(\d+)</td>", irreversible) == ["1", "0", "0", "0", "0", "1"]
    assert re.findall(r'data-testid="agent-count">(\d+)<', text) == ["3", "1"]
    assert '<rect class="seg seg-completed"' in text
    assert "<script>" not in text and "style=" not in text
    assert waiting.id  # still awaiting


def test_dashboard_says_how_long_audit_events_wait_to_be_sealed(rita, make_plan, sealer_key):
    from actions.lib.checkpoints import audit_seal

    def line():
        found = re.search(r'data-testid="audit-seal"([^>]*)>(.*?)</p>', _dashboard(rita), re.S)
        return found.group(1), " ".join(found.group(2).split())

    make_plan()
    attributes, text = line()
    assert text.startswith("The oldest audit event not yet sealed was written")
    assert "role=" not in attributes
    audit_seal()
    assert line()[1] == "Every audit event is sealed"
    # Nothing sealed for longer than a sealer ever takes: the alarm.
    AuditEvent.objects.create(at=timezone.now() - timedelta(seconds=90), kind="k", actor="a")
    attributes, text = line()
    assert 'role="alert"' in attributes and "written 90 s ago" in text
    assert "Is a worker with the audit signing key running?" in text


def _dashboard(client) -> str:
    return client.get("/plans/dashboard/").content.decode()


def test_every_settled_state_is_in_one_dashboard_outcome_group():
    groups = [statuses for _, statuses in OUTCOME_GROUPS.values()]
    counted = [s for statuses in groups for s in statuses]
    assert len(counted) == len(set(counted)), "a state is counted twice"
    assert set(PlanStatus) == set(counted), "a state is never counted"


def test_audit_shows_short_codes_action_names_and_readable_data(rita, make_plan):
    plan = make_plan()
    page = rita.get("/plans/audit/", {"plan": str(plan.id)}).content.decode()
    row = re.search(r"<tr data-event-id.*?</tr>", page, re.S).group(0)
    assert f'<code data-testid="event-plan">{plan.short_code}</code>' in row
    assert "update_contact_email" in row
    assert "<dt>target</dt><dd>/contacts/c-1001</dd>" in row
    assert "<dt>action_version</dt><dd>1</dd>" in row
    assert "{&#x27;" not in row and str(plan.id)[:8] + "<" not in row  # no dict, no UUID prefix


def test_dashboard_labels_are_cut_at_a_word_with_the_full_label_as_a_tooltip(
    rita, make_plan, agent
):
    from approvals.views.dashboard import _short

    agent.attributes = {"workspace": "ws-blue"}
    agent.save(update_fields=["attributes"])
    assert _short("Update the phone number of one contact in the agent's workspace") == (
        "Update the phone number of…"
    )
    assert _short("Short title") == "Short title"
    assert _short("x" * 40) == "x" * 29 + "…"
    make_plan("update_contact_phone", {"contact_id": "c-1001", "phone": "+1 555 0101"})
    page = rita.get("/plans/dashboard/").content.decode()
    title = "Update the phone number of one contact in the agent&#x27;s workspace"
    assert f"<title>{title}</title>Update the phone number of…</text>" in page


def test_the_favicon_is_served_from_static(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == "/static/favicon.svg"
    assert (ROOT / "static" / "favicon.svg").read_text().startswith("<svg")
