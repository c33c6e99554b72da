"""The sign-in page with and without local passwords and single sign-on; which plans
need passkey-signed approvals, and what happens to one approved without a signature.
(The flows themselves, against a real OpenID provider and Chromium's virtual
authenticator, are tests/e2e/test_sso.py and tests/e2e/test_passkeys.py.)"""

from __future__ import annotations

import pytest
import yaml
from django.test import override_settings

from actions.catalog import load_catalog
from actions.lib.exceptions import NotAllowed
from actions.lib.models import AuditEvent
from approvals.identity.passkeys import approval_challenge, plan_signature_problem
from approvals.models import Approval, PlanStatus
from approvals.services import approval_record
from tests.conftest import demo_catalog_text

SSO = {
    "COUNTERSIGN_OIDC": True,
    "COUNTERSIGN_OIDC_NAME": "Example SSO",
}


@override_settings(**SSO)
def test_the_sign_in_page_offers_the_provider_and_local_passwords(client, db):
    page = client.get("/accounts/login/").content.decode()
    assert "Sign in with Example SSO" in page
    assert 'name="password"' in page


@override_settings(
    **SSO,
    COUNTERSIGN_LOCAL_LOGIN=False,
    AUTHENTICATION_BACKENDS=["approvals.identity.oidc.ReviewerOIDCBackend"],
)
def test_with_local_passwords_off_no_password_is_checked(client, reviewer):
    page = client.get("/accounts/login/").content.decode()
    assert "Sign in with Example SSO" in page and 'name="password"' not in page
    response = client.post("/accounts/login/", {"username": "rita", "password": "pw-rita"})
    assert response.status_code == 405
    assert client.get("/plans/").status_code == 302  # still signed out


def test_single_sign_on_routes_are_404_while_it_is_not_configured(client, db):
    assert client.get("/accounts/oidc/start/").status_code == 404
    assert client.get("/accounts/oidc/callback/?code=x&state=y").status_code == 404
    assert "Sign in with" not in client.get("/accounts/login/").content.decode()


def test_the_challenge_binds_plan_fingerprint_decision_and_nonce():
    base = {"plan_id": "p1", "fingerprint": "f" * 64, "decision": "approve", "nonce": "n"}
    challenge = approval_challenge(**base)
    for field, other in [
        ("plan_id", "p2"),
        ("fingerprint", "e" * 64),
        ("decision", "deny"),
        ("nonce", "m"),
    ]:
        assert approval_challenge(**{**base, field: other}) != challenge


@pytest.fixture
def signed_catalog(catalog, upstream):
    """The demo catalog loaded where irreversible approvals must be signed, and with one
    reversible action that asks for signatures itself."""
    document = yaml.safe_load(demo_catalog_text())
    document["actions"]["update_contact_email"]["approval"] = {
        "signed": True,
        "session_grant": True,
    }
    with override_settings(COUNTERSIGN_SIGNED_APPROVAL_CLASSES=["irreversible"]):
        load_catalog(yaml.safe_dump(document), base_urls={"demo": upstream.url})
        yield


def test_irreversible_actions_and_those_that_say_so_need_signatures(signed_catalog, make_plan):
    from actions.models import Action

    with override_settings(COUNTERSIGN_SIGNED_APPROVAL_CLASSES=["irreversible"]):
        delete = Action.objects.get(name="delete_contact").spec.approval
        update = Action.objects.get(name="update_contact_email").spec.approval
        memo = Action.objects.get(name="update_invoice_memo").spec.approval
        assert delete.signed and update.signed and not memo.signed
        # A grant signs nothing: the file's session_grant: true does not stand.
        assert not update.session_grant
        plan = make_plan("delete_contact", {"contact_id": "c-1001"})
    assert plan.policy["signed_approval"] is True
    assert (
        make_plan("update_invoice_memo", {"invoice_id": "inv-2001", "memo": "x"}).policy[
            "signed_approval"
        ]
        is False
    )


def test_an_approval_without_a_signature_is_refused_and_audited(
    signed_catalog, make_plan, reviewer, django_capture_on_commit_callbacks
):
    plan = make_plan("update_contact_email")
    with (
        django_capture_on_commit_callbacks(execute=False),
        pytest.raises(NotAllowed, match="needs JavaScript"),
    ):
        approval_record(
            plan_id=plan.id,
            reviewer=reviewer,
            decision="approve",
            fingerprint_seen=plan.fingerprint,
        )
    plan.refresh_from_db()
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert not Approval.objects.filter(plan=plan).exists()
    assert AuditEvent.objects.filter(plan=plan, kind="approval.signature_refused").exists()
    # A denial needs no signature.
    with django_capture_on_commit_callbacks(execute=False):
        approval_record(
            plan_id=plan.id, reviewer=reviewer, decision="deny", fingerprint_seen=plan.fingerprint
        )
    plan.refresh_from_db()
    assert plan.status == PlanStatus.DENIED


def test_the_worker_check_names_an_unsigned_row(signed_catalog, make_plan, reviewer):
    from datetime import timedelta

    from django.utils import timezone

    plan = make_plan("update_contact_email")
    assert plan_signature_problem(plan) is None  # nothing approved yet
    Approval.objects.create(
        plan=plan,
        reviewer=reviewer,
        decision="approve",
        fingerprint=plan.fingerprint,
        expires_at=timezone.now() + timedelta(minutes=5),
    )
    assert "not signed with a passkey" in plan_signature_problem(plan)


def test_the_admin_lists_passkeys_per_user_and_revokes_them(client, reviewer, second_reviewer):
    from django.contrib.auth import get_user_model

    from approvals.models import Passkey

    admin = get_user_model().objects.create_superuser("root", "root@example.test", "pw-root-1")
    mine = Passkey.objects.create(
        user=reviewer, name="rita's key", credential_id="AAAA", public_key=b"k"
    )
    other = Passkey.objects.create(
        user=second_reviewer, name="sam's key", credential_id="BBBB", public_key=b"k"
    )
    client.force_login(admin)
    page = client.get(
        "/admin/approvals/passkey/", {"user__id__exact": reviewer.pk}
    ).content.decode()
    assert "rita&#x27;s key" in page and "sam&#x27;s key" not in page
    response = client.post(
        "/admin/approvals/passkey/",
        {"action": "revoke", "_selected_action": [str(mine.pk)]},
    )
    assert response.status_code == 302
    mine.refresh_from_db()
    other.refresh_from_db()
    assert mine.revoked_at is not None and other.revoked_at is None
    event = AuditEvent.objects.get(kind="passkey.revoked")
    assert event.actor == "user:root" and event.data["owner"] == "rita"
    # The public key is never shown, and nothing can be added or deleted by hand.
    detail = client.get(f"/admin/approvals/passkey/{mine.pk}/change/").content.decode()
    assert "public_key" not in detail
    assert client.get("/admin/approvals/passkey/add/").status_code == 403


def test_a_reviewer_revokes_their_own_passkey_only(client, reviewer, second_reviewer):
    from approvals.models import Passkey

    mine = Passkey.objects.create(user=reviewer, name="mine", credential_id="CCCC", public_key=b"k")
    theirs = Passkey.objects.create(
        user=second_reviewer, name="theirs", credential_id="DDDD", public_key=b"k"
    )
    client.force_login(reviewer)
    assert "mine" in client.get("/plans/passkeys/").content.decode()
    client.post(f"/plans/passkeys/{theirs.pk}/revoke")
    client.post(f"/plans/passkeys/{mine.pk}/revoke")
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.revoked_at is not None and theirs.revoked_at is None


@pytest.mark.parametrize(
    "credential",
    [
        5,
        "not a credential",
        {"id": "x"},
        {"id": "x", "rawId": "x", "type": "public-key", "response": {}},
        {
            "id": "x",
            "rawId": "x",
            "type": "public-key",
            "response": {"clientDataJSON": "!!", "attestationObject": "%%"},
        },
    ],
)
def test_a_malformed_passkey_registration_is_refused_not_a_server_error(
    client, reviewer, credential
):
    from approvals.models import Passkey

    client.force_login(reviewer)
    assert client.post("/plans/passkeys/options").status_code == 200
    response = client.post(
        "/plans/passkeys/register",
        data={"credential": credential, "name": "mine"},
        content_type="application/json",
    )
    assert response.status_code == 422, response.content
    assert response.json() == {"error": "the passkey's registration does not verify"}
    assert not Passkey.objects.filter(user=reviewer).exists()
