"""The 403, 404 and 500 pages, in the product's layout and in both languages: the 403
says who is signed in, which permission (and, for single sign-on, which group claim)
they lack, and offers a sign-out that works without JavaScript; the 500 page needs
neither the database nor a request context; a form whose CSRF check fails says that
nothing was done. (In Chromium: tests/e2e/test_browser_errors.py
and tests/e2e/test_sso.py.)"""

from __future__ import annotations

import re

import pytest
from django.test import Client, override_settings

from approvals.models import OidcIdentity
from tests.approvals.error_urls import FAILURE

PT = {"HTTP_ACCEPT_LANGUAGE": "pt-BR,pt;q=0.9"}
SSO = {
    "COUNTERSIGN_OIDC": True,
    "COUNTERSIGN_OIDC_NAME": "Example SSO",
    "COUNTERSIGN_OIDC_GROUPS_CLAIM": "groups",
    "COUNTERSIGN_OIDC_REVIEWER_GROUPS": ["countersign-reviewers"],
}


def forbidden(client, user, **headers) -> str:
    client.force_login(user)
    response = client.get("/plans/", **headers)
    assert response.status_code == 403
    return response.content.decode()


def test_the_403_says_who_is_signed_in_and_what_they_lack(client, outsider):
    outsider.first_name, outsider.last_name = "Oscar", "Outside"
    outsider.save()
    page = forbidden(client, outsider)
    assert '<link rel="stylesheet" href="/static/css/app.css">' in page  # the product's layout
    assert "You are signed in as <strong>Oscar Outside</strong> (oscar)." in page
    assert "it needs the permission <code>approvals.review_plan</code>" in page
    assert "members of the group <code>reviewers</code>" in page
    # A sign-out that is a plain form (POST, CSRF token): no JavaScript needed.
    form = re.search(r'<form method="post" action="/accounts/logout/">(.*?)</form>', page, re.S)
    assert form and 'name="csrfmiddlewaretoken"' in form.group(1)
    assert 'data-testid="sign-out"' in form.group(1)
    # No links to pages that would each be another 403.
    assert 'href="/plans/dashboard/"' not in page and 'href="/plans/audit/"' not in page


def test_the_403_in_portuguese(client, outsider):
    page = forbidden(client, outsider, **PT)
    assert '<html lang="pt-br">' in page
    assert "Você entrou como <strong>oscar</strong>." in page
    assert "exige a permissão <code>approvals.review_plan</code>" in page
    assert "Sair desta conta" in page


@override_settings(**SSO)
def test_the_403_names_the_group_claim_for_someone_the_provider_signed_in(client, outsider):
    OidcIdentity.objects.create(user=outsider, issuer="https://idp.example", subject="o-1")
    page = forbidden(client, outsider)
    assert (
        "Example SSO makes you a reviewer when the <code>groups</code> claim of your sign-in "
        "names the group <code>countersign-reviewers</code>; this time it did not."
    ) in page


@override_settings(**SSO)
def test_a_local_account_is_told_about_the_local_group_even_with_sso(client, outsider):
    page = forbidden(client, outsider)
    assert "members of the group <code>reviewers</code>" in page
    assert "claim of your sign-in" not in page


def test_signing_out_from_the_403_page_works(outsider):
    client = Client(enforce_csrf_checks=True)
    page = forbidden(client, outsider)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    response = client.post("/accounts/logout/", {"csrfmiddlewaretoken": token})
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert client.get("/plans/").status_code == 302  # signed out: to the login page


def test_a_reviewer_keeps_the_navigation(client, reviewer):
    client.force_login(reviewer)
    assert 'href="/plans/dashboard/"' in client.get("/plans/").content.decode()


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        ({}, ["Page not found", "Nothing is at this address"]),
        (PT, ["Página não encontrada", "Não há nada neste endereço"]),
    ],
)
def test_the_404_page_in_both_languages(client, db, headers, words):
    response = client.get("/no-such-page/", **headers)
    assert response.status_code == 404
    page = response.content.decode()
    assert '<link rel="stylesheet" href="/static/css/app.css">' in page
    assert all(w in page for w in words)
    assert 'href="/accounts/login/"' in page  # signed out: the way in


def test_the_404_for_a_reviewer_leads_back_to_the_queue(client, reviewer):
    client.force_login(reviewer)
    page = client.get("/plans/00000000-0000-0000-0000-000000000000/").content.decode()
    assert "Page not found" in page and 'href="/plans/"' in page


@override_settings(ROOT_URLCONF="tests.approvals.error_urls")
@pytest.mark.parametrize(
    ("headers", "words"),
    [
        ({}, ['<html lang="en">', "Something went wrong", "tell your administrator"]),
        (PT, ['<html lang="pt-br">', "Algo deu errado", "diga ao seu administrador"]),
    ],
)
def test_the_500_page_in_both_languages_without_the_database(headers, words, caplog):
    # No database fixture: a query from the page (or anything it needs) would fail the test.
    client = Client(raise_request_exception=False)
    response = client.get("/test-only/fail/", **headers)
    assert response.status_code == 500
    page = response.content.decode()
    assert '<link rel="stylesheet" href="/static/css/app.css">' in page
    assert all(w in page for w in words)
    assert FAILURE not in page and "Traceback" not in page
    assert re.search(r'data-testid="error-time">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC<', page)
    # The failure itself is in the log, for the administrator.
    assert any(r.levelname == "ERROR" and r.exc_info for r in caplog.records)


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        ({}, ["The form expired", "Nothing was done"]),
        (PT, ["O formulário expirou", "Nada foi feito"]),
    ],
)
def test_a_form_without_its_csrf_token_gets_the_styled_403(reviewer, headers, words):
    # A sign-out form left open in a tab while the person signed in again elsewhere.
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    response = client.post("/accounts/logout/", **headers)
    assert response.status_code == 403
    page = response.content.decode()
    assert '<link rel="stylesheet" href="/static/css/app.css">' in page
    assert all(w in page for w in words)
    assert client.get("/plans/").status_code == 200  # nothing was done: still signed in
