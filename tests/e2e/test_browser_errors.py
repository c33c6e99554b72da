"""The error pages in a real Chromium, in English and Portuguese: a person signed in
without the review permission reads who they are and what they lack on the 403 and signs
out from it (without JavaScript too); an address that names nothing is the styled 404;
and the 500 page, with the stylesheet the live server serves under its CSP.

The live server has no route that fails (none should), so the 500 page is the one
Django renders in this process for a test-only URL (tests/approvals/error_urls.py), put
in front of the browser at the live server's address."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


ENGLISH = ("Username", "Password", "Log in")
PORTUGUESE = ("Nome de usuário", "Senha", "Entrar")


def log_in(page, username: str, password: str, words=ENGLISH) -> None:
    user_label, password_label, button = words
    page.goto("/accounts/login/")
    page.get_by_label(user_label).fill(username)
    page.get_by_label(password_label).fill(password)
    page.get_by_role("button", name=button).click()


def styled(page) -> bool:
    """app.css is applied: the header is a flex row, the error section a centred card."""
    return page.evaluate(
        """() => getComputedStyle(document.querySelector('header.top')).display === 'flex'
              && getComputedStyle(document.querySelector('.error-page')).marginLeft !== '0px'"""
    )


@pytest.mark.parametrize("javascript", [True, False])
def test_the_403_names_the_account_and_signs_out(chromium, outsider, javascript):
    page = chromium(java_script_enabled=javascript)
    log_in(page, "oscar", "pw-oscar")
    page.wait_for_url("**/plans/")
    assert page.get_by_role("heading", name="You cannot open this page").is_visible()
    assert page.get_by_test_id("signed-in-as").inner_text() == "You are signed in as oscar."
    missing = page.get_by_test_id("missing-permission").inner_text()
    assert "it needs the permission approvals.review_plan" in missing
    assert "the group reviewers" in page.get_by_test_id("missing-group").inner_text()
    assert styled(page)

    page.get_by_test_id("sign-out").click()
    page.wait_for_url("**/accounts/login/")
    page.goto("/plans/")
    assert "/accounts/login/" in page.url
    # Signed out for real: another account can sign in from here.
    log_in(page, "rita", "pw-rita")
    page.wait_for_url("**/plans/")
    assert page.get_by_role("heading", level=1).inner_text() == "Plans for you to decide"


def test_the_403_in_portuguese(chromium, outsider):
    page = chromium(locale="pt-BR")
    log_in(page, "oscar", "pw-oscar", PORTUGUESE)
    page.wait_for_url("**/plans/")
    assert page.locator("html").get_attribute("lang") == "pt-br"
    assert page.get_by_role("heading", name="Você não pode abrir esta página").is_visible()
    assert page.get_by_test_id("signed-in-as").inner_text() == "Você entrou como oscar."
    assert "approvals.review_plan" in page.get_by_test_id("missing-permission").inner_text()
    page.get_by_role("button", name="Sair desta conta").click()
    page.wait_for_url("**/accounts/login/")


@pytest.mark.parametrize(
    ("locale", "heading", "link"),
    [("en-US", "Page not found", "Log in"), ("pt-BR", "Página não encontrada", "Entrar")],
)
def test_the_404_in_both_languages(chromium, locale, heading, link):
    page = chromium(locale=locale)
    response = page.goto("/plans/not-a-plan/")
    assert response.status == 404
    assert page.get_by_role("heading", name=heading).is_visible()
    assert styled(page)
    page.get_by_role("link", name=link).click()
    page.wait_for_url("**/accounts/login/")


@pytest.mark.parametrize(
    ("language", "heading"),
    [("en", "Something went wrong"), ("pt-BR", "Algo deu errado")],
)
def test_the_500_in_both_languages(chromium, live, language, heading):
    from django.test import Client, override_settings

    with override_settings(ROOT_URLCONF="tests.approvals.error_urls"):
        failed = Client(raise_request_exception=False).get(
            "/test-only/fail/", HTTP_ACCEPT_LANGUAGE=language
        )
    assert failed.status_code == 500
    page = chromium(locale=language)
    address = f"{live['url']}/test-only/fail/"
    # With the response's own headers, its Content-Security-Policy among them.
    assert "Content-Security-Policy" in failed.headers
    page.route(
        address,
        lambda route: route.fulfill(status=500, body=failed.content, headers=dict(failed.headers)),
    )
    problems: list[str] = []  # a stylesheet or icon that did not load; a CSP refusal
    page.on("requestfailed", lambda request: problems.append(request.url))
    page.on(
        "response",
        lambda response: (
            response.url != address and response.status >= 400 and problems.append(response.url)
        ),
    )
    page.on(
        "console",
        lambda message: (
            message.type == "error"
            and "status of 500" not in message.text  # the page's own status
            and problems.append(message.text)
        ),
    )
    assert page.goto(address).status == 500
    assert page.get_by_role("heading", name=heading).is_visible()
    assert styled(page)
    assert problems == []
    page.get_by_role("link", name="Countersign").click()
    page.wait_for_url("**/accounts/login/**")


def test_axe_finds_no_serious_violation_on_the_403_and_404(chromium, outsider):
    from tests.e2e.test_browser_decision import axe_violations, serious

    page = chromium()
    log_in(page, "oscar", "pw-oscar")
    page.wait_for_url("**/plans/")
    found = {"403": axe_violations(page)}
    page.goto("/plans/not-a-plan/")
    found["404"] = axe_violations(page)
    assert {name: serious(v) for name, v in found.items() if serious(v)} == {}
