"""Single sign-on against a real OpenID provider (panva/oidc-provider under Node, on
127.0.0.1), driven in Chromium: sign in through the provider, land on the queue, approve;
sign out here and at the provider; a person whose groups claim does not name reviewers
gets no permission, and a page saying who they are, what they lack and how to sign out;
and every way an answer can be wrong (a tampered state, a wrong nonce, an expired ID
token, another audience, an unknown issuer, an unpublished key) is refused with a page
saying so, with nobody signed in and no decision recorded.

The provider is strict, as many hosted ones are: it offers no ``groups`` scope (the
groups claim comes with ``profile``) and answers invalid_scope to a request for one
(tests/e2e/conftest.py, OIDC_PROVIDER_SCOPES). The web server asks for the scopes its
discovery document lists, so sign-in works with the default settings, and a refusal
from the provider is one log line, a sentence for the person and the error for staff.
The web server writes an access log, which holds no authorization code.

The wrong ID tokens come from the token endpoint the web server is configured with
(tests/oidc/support.py): it relays the provider's answer with one claim changed and the
token re-signed under a key it publishes, as a provider issuing bad tokens would; the
tampered state is the browser's doing (the callback is replayed with another state)."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from tests.e2e.support import eventually, orm

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


def web_log(live_logs) -> str:
    """The SSO web server's log (tests/e2e/conftest.py, sso_web)."""
    return (live_logs / "web-sso.log").read_text(errors="replace")


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

    # The page says who is signed in, what they lack and where it comes from, in the
    # product's layout (its stylesheet applied), and signs out here and at the provider.
    assert page.get_by_role("heading", name="You cannot open this page").is_visible()
    assert page.get_by_test_id("signed-in-as").inner_text() == (
        "You are signed in as olga Example (olga-sso)."
    )
    assert "approvals.review_plan" in page.get_by_test_id("missing-permission").inner_text()
    group = page.get_by_test_id("missing-group").inner_text()
    assert "Example SSO makes you a reviewer when the groups claim" in group
    assert "names the group reviewers; this time it did not" in group
    header = page.locator("header.top")
    assert header.evaluate("el => getComputedStyle(el).display") == "flex"
    assert page.get_by_role("link", name="Dashboard").count() == 0
    page.get_by_test_id("sign-out").click()
    page.wait_for_url(f"{sso['issuer']}/session/end**")
    page.get_by_role("button", name="Yes, sign me out").click()
    page.wait_for_url(f"{sso['url']}/accounts/login/")
    assert "/accounts/login/" in page.goto("/plans/").url


def test_no_access_log_line_holds_the_authorization_code(chromium, sso, live_logs):
    page = sso_page(chromium, sso)
    asked: list[str] = []  # the authorization request, and the callback with the code
    page.on("request", lambda request: asked.append(request.url))
    sign_in_at_provider(page, "ray-sso")
    page.wait_for_url(f"{sso['url']}/plans/")

    # The default scopes, cut to what the provider's discovery document lists.
    (authorize,) = [u for u in asked if u.startswith(f"{sso['issuer']}/auth?")]
    assert parse_qs(urlsplit(authorize).query)["scope"] == ["openid email profile"]
    (back,) = [u for u in asked if "/accounts/oidc/callback/?" in u]
    code = parse_qs(urlsplit(back).query)["code"][0]
    assert len(code) > 20

    log = eventually(
        lambda: (text := web_log(live_logs)) and "GET /accounts/oidc/callback/ " in text and text,
        what="the callback's access line",
    )
    assert re.search(r'uvicorn\.access .*"GET /accounts/oidc/callback/ HTTP/1\.1" 302', log)
    assert code not in log
    assert not re.search(r"[?&](code|state)=", log)


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


def test_a_provider_that_refuses_a_scope_is_explained_and_logged_in_one_line(
    chromium, sso, live_logs
):
    from actions.lib.models import AuditEvent

    def staff(is_staff: bool):
        from django.contrib.auth import get_user_model

        get_user_model().objects.filter(username="rita").update(is_staff=is_staff)

    orm(lambda: staff(True))
    line = 'provider error=invalid_scope error_description="scope not offered: groups"'
    before = web_log(live_logs).count(line)

    # The request leaves with the groups scope, as with an explicit COUNTERSIGN_OIDC_SCOPES
    # naming it: the provider sends the browser back with invalid_scope.
    page = sso_page(chromium, sso)
    page.goto("/accounts/login/")
    start = page.request.get(f"{sso['url']}/accounts/oidc/start/", max_redirects=0)
    parts = urlsplit(start.headers["location"])
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query["scope"] += " groups"
    page.goto(f"{sso['issuer']}{parts.path}?{urlencode(query)}")
    page.wait_for_url(f"{sso['url']}/accounts/oidc/callback/**")

    # The person reads what happened and what to do; the error code to pass on.
    assert page.get_by_test_id("sign-in-refused").inner_text() == (
        "Nobody was signed in: the identity provider refused the sign-in."
    )
    assert "Ask your administrator to fix them" in page.get_by_test_id("sign-in-hint").inner_text()
    assert page.get_by_test_id("provider-error").inner_text() == "invalid_scope"
    assert page.goto("/plans/").url.startswith(f"{sso['url']}/accounts/login/")

    # One log line with the provider's error and description.
    eventually(lambda: web_log(live_logs).count(line) == before + 1, what="the refusal's line")
    (logged,) = [entry for entry in web_log(live_logs).splitlines() if line in entry][before:]
    assert "WARNING approvals.identity.oidc single sign-on refused: " in logged
    data = orm(lambda: AuditEvent.objects.get(kind="reviewer.sign_in_refused").data)
    assert data["provider_error"] == "invalid_scope"

    # An administrator (staff) reads it on the dashboard.
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("rita")
    page.get_by_label("Password").fill("pw-rita")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{sso['url']}/plans/")
    page.get_by_role("link", name="Dashboard").click()
    notice = page.get_by_test_id("sign-in-refusals")
    assert "1 single sign-on refused in the last 24 hours." in notice.inner_text()
    assert page.get_by_test_id("sign-in-provider-error").inner_text() == "invalid_scope"
    assert "scope not offered: groups" in notice.inner_text()


def test_the_groups_claim_decides_who_may_decide_an_invoice(chromium, sso, agent_api, upstream):
    """The demo's rule gives invoices to billing-approvers; membership comes from the
    provider's groups claim at sign-in. A support lead is refused (403, audited, nothing
    decided); a billing approver approves and the invoice is sent."""
    import json

    import yaml

    from actions.catalog import load_catalog
    from tests.conftest import demo_catalog_text

    section = yaml.safe_load(demo_catalog_text(decision_rules=True))["reviewers"]
    load_catalog(json.dumps({"version": 1, "reviewers": section}))

    bill = sso_page(chromium, sso)
    sign_in_at_provider(bill, "bill-sso")
    bill.wait_for_url(f"{sso['url']}/plans/")
    lena = sso_page(chromium, sso)
    sign_in_at_provider(lena, "lena-sso")
    lena.wait_for_url(f"{sso['url']}/plans/")

    created = agent_api.http.post(
        "/plans", json={"action": "send_invoice", "input": {"invoice_id": "inv-2001"}}
    )
    assert created.status_code == 201, created.text
    plan = created.json()

    lena.goto(f"/plans/{plan['id']}/")
    assert lena.get_by_test_id("cannot-decide").is_visible()
    assert lena.locator("#approve").count() == 0
    csrf = lena.locator("input[name=csrfmiddlewaretoken]").first.get_attribute("value")
    refused = lena.request.post(
        f"{sso['url']}/plans/{plan['id']}/decide",
        form={
            "decision": "approve",
            "fingerprint": plan["fingerprint"],
            "csrfmiddlewaretoken": csrf,
        },
        headers={"Referer": f"{sso['url']}/plans/{plan['id']}/"},
    )
    assert refused.status == 403

    def refusal_recorded():
        from actions.lib.models import AuditEvent

        assert decisions_and_state(plan["id"]) == (0, "awaiting_approval")
        event = AuditEvent.objects.get(plan_id=plan["id"], kind="approval.not_eligible")
        assert event.actor == "user:lena-sso"

    orm(refusal_recorded)

    bill.goto(f"/plans/{plan['id']}/")
    bill.locator("#approve").click()  # labelled by the action: "Send invoice inv-2001"
    bill.get_by_test_id("plan-status").filter(has_text="Completed").wait_for(timeout=15_000)
    assert agent_api.get(plan["id"])["status"] == "completed"

    def memberships():
        from django.contrib.auth import get_user_model

        from approvals.models import Approval

        users = get_user_model().objects
        assert set(users.get(username="bill-sso").groups.values_list("name", flat=True)) == {
            "reviewers",
            "billing-approvers",
        }
        assert users.get(username="lena-sso").groups.filter(name="support-leads").exists()
        approval = Approval.objects.get(plan_id=plan["id"])
        assert approval.reviewer.username == "bill-sso"
        assert approval.counted_for == "billing-approvers"

    orm(memberships)
