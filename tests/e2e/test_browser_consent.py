"""Reviewers in real Chromium contexts: two people approve an irreversible plan (one
cannot count twice) and the first sees the outcome arrive live; the pages in Brazilian
Portuguese and the language switcher; the decision forms with JavaScript turned off."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.support import NEW_EMAIL, eventually
from tests.e2e.test_browser import log_in, status_text

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def flash(page, text: str):
    return page.get_by_role("status").filter(has_text=text)


def progress(page) -> str:
    """Approvals so far, from the summary line ("1 of 2")."""
    return " ".join(page.get_by_test_id("approval-progress").inner_text().split())


def decisions(page) -> str:
    return page.get_by_test_id("decisions").inner_text()


def test_two_reviewers_approve_an_irreversible_plan(chromium, agent_api, upstream):
    response = agent_api.http.post(
        "/plans", json={"action": "delete_contact", "input": {"contact_id": "c-1001"}}
    )
    assert response.status_code == 201, response.text
    plan = response.json()
    approve = f"Approve {plan['short_code']}"

    rita = chromium()
    log_in(rita)
    rita.goto(f"/plans/{plan['id']}/")
    assert "· irreversible ·" in rita.get_by_test_id("summary-line").inner_text()
    assert progress(rita) == "0 of 2"
    assert "2 approvals still needed." in rita.locator("#plan-status").inner_text()
    # The same reviewer in a second tab, holding the form as it was before she approved.
    stale_tab = rita.context.new_page()
    stale_tab.goto(f"/plans/{plan['id']}/")

    rita.get_by_test_id("confirm").fill("c-1001")
    rita.get_by_role("button", name=approve).click()
    rita.wait_for_url(f"**/plans/{plan['id']}/")
    assert flash(rita, "Approval recorded.").count() == 1
    assert progress(rita) == "1 of 2"
    assert status_text(rita) == "Awaiting Approval"
    assert rita.get_by_role("button", name=approve).count() == 0
    assert "waiting for another reviewer" in rita.locator("#plan-status").inner_text()

    # She cannot be the second approver: the old form is refused, nothing changes.
    stale_tab.get_by_test_id("confirm").fill("Ada Lovelace")
    stale_tab.get_by_role("button", name=approve).click()
    stale_tab.wait_for_url(f"**/plans/{plan['id']}/")
    assert "you have already decided on this plan" in stale_tab.locator(".msg-error").inner_text()
    assert progress(stale_tab) == "1 of 2"
    stale_tab.close()
    assert upstream.writes() == []

    # From here on only HTMX may change Rita's page.
    rita.evaluate("window.__sameDocument = true")

    sam = chromium()
    log_in(sam, "sam", "pw-sam")
    sam.goto(f"/plans/{plan['id']}/")
    assert progress(sam) == "1 of 2"
    assert "Approved by rita" in decisions(sam)
    sam.get_by_test_id("confirm").fill("c-1001")
    sam.get_by_role("button", name=approve).click()
    sam.wait_for_url(f"**/plans/{plan['id']}/")
    assert flash(sam, "Approval recorded.").count() == 1

    rita.get_by_test_id("plan-status").filter(has_text="Completed").wait_for(timeout=15_000)
    assert rita.evaluate("window.__sameDocument === true"), "the page was reloaded"
    assert agent_api.wait_for(plan["id"])["status"] == "completed"
    eventually(lambda: len(upstream.writes()) == 1, what="one DELETE")
    assert upstream.writes()[0]["method"] == "DELETE"


def test_pages_in_brazilian_portuguese_and_the_language_switcher(chromium, agent_api):
    plan = agent_api.propose()
    page = chromium(locale="pt-BR")  # Accept-Language: pt-BR

    page.goto("/accounts/login/")
    page.get_by_label("Nome de usuário").fill("rita")
    page.get_by_label("Senha").fill("pw-rita")
    page.get_by_role("button", name="Entrar").click()
    page.wait_for_url("**/plans/")
    assert page.locator("html").get_attribute("lang") == "pt-br"
    assert page.get_by_role("heading", level=1).inner_text() == "Planos para você decidir"
    row = page.locator("tr.plan-row", has_text=plan["short_code"])
    assert "Aguardando aprovação" in row.inner_text()
    assert "Mudança reversível" in row.inner_text()
    # countdown.js words the countdown in the page's language too.
    expect(row.locator("time.countdown")).to_have_text(
        re.compile(r"^em (\d+h )?\d+m \d+s$"), timeout=3_000
    )

    row.get_by_role("link").first.click()
    page.wait_for_url(f"**/plans/{plan['id']}/")
    assert page.get_by_role("heading", name="Ficha da ação").count() == 1
    assert page.get_by_role("button", name=f"Aprovar {plan['short_code']}").count() == 1
    assert progress(page) == "0 de 1"
    line = page.get_by_test_id("summary-line").inner_text()
    assert line.startswith("ALTERAR demo /contacts/c-1001 · Ada Lovelace · reversível · 0 de 1")
    assert page.title().startswith("ALTERAR demo /contacts/c-1001")
    assert "Alterar o e-mail de um contato" in page.locator("header.plan-head").inner_text()
    assert "agora mesmo" in page.locator("header.plan-head").inner_text()
    assert NEW_EMAIL in page.locator("section.changes table.diff").first.inner_text()
    page.locator("details.card summary").click()
    assert "Substitui o endereço de e-mail" in page.locator("details.card").inner_text()

    # The switcher: a plain form; the choice then outranks the browser's Accept-Language.
    page.get_by_label("Idioma").select_option("en")
    page.get_by_role("button", name="Mudar idioma").click()
    page.wait_for_url(f"**/plans/{plan['id']}/")
    expect(page.get_by_role("heading", name="Action card")).to_be_visible()
    assert page.locator("html").get_attribute("lang") == "en"
    page.get_by_role("link", name="Queue").click()
    assert page.get_by_role("heading", level=1).inner_text() == "Plans for you to decide"


def test_decision_forms_work_without_javascript(chromium, agent_api, upstream):
    plan = agent_api.propose()
    page = chromium(java_script_enabled=False)
    log_in(page)
    page.goto(f"/plans/{plan['id']}/")
    # No script ran: the countdown is the server's wording, not countdown.js's.
    countdown = page.get_by_test_id("expires").inner_text()
    assert re.fullmatch(r"in \d+\s+minutes?", countdown), countdown

    # An irreversible plan typed wrong is refused by the server, not just by a script.
    delete = agent_api.http.post(
        "/plans", json={"action": "delete_contact", "input": {"contact_id": "c-1002"}}
    ).json()
    page.goto(f"/plans/{delete['id']}/")
    approve = page.get_by_role("button", name=f"Approve {delete['short_code']}")
    assert approve.is_enabled()  # nothing disables it without JavaScript
    page.get_by_test_id("confirm").fill("c-1003")
    approve.click()
    page.wait_for_url(f"**/plans/{delete['id']}/")
    assert "type the target's id or name" in page.locator(".msg-error").inner_text()
    assert progress(page) == "0 of 2"
    page.goto(f"/plans/{plan['id']}/")

    page.get_by_text("Add a comment").click()  # <details> opens without JavaScript
    page.get_by_label("Comment (optional)").fill("checked with the customer")
    page.get_by_role("button", name=f"Approve {plan['short_code']}").click()
    page.wait_for_url(f"**/plans/{plan['id']}/")  # a plain POST, then the redirect
    assert flash(page, "Approval recorded.").count() == 1
    if status_text(page) != "Completed":
        # Nothing polls without JavaScript: the page refreshes itself while in flight.
        assert page.locator('noscript meta[http-equiv="refresh"]').count() == 1
        page.get_by_test_id("plan-status").filter(has_text="Completed").wait_for(timeout=15_000)
    assert agent_api.wait_for(plan["id"])["status"] == "completed"
    decision = page.get_by_test_id("decisions").inner_text()
    assert "Approved by rita" in decision and "checked with the customer" in decision

    # The language switcher is a plain form too.
    page.get_by_label("Language").select_option("pt-br")
    page.get_by_role("button", name="Change language").click()
    page.wait_for_url(f"**/plans/{plan['id']}/")
    assert status_text(page) == "Concluído"
