"""Passkeys, and approvals signed with them (WebAuthn, with py_webauthn).

A signed approval is a WebAuthn assertion whose challenge is

    SHA-256("countersign-approval-v1" NUL canonical JSON of
            {"plan": <plan id>, "fingerprint": <the plan's fingerprint>,
             "decision": "approve", "nonce": <a single-use server nonce>})

so the authenticator's signature covers exactly one decision on exactly one plan as the
reviewer saw it. The server issues the nonce (bound to the plan, the fingerprint and the
reviewer, usable once, for NONCE_SECONDS), verifies the assertion against the reviewer's
registered public key (origin, RP ID, user presence and user verification, the signature
counter), and stores it with the approval. The worker verifies it again before sending,
offline, from what is stored (``assertion_problem``); so does
``manage.py verify_signed_approvals`` for every approval. A row written into the database
without the reviewer's authenticator cannot carry a signature that verifies.

Which plans need one: those whose fingerprinted policy says ``signed_approval`` (from the
action's ``approval: {signed: ...}``, by default the classes in
COUNTERSIGN_SIGNED_APPROVAL_CLASSES), and, so that a policy rewritten in the database
cannot drop it, those whose action says so now.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone
from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import (
    base64url_to_bytes,
    bytes_to_base64url,
    parse_authentication_credential_json,
)
from webauthn.helpers.exceptions import (
    InvalidAttestationObjectStructure,
    InvalidAuthenticationResponse,
    InvalidAuthenticatorDataStructure,
    InvalidCBORData,
    InvalidJSONStructure,
    InvalidRegistrationResponse,
)
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from actions.lib.actors import user_actor
from actions.lib.audit import audit_record
from actions.lib.exceptions import InvalidInput, NotAllowed

from ..models import Approval, Passkey, Plan

# Whatever a browser (or anyone posting the form) sends may be malformed in any way: each
# of these is a refusal, never a 500.
MALFORMED = (
    InvalidRegistrationResponse,
    InvalidAuthenticationResponse,
    InvalidJSONStructure,
    InvalidCBORData,
    InvalidAuthenticatorDataStructure,
    InvalidAttestationObjectStructure,
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
)
NONCE_SECONDS = 300
TIMEOUT_MS = 120_000
DOMAIN = b"countersign-approval-v1\0"


class SignatureRefused(NotAllowed):
    """The approval's passkey signature is missing or does not verify."""


def plan_needs_signature(plan: Plan) -> bool:
    if plan.policy.get("signed_approval"):
        return True
    try:
        return bool(plan.action.spec.approval.signed)
    except Exception:  # noqa: BLE001 - an action that no longer loads is refused elsewhere
        return False


def approval_challenge(*, plan_id, fingerprint: str, decision: str, nonce: str) -> bytes:
    document = json.dumps(
        {"decision": decision, "fingerprint": fingerprint, "nonce": nonce, "plan": str(plan_id)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(DOMAIN + document.encode()).digest()


def _active_passkeys(user):
    return Passkey.objects.filter(user=user, revoked_at__isnull=True)


# --- registering a passkey ------------------------------------------------------------------


def _registration_key(user) -> str:
    return f"webauthn-registration:{user.pk}"


def passkey_registration_options(*, user) -> str:
    """Options for navigator.credentials.create(), as JSON; the challenge is kept for
    NONCE_SECONDS, for this user only."""
    options = generate_registration_options(
        rp_id=settings.COUNTERSIGN_WEBAUTHN_RP_ID,
        rp_name="Countersign",
        user_id=str(user.pk).encode(),
        user_name=user.get_username(),
        timeout=TIMEOUT_MS,
        exclude_credentials=[
            PublicKeyCredentialDescriptor(id=base64url_to_bytes(p.credential_id))
            for p in _active_passkeys(user)
        ],
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
    )
    cache.set(_registration_key(user), bytes_to_base64url(options.challenge), NONCE_SECONDS)
    return options_to_json(options)


def passkey_register(*, user, credential: Any, name: str) -> Passkey:
    challenge = cache.get(_registration_key(user))
    if not challenge or not cache.delete(_registration_key(user)):
        raise InvalidInput("the registration expired; start again")
    name = (name or "").strip()[:100] or "passkey"
    try:
        verified = verify_registration_response(
            credential=credential,
            expected_challenge=base64url_to_bytes(challenge),
            expected_rp_id=settings.COUNTERSIGN_WEBAUTHN_RP_ID,
            expected_origin=settings.COUNTERSIGN_WEBAUTHN_ORIGINS,
            require_user_verification=True,
        )
    except MALFORMED:
        raise InvalidInput("the passkey's registration does not verify") from None
    credential_id = bytes_to_base64url(verified.credential_id)
    transports = (
        credential.get("response", {}).get("transports") if isinstance(credential, dict) else []
    )
    with transaction.atomic():
        if Passkey.objects.filter(credential_id=credential_id).exists():
            raise InvalidInput("this passkey is already registered")
        passkey = Passkey.objects.create(
            user=user,
            name=name,
            credential_id=credential_id,
            public_key=verified.credential_public_key,
            sign_count=verified.sign_count,
            transports=[t for t in (transports or []) if isinstance(t, str)][:8],
        )
        audit_record(
            kind="passkey.registered",
            actor=user_actor(user),
            data={"passkey": str(passkey.id), "name": name},
        )
    return passkey


def passkey_revoke(*, passkey_id, actor_user, by_admin: bool = False) -> Passkey:
    with transaction.atomic():
        passkeys = Passkey.objects.select_for_update()
        if not by_admin:
            passkeys = passkeys.filter(user=actor_user)
        passkey = passkeys.filter(id=passkey_id).first()
        if passkey is None:
            raise InvalidInput("no such passkey")
        if passkey.revoked_at is None:
            passkey.revoked_at = timezone.now()
            passkey.save(update_fields=["revoked_at"])
            audit_record(
                kind="passkey.revoked",
                actor=user_actor(actor_user),
                data={"passkey": str(passkey.id), "owner": passkey.user.get_username()},
            )
    return passkey


# --- signing an approval --------------------------------------------------------------------


def _nonce_key(nonce: str) -> str:
    return f"webauthn-approval-nonce:{hashlib.sha256(nonce.encode()).hexdigest()}"


def approval_signing_options(*, plan: Plan, user) -> dict[str, Any]:
    """Options for navigator.credentials.get(): a fresh nonce, and the challenge derived
    from it and the plan as shown. Refused when the reviewer has no passkey."""
    passkeys = list(_active_passkeys(user))
    if not passkeys:
        raise NotAllowed("register a passkey first: this approval must be signed with one")
    nonce = secrets.token_urlsafe(24)
    cache.set(
        _nonce_key(nonce),
        {"plan": str(plan.id), "user": user.pk, "fingerprint": plan.fingerprint},
        NONCE_SECONDS,
    )
    challenge = approval_challenge(
        plan_id=plan.id, fingerprint=plan.fingerprint, decision="approve", nonce=nonce
    )
    options = generate_authentication_options(
        rp_id=settings.COUNTERSIGN_WEBAUTHN_RP_ID,
        challenge=challenge,
        timeout=TIMEOUT_MS,
        allow_credentials=[
            PublicKeyCredentialDescriptor(id=base64url_to_bytes(p.credential_id)) for p in passkeys
        ],
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    return {"nonce": nonce, "options": json.loads(options_to_json(options))}


def approval_nonce_take(nonce: str) -> dict | None:
    """What a signing nonce was issued for, and the nonce spent (only one caller gets it).
    Called before the decision's transaction: no cache I/O under the plan's row lock."""
    if not nonce:
        return None
    key = _nonce_key(nonce)
    issued = cache.get(key)
    return issued if issued and cache.delete(key) else None


def approval_signature_verify(
    *, plan: Plan, reviewer, assertion: Any, nonce: str, issued: dict | None
) -> dict:
    """Check a signed approval as it arrives (``issued``: what approval_nonce_take found
    for ``nonce``); returns what to store with the approval, or raises SignatureRefused
    (the caller audits it). Runs under the plan's row lock."""
    if not isinstance(assertion, dict) or not nonce:
        raise SignatureRefused(
            "this approval must be signed with a passkey, which needs JavaScript in the browser"
        )
    if (
        not issued
        or issued.get("plan") != str(plan.id)
        or issued.get("user") != reviewer.pk
        or issued.get("fingerprint") != plan.fingerprint
    ):
        raise SignatureRefused("the signing request is unknown, expired, used, or for another plan")
    credential_id = str(assertion.get("id", ""))
    passkey = _active_passkeys(reviewer).filter(credential_id=credential_id).first()
    if passkey is None:
        raise SignatureRefused("this passkey is not registered to you")
    challenge = approval_challenge(
        plan_id=plan.id, fingerprint=plan.fingerprint, decision="approve", nonce=nonce
    )
    try:
        verified = verify_authentication_response(
            credential=assertion,
            expected_challenge=challenge,
            expected_rp_id=settings.COUNTERSIGN_WEBAUTHN_RP_ID,
            expected_origin=settings.COUNTERSIGN_WEBAUTHN_ORIGINS,
            credential_public_key=bytes(passkey.public_key),
            credential_current_sign_count=passkey.sign_count,
            require_user_verification=True,
        )
    except MALFORMED as exc:
        raise SignatureRefused(f"the passkey's signature does not verify: {_why(exc)}") from None
    Passkey.objects.filter(pk=passkey.pk).update(
        sign_count=verified.new_sign_count, last_used_at=timezone.now()
    )
    return {"passkey": passkey, "assertion": _stored(assertion, nonce)}


def _why(exc: Exception) -> str:
    return str(exc)[:120] if isinstance(exc, InvalidAuthenticationResponse) else "malformed"


def _stored(assertion: dict, nonce: str) -> dict:
    response = assertion.get("response") or {}
    return {
        "credential_id": str(assertion.get("id", "")),
        "authenticator_data": str(response.get("authenticatorData", "")),
        "client_data_json": str(response.get("clientDataJSON", "")),
        "signature": str(response.get("signature", "")),
        "user_handle": response.get("userHandle"),
        "nonce": nonce,
    }


def assertion_problem(approval: Approval, *, revoked_counts: bool = True) -> str | None:
    """Why a stored approval is not a valid signed approval of its plan (None if it is),
    from the database alone: the worker before sending, and verify_signed_approvals."""
    stored = approval.assertion or {}
    passkey = approval.passkey
    if approval.decision != Approval.Decision.APPROVE:
        return None
    if passkey is None or not stored:
        return "not signed with a passkey"
    if passkey.user_id != approval.reviewer_id:
        return "signed with another person's passkey"
    if revoked_counts and passkey.revoked_at is not None:
        return "the passkey that signed it was revoked"
    if stored.get("credential_id") != passkey.credential_id:
        return "the signature names another credential"
    challenge = approval_challenge(
        plan_id=approval.plan_id,
        fingerprint=approval.fingerprint,
        decision="approve",
        nonce=str(stored.get("nonce", "")),
    )
    credential = {
        "id": passkey.credential_id,
        "rawId": passkey.credential_id,
        "type": "public-key",
        "response": {
            "authenticatorData": stored.get("authenticator_data", ""),
            "clientDataJSON": stored.get("client_data_json", ""),
            "signature": stored.get("signature", ""),
            "userHandle": stored.get("user_handle"),
        },
    }
    try:
        verify_authentication_response(
            credential=parse_authentication_credential_json(credential),
            expected_challenge=challenge,
            expected_rp_id=settings.COUNTERSIGN_WEBAUTHN_RP_ID,
            expected_origin=settings.COUNTERSIGN_WEBAUTHN_ORIGINS,
            credential_public_key=bytes(passkey.public_key),
            # The counter moved on since; offline, the signature is what can be checked.
            credential_current_sign_count=0,
            require_user_verification=True,
        )
    except MALFORMED as exc:
        return f"the signature does not verify ({_why(exc)})"
    return None


def plan_signature_problem(plan: Plan) -> str | None:
    """For the worker: why the plan's approvals do not carry valid signatures (None when
    they all do, or when the plan needs none). Any approval of the plan that fails is
    enough to refuse: a row that verifies nowhere is a sign the database was written to."""
    if not plan_needs_signature(plan):
        return None
    approvals = plan.approvals.filter(decision=Approval.Decision.APPROVE).select_related("passkey")
    for approval in approvals:
        problem = assertion_problem(approval)
        if problem:
            return f"an approval is not validly signed: {problem}"
    return None
