"""Single sign-on around the protocol (approvals/identity/oidc.py): which scopes the sign-in asks
for, from the provider's discovery document (a real HTTP server on 127.0.0.1 serving
one), and what a refusal from the provider becomes: one log line with its error and
description, an audit event, a page with a sentence the person can act on, and a notice
on the dashboard for staff. (The whole flow against a real OpenID provider in Chromium:
tests/e2e/test_sso.py.)"""

from __future__ import annotations

import logging
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.test import override_settings

from actions.lib.models import AuditEvent
from approvals.identity import oidc
from tests.oidc.support import JsonServer


class Discovery(JsonServer):
    """A provider's /.well-known/openid-configuration, as this test wants it answered."""

    path = oidc.DISCOVERY_PATH

    def __init__(self) -> None:
        super().__init__()
        self.document: dict = {
            "issuer": self.issuer,
            "scopes_supported": ["openid", "email", "profile"],
        }

    def answer(self) -> object:
        return self.document


@pytest.fixture
def provider(db):
    discovery = Discovery()
    oidc._discovered.clear()
    with override_settings(
        COUNTERSIGN_OIDC=True,
        COUNTERSIGN_OIDC_ISSUER=discovery.issuer,
        COUNTERSIGN_OIDC_SCOPES="",
        COUNTERSIGN_OIDC_NAME="Example SSO",
        OIDC_RP_CLIENT_ID="countersign-test",
        OIDC_OP_AUTHORIZATION_ENDPOINT=f"{discovery.issuer}/auth",
        OIDC_TIMEOUT=2.0,
    ):
        yield discovery
    oidc._discovered.clear()
    discovery.stop()


def start(client) -> dict[str, str]:
    """Start a sign-in; the authorization request's parameters."""
    response = client.get("/accounts/oidc/start/")
    assert response.status_code == 302
    return {k: v[0] for k, v in parse_qs(urlsplit(response["Location"]).query).items()}


# --- the scopes asked for ------------------------------------------------------------------


def test_groups_is_not_asked_for_when_the_provider_does_not_list_it(client, provider):
    assert start(client)["scope"] == "openid email profile"


def test_groups_is_asked_for_when_the_provider_lists_it(client, provider):
    provider.document["scopes_supported"] = ["openid", "email", "profile", "groups"]
    assert start(client)["scope"] == "openid email profile groups"


def test_the_document_is_read_once_then_remembered(client, provider):
    for _ in range(3):
        start(client)
    assert provider.requests == 1


def test_explicit_scopes_are_asked_for_exactly_and_discovery_is_not_read(client, provider):
    with override_settings(COUNTERSIGN_OIDC_SCOPES="openid email groups offline_access"):
        assert start(client)["scope"] == "openid email groups offline_access"
    assert provider.requests == 0


@pytest.mark.parametrize(
    "answer",
    ["error", "not json", "too large", "redirect", "no list"],
)
def test_groups_is_asked_for_when_the_list_is_not_known(client, provider, answer, caplog):
    # Left out where it is needed, reviewers would sign in without their groups (and so
    # without the review permission), silently; asked for where it is not, the provider
    # says so, on the refusal page and in the log.
    if answer == "error":
        provider.status = 500
    elif answer == "not json":
        provider.body = b"<html>sign in</html>"
    elif answer == "too large":
        provider.document["padding"] = "x" * oidc.DISCOVERY_MAX_BYTES
    elif answer == "redirect":
        provider.status, provider.location = 302, f"{provider.issuer}/elsewhere"
    else:
        del provider.document["scopes_supported"]
    with caplog.at_level(logging.WARNING, logger="approvals.identity.oidc"):
        assert start(client)["scope"] == "openid email profile groups"
    unreadable = [r for r in caplog.records if "discovery document could not be read" in r.message]
    assert len(unreadable) == (0 if answer == "no list" else 1)
    assert provider.requests == 1
    assert "/elsewhere" not in provider.paths  # no redirect followed


def test_an_unreachable_provider_is_tried_again_only_after_a_while(client, provider):
    provider.status = 503
    start(client)
    start(client)
    assert provider.requests == 1
    # Once the retry time has passed, it is read again, and counts.
    for url, listed in list(oidc._discovered.items()):
        oidc._discovered[url] = oidc._Listed(scopes=listed.scopes, until=0.0)
    provider.status = 200
    assert start(client)["scope"] == "openid email profile"
    assert provider.requests == 2


def test_the_last_list_read_still_counts_while_the_provider_is_unreachable(client, provider):
    start(client)
    for url, listed in list(oidc._discovered.items()):
        oidc._discovered[url] = oidc._Listed(scopes=listed.scopes, until=0.0)
    provider.status = 500
    assert start(client)["scope"] == "openid email profile"
    assert provider.requests == 2


# --- a refusal from the provider -----------------------------------------------------------


def callback(client, **params):
    return client.get(f"/accounts/oidc/callback/?{urlencode(params)}")


def test_a_provider_error_is_one_log_line_an_audit_event_and_a_sentence(client, provider, caplog):
    state = start(client)["state"]
    description = "scope not offered: groups"
    with caplog.at_level(logging.WARNING, logger="approvals.identity.oidc"):
        response = callback(
            client, error="invalid_scope", error_description=description, state=state
        )
    assert response.status_code == 400
    page = response.content.decode()
    assert "the identity provider refused the sign-in" in page
    assert "Ask your administrator to fix them" in page
    assert '<code data-testid="provider-error">invalid_scope</code>' in page
    assert description not in page  # the provider's words are for the administrator

    lines = [r.getMessage() for r in caplog.records if r.name == "approvals.identity.oidc"]
    assert lines == [
        "single sign-on refused: the identity provider refused the sign-in "
        f'(provider error=invalid_scope error_description="{description}")'
    ]
    event = AuditEvent.objects.get(kind="reviewer.sign_in_refused")
    assert event.data["provider_error"] == "invalid_scope"
    assert event.data["provider_error_description"] == description
    # The sign-in cannot be completed afterwards with the same state.
    again = callback(client, code="a-code", state=state)
    assert "this sign-in was not started here" in again.content.decode()


@pytest.mark.parametrize(
    ("error", "words"),
    [
        ("access_denied", "did not let you in"),
        ("temporarily_unavailable", "Try again in a few minutes"),
        ("login_required", "sign in there first"),
        ("unauthorized_client", "Ask your administrator to fix them"),
    ],
)
def test_each_provider_error_says_what_to_do(client, provider, error, words):
    state = start(client)["state"]
    page = callback(client, error=error, state=state).content.decode()
    assert words in page and f">{error}</code>" in page


def test_the_pages_sentence_is_in_portuguese(client, provider):
    state = start(client)["state"]
    response = client.get(
        f"/accounts/oidc/callback/?error=invalid_scope&state={state}",
        HTTP_ACCEPT_LANGUAGE="pt-BR",
    )
    page = response.content.decode()
    assert "Login recusado" in page and "administrador" in page


def test_what_the_provider_said_cannot_break_the_log_line_or_the_page(client, provider, caplog):
    state = start(client)["state"]
    with caplog.at_level(logging.WARNING, logger="approvals.identity.oidc"):
        page = callback(
            client,
            error='invalid_scope"<b>\n',
            error_description="line one\nFORGED 2026 ERROR <script>x</script>" + "y" * 600,
            state=state,
        ).content.decode()
    (line,) = [r.getMessage() for r in caplog.records if r.name == "approvals.identity.oidc"]
    # One line, whose quoted description cannot be closed early.
    assert "\n" not in line and line.count('"') == 2
    assert 'error=invalid_scopeb error_description="line oneFORGED 2026 ERROR <script>' in line
    assert len(AuditEvent.objects.get().data["provider_error_description"]) == 300
    assert ">invalid_scopeb</code>" in page and "<script>x" not in page


def test_an_error_for_a_sign_in_this_browser_did_not_start_is_not_the_providers(
    client, provider, caplog
):
    start(client)
    with caplog.at_level(logging.WARNING, logger="approvals.identity.oidc"):
        page = callback(
            client, error="access_denied", error_description="typed by anyone", state="forged"
        ).content.decode()
    assert "this sign-in was not started here, or it was already used" in page
    assert "provider-error" not in page
    # Still logged with what it said, for whoever investigates.
    assert any("provider error=access_denied" in r.getMessage() for r in caplog.records)


def test_invalid_scope_reads_the_discovery_document_again(client, provider):
    state = start(client)["state"]
    assert provider.requests == 1
    callback(client, error="invalid_scope", state=state)
    start(client)
    assert provider.requests == 2


# --- what staff see ------------------------------------------------------------------------


def test_staff_see_the_latest_refusal_on_the_dashboard(client, provider, reviewer):
    state = start(client)["state"]
    callback(client, error="invalid_scope", error_description="scope not offered", state=state)
    callback(client, code="x", state="not-started")

    client.force_login(reviewer)
    assert 'data-testid="sign-in-refusals"' not in client.get("/plans/dashboard/").content.decode()
    reviewer.is_staff = True
    reviewer.save(update_fields=["is_staff"])
    page = client.get("/plans/dashboard/").content.decode()
    assert 'data-testid="sign-in-refusals"' in page
    assert "2 single sign-ons refused in the last 24 hours." in page
    # The latest is the one the browser did not start; the one before it is in the log.
    assert "this sign-in was not started here" in page
    assert "?kind=reviewer.sign_in_refused" in page


def test_staff_read_the_providers_error_and_description(client, provider, reviewer):
    state = start(client)["state"]
    callback(client, error="invalid_scope", error_description="scope not offered", state=state)
    reviewer.is_staff = True
    reviewer.save(update_fields=["is_staff"])
    client.force_login(reviewer)
    page = client.get("/plans/dashboard/").content.decode()
    assert '<code data-testid="sign-in-provider-error">invalid_scope</code>' in page
    assert "scope not offered" in page
