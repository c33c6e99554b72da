"""Single sign-on against a real OpenID provider (panva/oidc-provider under Node, on
127.0.0.1), driven in Chromium: sign in through the provider, land on the queue, approve;
sign out here and at the provider; a person whose groups claim does not name reviewers
gets no permission; and every way an answer can be wrong (a tampered state, a wrong
nonce, an expired ID token, another audience, an unknown issuer, an unpublished key) is
refused with a page saying so, with nobody signed in and no decision recorded.

The wrong ID tokens come from the token endpoint the web server is configured with
(tests/oidc/support.py): it relays the provider's answer with one claim changed and the
token re-signed under a key it publishes, as a provider issuing bad tokens would; the
tampered state is the browser's doing (the callback is replayed with another state)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from tests.e2e.support import orm

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def sso_page(chromium, sso):
    page = chromium(base_url=sso["url"])
    # The provider's development pages import a web font; nothing leaves the machine.
    page.context.route("https://fonts.googleapis.com/**", lambda route: route.abort())
    return page


def sign_in_at_provider(page, login: str) -> None:
    page.goto("/accounts/login/")
    page.get_by_test_id("sso-sign-in").click()
    page.wait_for_url("**/interaction/**")
    page.locator("input[name=login]").fill(login)
    page.locator("input[name=password]").fill("any password")
    page.get_by_role("button", name="Sign-in").click()
    consent = page.get_by_role("button", name="Continue")
    consent.wait_for()
    consent.click()


def decisions_and_state(plan_id: str) -> tuple[int, str]:
    from approvals.models import Approval, Plan

    return Approval.objects.count(), Plan.objects.get(id=plan_id).status


def test_sign_in_through_the_provider_then_approve_and_sign_out(chromium, sso, agent_api, upstream):
    from django.contrib.auth import get_user_model

    from approvals.models import OidcIdentity

    plan = agent_api.propose()
    page = sso_page(chromium, sso)
    sign_in_at_provider(page, "rita-sso")
    page.wait_for_url(f"{sso['url']}/plans/")
    assert page.locator("table.plans tr", has_text=plan["short_code"]).count() == 1

    # The browser sent PKCE: the provider requires it, and the token it issued was ours.
    claims = sso["token_endpoint"].issued[-1]
    assert claims["iss"] == sso["issuer"] and claims["aud"] == "countersign-test"

    page.goto(f"/plans/{plan['id']}/")
    page.get_by_role("button", name=f"Approve {plan['short_code']}").click()
    page.get_by_test_id("plan-status").filter(has_text="Completed").wait_for(timeout=15_000)
    assert agent_api.get(plan["id"])["status"] == "completed"

    def check():
        from approvals.models import Approval

        identity = OidcIdentity.objects.select_related("user").get(subject="rita-sso")
        assert identity.issuer == sso["issuer"]
        user = identity.user
        assert user.username == "rita-sso" and not user.has_usable_password()
        assert user.groups.filter(name="reviewers").exists()
        assert Approval.objects.get(plan_id=plan["id"]).reviewer == user
        # Matched on (issuer, subject), never on e-mail: the local "rita" stays apart.
        assert get_user_model().objects.get(username="rita").pk != user.pk

    orm(check)

    # Sign-out ends the session here and at the provider (its confirmation page).
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{sso['issuer']}/session/end**")
    page.get_by_role("button", name="Yes, sign me out").click()
    page.wait_for_url(f"{sso['url']}/accounts/login/")
    page.goto("/plans/")
    assert "/accounts/login/" in page.url
    # The provider forgot her too: signing in asks for a login again.
    page.goto("/accounts/login/")
    page.get_by_test_id("sso-sign-in").click()
    page.wait_for_url("**/interaction/**")
    assert page.locator("input[name=login]").count() == 1


def test_a_person_the_groups_claim_does_not_name_gets_no_permission(chromium, sso, agent_api):
    from approvals.models import OidcIdentity

    plan = agent_api.propose()
    page = sso_page(chromium, sso)
    sign_in_at_provider(page, "olga-sso")
    page.wait_for_url(f"{sso['url']}/plans/")

    def check():
        user = OidcIdentity.objects.get(subject="olga-sso").user
        assert not user.groups.exists() and not user.user_permissions.exists()
        assert not user.has_perm("approvals.review_plan")

    orm(check)
    response = page.goto(f"/plans/{plan['id']}/")
    assert response.status == 403
    assert orm(lambda: decisions_and_state(plan["id"])) == (0, "awaiting_approval")


REFUSALS = {
    "nonce": "the ID token's nonce does not match this sign-in",
    "expired": "the ID token has expired",
    "audience": "the ID token is meant for another client",
    "issuer": "the ID token was issued by another issuer",
    "untrusted_key": "signed with a key the identity provider does not publish",
}


def test_every_untrustworthy_answer_is_refused_and_nothing_is_decided(chromium, sso, agent_api):
    from actions.lib.models import AuditEvent
    from approvals.models import OidcIdentity

    plan = agent_api.propose()
    endpoint = sso["token_endpoint"]
    seen: dict[str, str] = {}
    # One browser throughout: after the first round the provider remembers Ray and his
    # consent, and sends him straight back; Countersign's side starts afresh every time.
    page = sso_page(chromium, sso)
    for n, (mode, reason) in enumerate(REFUSALS.items()):
        endpoint.mode = mode
        if n == 0:
            sign_in_at_provider(page, "ray-sso")
        else:
            page.goto("/accounts/login/")
            page.get_by_test_id("sso-sign-in").click()
        page.wait_for_url(f"{sso['url']}/accounts/oidc/callback/**")
        refused = page.get_by_test_id("sign-in-refused")
        assert refused.is_visible(), mode
        assert page.get_by_role("heading", name="Sign-in refused").is_visible()
        seen[mode] = page.locator("main").inner_text()
        assert reason in seen[mode], (mode, seen[mode])
        assert page.goto("/plans/").url.startswith(f"{sso['url']}/accounts/login/")
    # A valid token re-signed the same way is accepted: the refusals above are the claim
    # checks', not a distrust of the endpoint's key.
    endpoint.mode = "resign"
    page.goto("/accounts/login/")
    page.get_by_test_id("sso-sign-in").click()
    page.wait_for_url(f"{sso['url']}/plans/")
    page.context.close()
    endpoint.mode = "relay"

    # A tampered state: the authorization request leaves with another state than the one
    # this browser was given (the provider returns whatever state it was sent).
    page = sso_page(chromium, sso)
    page.goto("/accounts/login/")
    start = page.request.get(f"{sso['url']}/accounts/oidc/start/", max_redirects=0)
    assert start.status == 302
    parts = urlsplit(start.headers["location"])
    assert parts.netloc == urlsplit(sso["issuer"]).netloc
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert query["code_challenge_method"] == "S256" and query["code_challenge"]
    query["state"] = query["state"][::-1]
    page.goto(f"{sso['issuer']}{parts.path}?{urlencode(query)}")
    page.locator("input[name=login]").fill("ray-sso")
    page.locator("input[name=password]").fill("any password")
    page.get_by_role("button", name="Sign-in").click()
    page.get_by_role("button", name="Continue").click()
    page.wait_for_url(f"{sso['url']}/accounts/oidc/callback/**")
    assert page.get_by_test_id("sign-in-refused").is_visible()
    assert "state does not match" in page.locator("main").inner_text()
    assert page.goto("/plans/").url.startswith(f"{sso['url']}/accounts/login/")

    assert orm(lambda: decisions_and_state(plan["id"])) == (0, "awaiting_approval")
    # Only the one accepted sign-in made anyone; each refusal is in the audit trail.
    assert orm(lambda: OidcIdentity.objects.filter(subject="ray-sso").count()) == 1
    refusals = orm(lambda: AuditEvent.objects.filter(kind="reviewer.sign_in_refused").count())
    assert refusals == len(REFUSALS) + 1
