"""The plan page as a decision surface: the summary line, the change as rows, the
confirmation that scales with risk (and holds without JavaScript), freshness before
approving, plans on the same target, the live box that stays quiet while nothing moves."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from django.urls import reverse

from actions.lib.models import AuditEvent
from approvals.models import Approval, Plan, PlanStatus
from tests.conftest import READ_TOKEN, WRITE_TOKEN

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def rita(client, reviewer):
    client.force_login(reviewer)
    return client


def page_of(client, plan: Plan, **extra) -> str:
    response = client.get(plan.get_absolute_url(), **extra)
    assert response.status_code == 200
    return response.content.decode()


def summary_line(page: str) -> str:
    line = re.search(r'<h1 id="summary-line"[^>]*>(.*?)</h1>', page, re.S).group(1)
    return " ".join(re.sub(r"<[^>]+>", "", line).split())


def decide(client, plan: Plan, decision: str = "approve", **data):
    url = reverse("approvals:plan-decide", args=[plan.id])
    return client.post(url, {"decision": decision, "fingerprint": plan.fingerprint, **data})


def errors(client, response) -> list[str]:
    assert response.status_code == 302
    page = client.get(response["Location"]).content.decode()
    return re.findall(r'<li class="msg-error" role="status">([^<]*)</li>', page)


# --- what the reviewer reads first ------------------------------------------------------


def test_the_summary_line_names_the_change_and_the_title_says_the_same(rita, make_plan):
    plan = make_plan("delete_contact", {"contact_id": "c-1002"})
    page = page_of(rita, plan)
    line = summary_line(page)
    assert re.fullmatch(
        r"DELETE demo /contacts/c-1002 · Grace Hopper · irreversible · 0 of 2 · "
        r"expires in 59 minutes",
        line,
    ), line
    title = " ".join(re.search(r"<title>(.*?)</title>", page, re.S).group(1).split())
    assert title == line + " · Countersign"
    # The summary line comes before the change, the change before the decision, and the
    # card, the precondition and the exact request after it, collapsed.
    order = [
        page.index('id="summary-line"'),
        page.index('class="changes"'),
        page.index('data-testid="decision-bar"'),
        page.index('<details class="card">'),
        page.index('<details class="precondition">'),
        page.index('<details class="request">'),
    ]
    assert order == sorted(order)


def test_an_update_shows_the_changed_field_and_the_rest_collapsed(rita, make_plan):
    page = page_of(rita, make_plan())
    changed = re.search(r'<table class="diff">.*?</table>', page, re.S).group(0)
    assert re.findall(r"<code>(/[a-z_]+)</code>", changed) == ["/email"]
    assert "ada@example.test" in changed and "ada@new.example" in changed
    unchanged = re.search(r'<details class="unchanged".*?</details>', page, re.S).group(0)
    assert "6 unchanged fields" in unchanged  # id, name, phone, tags, version, workspace
    assert "Ada Lovelace" in unchanged and "/email" not in unchanged
    assert '<details class="unchanged" data-testid="unchanged">' in page  # closed


def test_send_invoice_shows_the_customer_and_the_amount(rita, make_plan):
    page = page_of(rita, make_plan("send_invoice", {"invoice_id": "inv-2001"}))
    assert "cus-77, 120.00 EUR" in summary_line(page)
    assert ">Send invoice inv-2001</button>" in page  # the effect, named
    assert "Approve " not in re.search(r'<div class="buttons">.*?</div>', page, re.S).group(0)


def test_creates_and_deletes_are_field_tables_not_a_json_blob(rita, make_plan):
    create = make_plan(
        "create_contact",
        {"contact_id": "c-1009", "name": "Kate", "email": "k@j.example", "workspace": "ws-red"},
    )
    page = page_of(rita, create)
    table = re.search(r'<table class="diff fields added">.*?</table>', page, re.S).group(0)
    assert re.findall(r"<code>(/[a-z_]+)</code>", table) == ["/email", "/id", "/name", "/workspace"]
    assert "<code>/</code>" not in page and "{" not in table
    delete = page_of(rita, make_plan("delete_contact", {"contact_id": "c-1002"}))
    table = re.search(r'<table class="diff fields removed">.*?</table>', delete, re.S).group(0)
    assert "Grace Hopper" in table and "<code>/phone</code>" in table


def test_an_invoke_shows_its_message_rendered_and_sanitized_with_its_recipients(rita, make_plan):
    message = "Hello **Ada**. <script>alert(1)</script><img src=x onerror=alert(1)>"
    plan = make_plan(
        "send_reminder",
        {
            "customer_id": "cus-77",
            "channel": "sms",
            "send_at": "2030-01-01T09:00:00Z",
            "message": message,
        },
    )
    page = page_of(rita, plan)
    shown = re.search(r'<div class="markdown message"[^>]*>(.*?)</div>', page, re.S).group(1)
    assert "<strong>Ada</strong>" in shown
    assert "<script" not in shown and "<img" not in shown and "onerror" not in shown
    rows = re.search(r'<table class="diff fields">.*?</table>', page, re.S).group(0)
    assert re.findall(r"<code>(/[a-z_]+)</code>", rows) == ["/channel", "/customer_id", "/send_at"]
    assert "cus-77 (sms)" in summary_line(page)
    assert ">Send reminder to cus-77</button>" in page


def test_an_upstreams_label_is_text_not_markup(rita, make_plan, upstream):
    upstream.mutate("/contacts/c-1002", {"name": "<b>Grace</b> <script>x</script>"})
    page = page_of(rita, make_plan("delete_contact", {"contact_id": "c-1002"}))
    assert "&lt;b&gt;Grace&lt;/b&gt; &lt;script&gt;x&lt;/script&gt;" in page
    assert "<b>Grace" not in page and "<script>x" not in page


def test_the_exact_request_has_no_null_noise(rita, make_plan):
    page = page_of(rita, make_plan("delete_contact", {"contact_id": "c-1002"}))
    shown = re.search(r'<pre data-testid="exact-request">(.*?)</pre>', page, re.S).group(1)
    assert "null" not in shown and "&quot;method&quot;: &quot;DELETE&quot;" in shown


# --- confirmation that scales with risk ---------------------------------------------------


def test_an_irreversible_plan_asks_for_the_target_typed_and_no_edit(rita, make_plan):
    plan = make_plan("delete_contact", {"contact_id": "c-1002"})
    page = page_of(rita, plan)
    assert "This cannot be undone." in page
    assert re.findall(r'<code class="confirm-word">([^<]+)</code>', page) == [
        "c-1002",
        "Grace Hopper",
    ]
    assert 'data-needs-confirm="confirm"' in page and 'name="confirm"' in page
    assert reverse("approvals:plan-edit", args=[plan.id]) not in page
    reversible = page_of(rita, make_plan())
    assert 'name="confirm"' not in reversible and "Edit the input" in reversible


@pytest.mark.parametrize("typed", ["", "c-1001", "Grace", "c-1002x"])
def test_without_the_typed_confirmation_the_server_refuses_the_approval(rita, make_plan, typed):
    plan = make_plan("delete_contact", {"contact_id": "c-1002"})
    response = decide(rita, plan, confirm=typed)
    assert errors(rita, response) == [
        "type the target&#x27;s id or name to approve an irreversible change"
    ]
    assert not Approval.objects.filter(plan=plan).exists()
    assert not AuditEvent.objects.filter(plan=plan, kind="approval.recorded").exists()


@pytest.mark.parametrize("typed", ["c-1002", "  grace   HOPPER "])
def test_the_id_or_the_label_typed_lets_the_approval_through(rita, make_plan, typed):
    plan = make_plan("delete_contact", {"contact_id": "c-1002"})
    assert errors(rita, decide(rita, plan, confirm=typed)) == []
    assert Approval.objects.get(plan=plan).decision == "approve"


def test_the_typed_confirmation_does_not_replace_the_fingerprint(rita, make_plan):
    plan = make_plan("delete_contact", {"contact_id": "c-1002"})
    url = reverse("approvals:plan-decide", args=[plan.id])
    response = rita.post(url, {"decision": "approve", "fingerprint": "0" * 64, "confirm": "c-1002"})
    assert errors(rita, response) == [
        "the fingerprint you saw does not match this plan; reload and review again"
    ]
    assert not Approval.objects.filter(plan=plan).exists()


def test_denying_needs_no_typing(rita, make_plan):
    plan = make_plan("delete_contact", {"contact_id": "c-1002"})
    assert errors(rita, decide(rita, plan, "deny")) == []
    plan.refresh_from_db()
    assert plan.status == PlanStatus.DENIED


# --- freshness before approving -------------------------------------------------------------


def test_a_plan_whose_target_moved_offers_preview_again_and_no_approve(rita, make_plan, upstream):
    plan = make_plan()
    upstream.mutate("/contacts/c-1001", {"phone": "+1 555 0100"})  # someone else's write
    page = page_of(rita, plan)
    assert "The target changed since the preview" in page
    assert 'value="approve"' not in page and f"Approve {plan.short_code}" not in page
    assert f'action="/plans/{plan.id}/preview-again"' in page
    assert 'value="deny"' in page  # denying stays possible

    response = rita.post(reverse("approvals:plan-preview-again", args=[plan.id]))
    revision = Plan.objects.get(revision_of=plan)
    assert response["Location"] == revision.get_absolute_url()
    plan.refresh_from_db()
    assert plan.status == PlanStatus.CANCELLED
    assert plan.outcome_detail.startswith("superseded: the target changed since the preview")
    assert f"Approve {revision.short_code}" in page_of(rita, revision)


def test_a_create_whose_target_appeared_offers_preview_again(rita, make_plan, upstream):
    plan = make_plan(
        "create_contact",
        {"contact_id": "c-1009", "name": "K", "email": "k@j.example", "workspace": "ws-red"},
    )
    created = httpx.put(
        upstream.url + "/contacts/c-1009",
        json={"id": "c-1009", "name": "Someone", "email": "s@e.example", "workspace": "ws-red"},
        headers={"Authorization": f"Bearer {WRITE_TOKEN}", "If-None-Match": "*"},
    )
    assert created.status_code == 201
    page = page_of(rita, plan)
    assert "The target was created since the preview" in page
    assert 'value="approve"' not in page


def test_freshness_that_cannot_be_checked_says_so_and_shows_nothing_of_the_upstream(
    rita, make_plan, upstream
):
    plan = make_plan()
    upstream.add_fault(method="GET", path_prefix="/contacts/", status=500, body="echo-request")
    page = page_of(rita, plan)
    assert "Could not check whether the target changed since the preview" in page
    assert f"Approve {plan.short_code}" in page  # the worker re-reads before writing
    assert READ_TOKEN not in page and "echo" not in page.lower()


def test_a_slow_upstream_does_not_hang_the_page(rita, make_plan, upstream):
    from actions.models import Connector

    plan = make_plan()
    Connector.objects.filter(name="demo").update(read_timeout=0.3)
    upstream.add_fault(method="GET", path_prefix="/contacts/", delay=3)
    started = time.monotonic()
    page = page_of(rita, plan)
    assert time.monotonic() - started < 2
    assert "Could not check whether the target changed" in page


def test_the_form_checks_again_as_the_reviewer_reaches_it(rita, make_plan, upstream):
    plan = make_plan()
    page = page_of(rita, plan)
    assert f'hx-get="{plan.get_absolute_url()}?part=freshness"' in page
    url = plan.get_absolute_url() + "?part=freshness"
    fresh = rita.get(url, **HTMX)
    assert fresh.status_code == 200 and "still as previewed" in fresh.content.decode()
    assert "hx-get" not in fresh.content.decode()  # once: no chain of re-checks
    upstream.mutate("/contacts/c-1001", {"phone": "+1 555 0100"})
    moved = rita.get(url, **HTMX)
    assert moved["HX-Refresh"] == "true"  # the page reloads and says "preview again"


def test_a_decided_plans_page_reads_nothing_upstream(rita, make_plan, upstream):
    plan = make_plan()
    Plan.objects.filter(id=plan.id).update(status=PlanStatus.COMPLETED)
    reads = len(upstream.requests_log())
    page_of(rita, plan)
    assert len(upstream.requests_log()) == reads


# --- the same target, twice ---------------------------------------------------------------


def test_plans_on_the_same_target_are_flagged_in_the_queue_and_on_the_page(rita, make_plan):
    memo = make_plan("update_invoice_memo", {"invoice_id": "inv-2001", "memo": "hi"})
    send = make_plan("send_invoice", {"invoice_id": "inv-2001"})
    alone = make_plan()
    queue = rita.get(reverse("approvals:queue")).content.decode()

    def row(plan):
        return re.search(rf'data-plan-id="{plan.id}".*?</tr>', queue, re.S).group(0)

    assert "+1 other plan on this target" in row(memo)
    assert "+1 other plan on this target" in row(send)
    assert "other plan" not in row(alone)
    page = page_of(rita, send)
    note = re.search(r'<p class="crowded" data-testid="same-target">.*?</p>', page, re.S).group(0)
    assert memo.short_code in note and "make the others" in note


# --- the live box ----------------------------------------------------------------------------


def test_the_poll_is_answered_204_while_nothing_changed(rita, make_plan, second_reviewer, client):
    plan = make_plan("delete_contact", {"contact_id": "c-1002"})
    fragment = rita.get(plan.get_absolute_url(), **HTMX)
    seen = re.search(r"\?seen=([0-9a-f]+)", fragment.content.decode()).group(1)
    again = rita.get(plan.get_absolute_url(), {"seen": seen}, **HTMX)
    assert again.status_code == 204
    decide(rita, plan, confirm="c-1002")
    moved = rita.get(plan.get_absolute_url(), {"seen": seen}, **HTMX)
    assert moved.status_code == 200
    body = moved.content.decode()
    assert "Approved by rita" in body
    # The summary line and the tab's title follow the box (out of band).
    assert 'id="summary-line"' in body and 'hx-swap-oob="true"' in body
    assert re.search(r"<title>DELETE demo /contacts/c-1002 · Grace Hopper", body)


def test_the_outcome_box_is_a_live_region(rita, make_plan):
    page = page_of(rita, make_plan())
    live = page.index('aria-live="polite" data-testid="outcome-live"')
    assert live < page.index('id="plan-status"')


def test_without_javascript_the_page_refreshes_itself_while_the_worker_is_busy(rita, make_plan):
    plan = make_plan()
    assert 'http-equiv="refresh"' not in page_of(rita, plan)  # a reviewer may be typing
    Plan.objects.filter(id=plan.id).update(status=PlanStatus.APPROVED)
    assert '<noscript><meta http-equiv="refresh" content="5"></noscript>' in page_of(rita, plan)
    Plan.objects.filter(id=plan.id).update(status=PlanStatus.COMPLETED)
    assert 'http-equiv="refresh"' not in page_of(rita, plan)
