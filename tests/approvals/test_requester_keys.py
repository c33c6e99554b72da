"""The provider's keys for on-behalf-of tokens (approvals/identity/requester.py), from a real JWKS
served over HTTP on 127.0.0.1: read once and kept, read again at once for a key id not
among them (a rotation), but not more often than JWKS_REFETCH_SECONDS for made-up ones;
a JWKS that is too large or unreadable refuses the token, never accepts it. (Tokens
from the real OpenID provider: tests/e2e/test_on_behalf_of.py.)"""

from __future__ import annotations

import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from django.test import override_settings
from jwt.algorithms import RSAAlgorithm

from approvals.identity import requester
from approvals.identity.requester import OnBehalfOfRefused, requester_from_token
from tests.oidc.support import JsonServer

CLIENT_ID = "countersign-test"


def rsa_key(kid: str):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    return key, {**public, "kid": kid, "alg": "RS256", "use": "sig"}


class Jwks(JsonServer):
    path = "/jwks"

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[dict] = []

    def answer(self) -> object:
        return {"keys": self.keys}

    def token(self, key, kid: str, **claims) -> str:
        now = int(time.time())
        body = {
            "iss": self.issuer,
            "aud": CLIENT_ID,
            "sub": "ada-123",
            "iat": now,
            "exp": now + 600,
            "groups": ["billing"],
            "name": "Ada Lovelace",
            "email": "ada@example.test",
            **claims,
        }
        body = {k: v for k, v in body.items() if v is not None}  # None: left out
        return jwt.encode(body, key, algorithm="RS256", headers={"kid": kid})


@pytest.fixture
def jwks(db):
    served = Jwks()
    requester.forget_keys()
    with override_settings(
        COUNTERSIGN_OIDC=True,
        COUNTERSIGN_OIDC_ISSUER=served.issuer,
        OIDC_RP_CLIENT_ID=CLIENT_ID,
        OIDC_OP_JWKS_ENDPOINT=f"{served.issuer}/jwks",
        OIDC_OP_TOKEN_ENDPOINT=f"{served.issuer}/token",
        OIDC_OP_USER_ENDPOINT=f"{served.issuer}/me",
        OIDC_RP_SIGN_ALGO="RS256",
        OIDC_TIMEOUT=2.0,
    ):
        yield served
    requester.forget_keys()
    served.stop()


def test_the_keys_are_read_once_and_kept(jwks):
    key, public = rsa_key("k1")
    jwks.keys = [public]
    for _ in range(3):
        person = requester_from_token(jwks.token(key, "k1"))
    assert (person.issuer, person.subject, person.groups) == (jwks.issuer, "ada-123", ("billing",))
    assert (person.name, person.email) == ("Ada Lovelace", "ada@example.test")
    assert jwks.requests == 1


def test_a_rotated_key_is_found_by_reading_the_keys_again(jwks, monkeypatch):
    old, old_public = rsa_key("old")
    new, new_public = rsa_key("new")
    jwks.keys = [old_public]
    requester_from_token(jwks.token(old, "old"))
    jwks.keys = [old_public, new_public]
    monkeypatch.setattr(requester, "JWKS_REFETCH_SECONDS", 0.0)
    time.sleep(0.01)
    assert requester_from_token(jwks.token(new, "new")).subject == "ada-123"
    assert jwks.requests == 2


def test_made_up_key_ids_do_not_make_us_read_the_keys_each_time(jwks, monkeypatch):
    # Well inside the window, however slow a loaded machine runs this test.
    monkeypatch.setattr(requester, "JWKS_REFETCH_SECONDS", 3600.0)
    key, public = rsa_key("k1")
    jwks.keys = [public]
    requester_from_token(jwks.token(key, "k1"))
    for n in range(5):
        with pytest.raises(OnBehalfOfRefused, match="does not publish"):
            requester_from_token(jwks.token(key, f"made-up-{n}"))
    assert jwks.requests == 1


def test_while_the_keys_cannot_be_read_again_the_last_ones_count(jwks, monkeypatch):
    key, public = rsa_key("k1")
    jwks.keys = [public]
    requester_from_token(jwks.token(key, "k1"))
    jwks.status = 500
    monkeypatch.setattr(requester, "JWKS_FRESH_SECONDS", 0.0)  # stale at once
    monkeypatch.setattr(requester, "JWKS_REFETCH_SECONDS", 0.0)
    time.sleep(0.01)
    assert requester_from_token(jwks.token(key, "k1")).subject == "ada-123"
    assert jwks.requests == 2
    # One attempt per JWKS_REFETCH_SECONDS, not one per request.
    monkeypatch.setattr(requester, "JWKS_REFETCH_SECONDS", 3600.0)
    for _ in range(3):
        requester_from_token(jwks.token(key, "k1"))
    assert jwks.requests == 2


@pytest.mark.parametrize("what", ["too large", "not json", "status 500"])
def test_keys_that_cannot_be_read_refuse_the_token(jwks, what):
    key, public = rsa_key("k1")
    if what == "too large":
        jwks.body = b'{"keys": [' + b" " * (requester.JWKS_MAX_BYTES + 1) + b"]}"
    elif what == "not json":
        jwks.body = b"<html>"
    else:
        jwks.status = 500
    with pytest.raises(OnBehalfOfRefused, match="keys cannot be read now"):
        requester_from_token(jwks.token(key, "k1"))


def test_a_token_without_an_expiry_or_with_none_as_algorithm_is_refused(jwks):
    key, public = rsa_key("k1")
    jwks.keys = [public]
    with pytest.raises(OnBehalfOfRefused, match="no expiry or issue time"):
        requester_from_token(jwks.token(key, "k1", exp=None))
    unsigned = jwt.encode(
        {"iss": jwks.issuer, "aud": CLIENT_ID, "sub": "x", "iat": 1, "exp": 2**31},
        None,
        algorithm="none",
        headers={"kid": "k1"},
    )
    with pytest.raises(OnBehalfOfRefused):
        requester_from_token(unsigned)


def test_without_single_sign_on_the_header_is_refused(db):
    with override_settings(COUNTERSIGN_OIDC=False):
        with pytest.raises(OnBehalfOfRefused, match="needs single sign-on"):
            requester_from_token("eyJ.eyJ.sig")


def test_the_groups_are_kept_whole_or_the_token_is_refused(jwks):
    """A group cut short or left out could let a plan miss a decision rule or a policy
    that names it, so the groups are kept exactly as the claim names them, and a token
    that lists more than MAX_GROUPS is refused rather than read in part."""
    key, public = rsa_key("k1")
    jwks.keys = [public]
    long_name = "cn=contractors,ou=" + "x" * 150 + ",dc=example,dc=test"
    person = requester_from_token(jwks.token(key, "k1", groups=[long_name, "billing"]))
    assert person.groups == ("billing", long_name)
    assert person.stored()["groups"] == ["billing", long_name]
    many = [f"g{n:03}" for n in range(requester.MAX_GROUPS)]
    assert len(requester_from_token(jwks.token(key, "k1", groups=many)).groups) == len(many)
    with pytest.raises(OnBehalfOfRefused, match=f"more than {requester.MAX_GROUPS} groups"):
        requester_from_token(jwks.token(key, "k1", groups=[*many, "zz-contractors"]))


def test_a_subject_longer_than_openid_allows_is_refused_not_cut_short(jwks):
    key, public = rsa_key("k1")
    jwks.keys = [public]
    assert requester_from_token(jwks.token(key, "k1", sub="s" * 255)).subject == "s" * 255
    with pytest.raises(OnBehalfOfRefused, match="names nobody"):
        requester_from_token(jwks.token(key, "k1", sub="s" * 256))
