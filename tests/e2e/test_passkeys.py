"""Passkey-signed approvals in Chromium with its virtual authenticator (CDP WebAuthn
domain), against the live web server whose policy signs irreversible plans and the live
worker: two reviewers register passkeys and approve an irreversible plan with them, and it
executes; an assertion replayed onto another plan, a signature over another fingerprint,
an assertion without user presence and one from an unregistered credential are refused,
nothing recorded; an approval row written straight into the database is refused by the
worker and reported by ``manage.py verify_signed_approvals``."""

from __future__ import annotations

import base64
import uuid

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from playwright.sync_api import expect

from tests.e2e.support import orm

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

SIGN_WITH = """async ({fingerprint, challenge, allow}) => {
  const form = document.querySelector("form[data-passkey-sign]");
  const body = new FormData();
  body.append("fingerprint", fingerprint);
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  const r = await fetch(form.getAttribute("data-passkey-sign"),
                        {method: "POST", headers: {"X-CSRFToken": csrf}, body});
  const answer = await r.json();
  if (challenge) answer.options.challenge = challenge;
  if (allow) answer.options.allowCredentials = [{type: "public-key", id: allow}];
  const credential = await navigator.credentials.get(
    {publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(answer.options)});
  return {assertion: JSON.stringify(credential.toJSON()), nonce: answer.nonce};
}"""

SUBMIT_WITH = """({assertion, nonce}) => {
  const form = document.querySelector("form[data-passkey-sign]");
  form.elements.assertion.value = assertion;
  form.elements.nonce.value = nonce;
}"""


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def with_authenticator(page) -> tuple[object, str]:
    cdp = page.context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    made = cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )
    return cdp, made["authenticatorId"]


def reviewer_with_passkey(chromium, sso, username: str, password: str):
    page = chromium(base_url=sso["url"])
    cdp, authenticator = with_authenticator(page)
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/plans/")
    page.goto("/plans/passkeys/")
    page.get_by_label("Name (to tell your passkeys apart)").fill(f"{username}'s laptop")
    page.get_by_role("button", name="Register a passkey").click()
    expect(page.get_by_test_id("passkeys")).to_contain_text(f"{username}'s laptop")
    return page, cdp, authenticator


def propose_delete(api, contact_id: str) -> dict:
    response = api.http.post(
        "/plans", json={"action": "delete_contact", "input": {"contact_id": contact_id}}
    )
    assert response.status_code == 201, response.text
    return response.json()


def approve_in_page(page, plan: dict, contact_id: str) -> None:
    page.goto(f"/plans/{plan['id']}/")
    page.get_by_test_id("confirm").fill(contact_id)
    # The page's script signs first, then posts the form.
    with page.expect_navigation():
        page.get_by_role("button", name=f"Approve {plan['short_code']}").click()


def test_two_reviewers_sign_an_irreversible_plan_and_it_executes(
    chromium, sso, sso_agent_api, upstream
):
    plan = propose_delete(sso_agent_api, "c-1001")
    rita, *_ = reviewer_with_passkey(chromium, sso, "rita", "pw-rita")
    rita.goto(f"/plans/{plan['id']}/")
    # The page shows what the passkey signs: this plan's id and full fingerprint.
    assert rita.get_by_test_id("signed-fingerprint").inner_text() == plan["fingerprint"]
    assert plan["id"] in rita.get_by_test_id("signing").inner_text()
    approve_in_page(rita, plan, "c-1001")
    assert rita.get_by_role("status").filter(has_text="Approval recorded.").count() == 1

    sam, *_ = reviewer_with_passkey(chromium, sso, "sam", "pw-sam")
    approve_in_page(sam, plan, "c-1001")
    assert sso_agent_api.wait_for(plan["id"])["status"] == "completed"
    assert [w["method"] for w in upstream.writes()] == ["DELETE"]

    def stored():
        from approvals.models import Approval

        rows = list(Approval.objects.filter(plan_id=plan["id"]).select_related("passkey"))
        assert len(rows) == 2
        for row in rows:
            assert row.passkey.user_id == row.reviewer_id
            assert set(row.assertion) >= {
                "credential_id",
                "authenticator_data",
                "client_data_json",
                "signature",
                "nonce",
            }
        with override_settings(
            COUNTERSIGN_WEBAUTHN_RP_ID="localhost", COUNTERSIGN_WEBAUTHN_ORIGINS=[sso["url"]]
        ):
            call_command("verify_signed_approvals")

    orm(stored)


def test_replayed_foreign_unregistered_and_absent_signatures_are_refused(
    chromium, sso, sso_agent_api, upstream
):
    from approvals.identity.passkeys import approval_challenge

    first = propose_delete(sso_agent_api, "c-1001")
    second = propose_delete(sso_agent_api, "c-1002")
    page, cdp, authenticator = reviewer_with_passkey(chromium, sso, "rita", "pw-rita")

    def attempt(plan, signed, contact_id) -> str:
        page.goto(f"/plans/{plan['id']}/")
        page.evaluate(SUBMIT_WITH, signed)
        page.get_by_test_id("confirm").fill(contact_id)
        with page.expect_navigation():
            page.get_by_role("button", name=f"Approve {plan['short_code']}").click()
        return page.locator(".msg-error").inner_text()

    # 1. Signed for the first plan, posted on the second: the nonce is the first plan's.
    page.goto(f"/plans/{first['id']}/")
    for_first = page.evaluate(SIGN_WITH, {"fingerprint": first["fingerprint"]})
    assert "for another plan" in attempt(second, for_first, "c-1002")
    # ... and with a nonce issued for the second plan, the signature covers the first.
    page.goto(f"/plans/{second['id']}/")
    nonce = page.evaluate(SIGN_WITH, {"fingerprint": second["fingerprint"]})["nonce"]
    replay = {"assertion": for_first["assertion"], "nonce": nonce}
    assert "signature does not verify" in attempt(second, replay, "c-1002")

    # 2. A signature over another fingerprint (the challenge the page was given, replaced).
    page.goto(f"/plans/{second['id']}/")
    forged_nonce = "n-" + uuid.uuid4().hex
    other = b64url(
        approval_challenge(
            plan_id=second["id"], fingerprint="0" * 64, decision="approve", nonce=forged_nonce
        )
    )
    signed = page.evaluate(SIGN_WITH, {"fingerprint": second["fingerprint"], "challenge": other})
    assert "signature does not verify" in attempt(second, signed, "c-1002")

    # 3. The authenticator reports no user presence.
    cdp.send(
        "WebAuthn.setResponseOverrideBits", {"authenticatorId": authenticator, "isBadUP": True}
    )
    page.goto(f"/plans/{second['id']}/")
    signed = page.evaluate(SIGN_WITH, {"fingerprint": second["fingerprint"]})
    assert "User was not present" in attempt(second, signed, "c-1002")
    cdp.send("WebAuthn.setResponseOverrideBits", {"authenticatorId": authenticator})

    # 4. A credential the authenticator holds but nobody registered here.
    unregistered = b64url(uuid.uuid4().bytes)
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    pkcs8 = key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    cdp.send(
        "WebAuthn.addCredential",
        {
            "authenticatorId": authenticator,
            "credential": {
                "credentialId": base64.b64encode(
                    base64.urlsafe_b64decode(unregistered + "==")
                ).decode(),
                "isResidentCredential": False,
                "rpId": "localhost",
                "privateKey": base64.b64encode(pkcs8).decode(),
                "signCount": 0,
            },
        },
    )
    page.goto(f"/plans/{second['id']}/")
    signed = page.evaluate(SIGN_WITH, {"fingerprint": second["fingerprint"], "allow": unregistered})
    assert "not registered to you" in attempt(second, signed, "c-1002")

    # 5. No signature at all (a form posted without the page's script).
    page.goto(f"/plans/{second['id']}/")
    csrf = page.locator("#decide-form input[name=csrfmiddlewaretoken]").input_value()
    answer = page.request.post(
        f"/plans/{second['id']}/decide",
        form={
            "csrfmiddlewaretoken": csrf,
            "fingerprint": second["fingerprint"],
            "decision": "approve",
            "confirm": "c-1002",
        },
    )
    assert "needs JavaScript" in answer.text()

    def nothing_recorded():
        from actions.lib.models import AuditEvent
        from approvals.models import Approval

        assert not Approval.objects.filter(plan_id__in=[first["id"], second["id"]]).exists()
        return AuditEvent.objects.filter(kind="approval.signature_refused").count()

    assert orm(nothing_recorded) == 6
    assert upstream.writes() == []


def test_without_javascript_a_signed_plan_cannot_be_approved_and_the_page_says_why(
    chromium, sso, sso_agent_api
):
    plan = propose_delete(sso_agent_api, "c-1001")
    page = chromium(base_url=sso["url"], java_script_enabled=False)
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("rita")
    page.get_by_label("Password").fill("pw-rita")
    page.get_by_role("button", name="Log in").click()
    page.goto(f"/plans/{plan['id']}/")
    assert "needs JavaScript" in page.get_by_test_id("needs-javascript").inner_text()
    assert page.get_by_test_id("no-passkey").is_visible()
    assert page.get_by_role("button", name=f"Approve {plan['short_code']}").is_disabled()


def test_a_forged_approval_row_is_refused_by_the_worker_and_reported(
    sso, sso_agent_api, upstream, reviewer, second_reviewer
):
    from datetime import timedelta

    from django.utils import timezone

    from actions.lib import dispatch
    from actions.lib.models import AuditEvent
    from approvals.models import Approval, Plan

    plan = propose_delete(sso_agent_api, "c-1003")
    # What someone with write access to the database, and no authenticator, can do.
    for person in (reviewer, second_reviewer):
        Approval.objects.create(
            plan_id=plan["id"],
            reviewer=person,
            decision="approve",
            fingerprint=plan["fingerprint"],
            expires_at=timezone.now() + timedelta(minutes=5),
            assertion={"signature": "AAAA", "nonce": "made-up"},
        )
    Plan.objects.filter(id=plan["id"]).update(status="approved", enqueued_at=timezone.now())
    dispatch.publish(dispatch.EXECUTE_PLAN, plan["id"])

    outcome = sso_agent_api.wait_for(plan["id"])
    assert outcome["status"] == "refused"
    assert "not validly signed" in outcome["outcome"]["detail"]
    assert upstream.writes() == []
    assert AuditEvent.objects.filter(plan_id=plan["id"], kind="execution.refused").exists()

    with (
        override_settings(
            COUNTERSIGN_WEBAUTHN_RP_ID="localhost", COUNTERSIGN_WEBAUTHN_ORIGINS=[sso["url"]]
        ),
        pytest.raises(CommandError, match="2 of 2 signed approvals do not verify"),
    ):
        call_command("verify_signed_approvals")
