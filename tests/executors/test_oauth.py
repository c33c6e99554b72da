"""OAuth2 client-credentials credentials, against the demo upstream's real token endpoint.

The worker (here: this process with the private key) exchanges the sealed client id and
secret for an access token, caches it until shortly before it expires, fetches a new one
after expiry or once after a 401, and never stores or shows the token or the secret.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.utils import timezone

from actions import oauth
from actions.models import Connector, Credential
from actions.services import credential_set
from actions.vault import VaultError
from approvals.models import Attempt, Plan, PlanStatus
from executors.vault import WriteKeyUnavailable, open_write_secret
from tests.conftest import OAUTH_CLIENT_ID, OAUTH_CLIENT_SECRET, secrets_in

SECRET = {"client_id": OAUTH_CLIENT_ID, "client_secret": OAUTH_CLIENT_SECRET}


def fresh(plan) -> Plan:
    return Plan.objects.get(pk=plan.pk)


def use_oauth(role: str, *, secret=SECRET, **config) -> Credential:
    """Replace the demo connector's ``role`` credential with an OAuth2 one."""
    connector = Connector.objects.get(name="demo")
    Credential.objects.filter(connector=connector, role=role).update(revoked_at=timezone.now())
    config = {"token_url": "/oauth/token", "scope": role, **config}
    return credential_set(
        connector=connector, role=role, secret=secret, scheme=Credential.Scheme.OAUTH2, **config
    )


@pytest.fixture
def oauth_write(catalog, executor_key):
    return use_oauth("write")


def stored_text(plan) -> str:
    """Everything recorded about the plan's execution, as text."""
    plan = fresh(plan)
    attempts = list(Attempt.objects.filter(plan=plan).values())
    return repr(attempts) + plan.outcome_detail


def test_a_plan_executes_with_an_oauth2_write_credential(upstream, oauth_write, approved, run):
    plan = approved()
    assert run(plan) == PlanStatus.COMPLETED
    assert upstream.token_requests() == 1
    [token] = upstream.issued_tokens()[-1:]
    [write] = upstream.writes()
    assert write["headers"]["authorization"] == f"Bearer {token}"
    attempt = Attempt.objects.get(plan=plan)
    assert attempt.request["headers"]["Authorization"] == "[redacted]"
    assert secrets_in(stored_text(plan), [token]) == []


def test_the_token_is_cached_until_shortly_before_it_expires(
    upstream, oauth_write, approved, run, monkeypatch
):
    assert run(approved()) == PlanStatus.COMPLETED
    assert run(approved(input={"contact_id": "c-1002", "email": "g@new.example"})) == (
        PlanStatus.COMPLETED
    )
    assert upstream.token_requests() == 1
    # The demo upstream's tokens live 300 s; at 280 s (inside the last 30 s) the worker
    # fetches a new one rather than risk presenting one that runs out on the way.
    start = oauth._clock()
    monkeypatch.setattr(oauth, "_clock", lambda: start + 280)
    assert run(approved(input={"contact_id": "c-1003", "email": "t@new.example"})) == (
        PlanStatus.COMPLETED
    )
    assert upstream.token_requests() == 2
    tokens = upstream.issued_tokens()[-2:]
    assert tokens[0] != tokens[1]
    assert upstream.writes()[-1]["headers"]["authorization"] == f"Bearer {tokens[1]}"


def test_a_401_fetches_a_new_token_once_and_sends_again(upstream, oauth_write, approved, run):
    assert run(approved()) == PlanStatus.COMPLETED
    upstream.revoke_tokens()  # the authorization server revoked what the worker holds
    plan = approved(input={"contact_id": "c-1002", "email": "g@new.example"})
    assert run(plan) == PlanStatus.COMPLETED
    assert upstream.token_requests() == 2
    statuses = [w["status"] for w in upstream.writes()]
    assert statuses == [200, 401, 200]
    assert "renewed access token" in Attempt.objects.get(plan=plan).error


def test_a_second_401_stands(upstream, oauth_write, approved, run):
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", status=401, times=2)
    plan = approved()
    state = run(plan)
    assert state != PlanStatus.COMPLETED
    assert upstream.token_requests() == 2  # the first token, and exactly one renewal
    assert [w["status"] for w in upstream.writes()] == [401, 401]
    assert Credential.objects.get(pk=oauth_write.pk).flagged_at is not None


def test_a_refused_client_refuses_the_plan_before_anything_is_sent(
    upstream, catalog, executor_key, approved, run
):
    wrong = {"client_id": OAUTH_CLIENT_ID, "client_secret": "not-the-secret-" + "x" * 20}
    use_oauth("write", secret=wrong)
    plan = approved()
    assert run(plan) == PlanStatus.REFUSED
    detail = fresh(plan).outcome_detail
    assert "refused before sending" in detail
    assert "token endpoint answered 401 (invalid_client)" in detail
    assert upstream.writes() == []
    assert "not-the-secret" not in stored_text(plan)


def test_the_token_endpoints_body_is_never_repeated(upstream, catalog, executor_key, approved, run):
    # client_secret_post puts the secret in the form body; the endpoint echoes it all back.
    use_oauth("write", client_auth=Credential.ClientAuth.BODY)
    upstream.add_fault(path_prefix="/oauth/token", status=400, body="echo-request")
    plan = approved()
    assert run(plan) == PlanStatus.REFUSED
    text = stored_text(plan)
    assert "token endpoint answered 400" in text
    assert secrets_in(text) == []
    assert "request_body" not in text and OAUTH_CLIENT_ID not in text


def test_an_unavailable_token_endpoint_defers_the_plan(upstream, oauth_write, approved, run):
    upstream.add_fault(path_prefix="/oauth/token", status=503)
    plan = approved()
    assert run(plan) == "deferred"
    assert fresh(plan).status == PlanStatus.APPROVED
    assert "token endpoint answered 503" in Attempt.objects.get(plan=plan).error
    assert upstream.writes() == []


def test_the_client_body_authentication_works_too(upstream, catalog, executor_key, approved, run):
    use_oauth("write", client_auth=Credential.ClientAuth.BODY)
    assert run(approved()) == PlanStatus.COMPLETED
    assert upstream.token_requests() == 1


def test_a_read_scoped_token_cannot_write(upstream, catalog, executor_key, approved, run):
    use_oauth("write", scope="read")
    plan = approved()
    assert run(plan) != PlanStatus.COMPLETED
    assert [w["status"] for w in upstream.writes()] == [403]


def test_an_oauth2_read_credential_previews(upstream, catalog, make_plan):
    use_oauth("read")
    plan = make_plan()
    assert plan.before["email"] == "ada@example.test"
    assert upstream.token_requests() == 1
    token = upstream.issued_tokens()[-1]
    assert upstream.requests_log()[-1]["headers"]["authorization"] == f"Bearer {token}"
    make_plan(input={"contact_id": "c-1002", "email": "g@new.example"})
    assert upstream.token_requests() == 1  # cached in this (the reading) process
    upstream.revoke_tokens()
    make_plan(input={"contact_id": "c-1001", "email": "a2@new.example"})
    assert upstream.token_requests() == 2  # the 401 to the read fetched a new token once
    assert [e["status"] for e in upstream.requests_log()[-2:]] == [401, 200]


def test_the_web_process_cannot_open_an_oauth2_write_secret(upstream, catalog):
    credential = use_oauth("write")
    with pytest.raises(WriteKeyUnavailable):
        open_write_secret(credential)
    assert OAUTH_CLIENT_SECRET.encode() not in bytes(credential.ciphertext)


def test_the_token_url_must_be_on_the_connectors_origin(upstream, catalog, settings):
    with pytest.raises(VaultError, match="not the connector's"):
        use_oauth("write", token_url="http://login.example.test/token")
    with pytest.raises(VaultError, match="needs a token URL"):
        use_oauth("write", token_url="")
    with pytest.raises(VaultError, match="no user name"):
        use_oauth("write", token_url="http://u:p@login.example.test/token")
    settings.COUNTERSIGN_OAUTH_TOKEN_ORIGINS = ["http://login.example.test"]
    credential = use_oauth("write", token_url="http://login.example.test/token")
    assert credential.token_url == "http://login.example.test/token"
    same_origin = use_oauth("write", token_url=upstream.url + "/oauth/token")
    assert same_origin.scope == "write"


def test_an_oauth2_secret_needs_both_parts(upstream, catalog):
    with pytest.raises(VaultError, match="client_secret"):
        use_oauth("write", secret={"client_id": "x"})


def test_set_credential_stores_an_oauth2_credential(upstream, catalog, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{OAUTH_CLIENT_ID}\n{OAUTH_CLIENT_SECRET}\n"))
    call_command(
        "set_credential",
        "demo",
        "write",
        "--scheme",
        "oauth2",
        "--token-url",
        "/oauth/token",
        "--scope",
        "write",
        "--client-auth",
        "body",
    )
    out = capsys.readouterr().out
    assert "sealed to the worker's key" in out
    assert OAUTH_CLIENT_SECRET not in out
    credential = Connector.objects.get(name="demo").credential("write")
    assert credential.scheme == "oauth2" and credential.client_auth == "body"
    assert credential.token_url == "/oauth/token" and credential.scope == "write"
