"""An upstream that repeats the credential it was sent (a debugging echo, a careless
proxy, a hostile server) never gets it stored or shown (guarantee 6), on every read path:
the preview, the worker's re-read, status requests, reconciliation, and the answer to the
write. A preview built on such a read is refused, not shown redacted.

The demo upstream's ``echo_auth`` fault answers as usual and adds the Authorization
header it received, raw, base64-encoded, percent-encoded, as JSON \\u escapes or as a
response header. Besides these assertions, the autouse canary (tests/conftest.py) checks
every response and log line, and the database scan of test_canary_db every column."""

from __future__ import annotations

import json

import pytest

from actions.lib.redaction import (
    REDACTED,
    REMOVED,
    forget_secrets,
    remember_secrets,
    scrub_bytes,
    scrub_text,
    scrub_value,
    secret_forms,
)
from approvals.models import Attempt, Plan, PlanStatus
from executors.reconciliation import pending_follow, reconcile
from tests.conftest import READ_TOKEN, WRITE_TOKEN
from tests.security.test_canary_db import secret_hits

PLANS = "/api/v1/plans"
pytestmark = pytest.mark.usefixtures("executor_key")
NOTE = {"note_id": "n-1", "title": "Runbook", "body": "Restart the worker."}
MODES = ["body", "base64", "url", "unicode", "header"]


@pytest.fixture(autouse=True)
def _no_real_sleep(monkeypatch):
    monkeypatch.setattr("executors.services._sleep", lambda seconds: None)


# --- the scrubber itself ------------------------------------------------------------------


@pytest.fixture
def remembered():
    secret = "s3cret-Value/with+odd=chars"
    forget_secrets()
    remember_secrets([secret])
    yield secret
    forget_secrets()


@pytest.mark.parametrize(
    "encode",
    [
        lambda s: s,
        lambda s: f"Authorization: Bearer {s}",
        lambda s: json.dumps({"token": s}),
        lambda s: json.dumps(s, ensure_ascii=True),
        lambda s: __import__("urllib.parse").parse.quote(s, safe=""),
        lambda s: __import__("urllib.parse").parse.quote_plus(s),
        lambda s: "".join(f"%{b:02X}" for b in s.encode()),
        lambda s: __import__("html").escape(s),
        lambda s: __import__("base64").b64encode(s.encode()).decode(),
        lambda s: __import__("base64").b64encode(f"user:{s}".encode()).decode(),
        lambda s: __import__("base64").b64encode(f"ab{s}".encode()).decode(),
        lambda s: __import__("base64").urlsafe_b64encode(f"a{s}".encode()).decode(),
    ],
    ids=[
        "raw",
        "bearer",
        "json",
        "json-ascii",
        "url",
        "url-plus",
        "url-every-char",
        "html",
        "base64",
        "base64-basic",
        "base64-shifted",
        "base64-urlsafe-shifted",
    ],
)
def test_every_encoding_is_found_and_removed(remembered, encode):
    text = f"before {encode(remembered)} after"
    scrubbed, found = scrub_text(text)
    assert found
    assert remembered not in scrubbed and encode(remembered) not in scrubbed
    assert REDACTED in scrubbed or scrubbed == REMOVED
    data, found_in_bytes = scrub_bytes(text.encode())
    assert found_in_bytes and remembered.encode() not in data


def test_unicode_escapes_are_found_once_parsed(remembered):
    escaped = "".join(f"\\u{ord(ch):04x}" for ch in remembered)
    raw = ('{"debug": "' + escaped + '", "name": "x"}').encode()
    assert scrub_bytes(raw) == (raw, False)  # invisible in the bytes...
    value, found = scrub_value(json.loads(raw))  # ...but not once parsed
    assert found and value == {"debug": REDACTED, "name": "x"}
    keyed, found = scrub_value({remembered: 1})
    assert found and keyed == {REDACTED: 1}


def test_ordinary_text_is_left_alone(remembered):
    for text in ("Ada Lovelace", "s3cret-", "Value/with", "[redacted]", ""):
        assert scrub_text(text) == (text, False)


def test_short_values_are_not_remembered():
    forget_secrets()
    remember_secrets(["short", "x"])
    assert scrub_text("a short x") == ("a short x", False)
    assert secret_forms("tiny") == set()


def test_credentials_too_short_to_scrub_are_refused(catalog):
    from actions.models import Connector, Credential
    from actions.services import credential_set
    from actions.vault import VaultError

    connector = Connector.objects.get(name="demo")
    with pytest.raises(VaultError, match="at least 8 characters"):
        credential_set(connector=connector, role=Credential.Role.READ, secret={"token": "abc"})
    with pytest.raises(VaultError, match="password must be at least 8"):
        credential_set(
            connector=connector,
            role=Credential.Role.READ,
            scheme=Credential.Scheme.BASIC,
            secret={"username": "me", "password": "pw"},
        )


# --- the preview ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_preview_whose_read_echoes_the_credential_is_refused(
    client, api_headers, upstream, catalog, mode
):
    upstream.add_fault(method="GET", path_prefix="/notes/", echo_auth=mode)
    body = {"action": "replace_note", "input": {**NOTE, "title": "Runbook v2"}}
    response = client.post(PLANS, body, content_type="application/json", **api_headers)
    assert response.status_code == 502, response.content
    problem = response.json()
    assert problem["type"] == "urn:countersign:problem:upstream-echoes-secrets"
    assert "repeated a credential" in problem["detail"]
    assert READ_TOKEN not in response.content.decode()
    # The upstream really did answer with the token, and nothing was stored.
    assert upstream.requests_log()[-1]["headers"]["authorization"] == f"Bearer {READ_TOKEN}"
    assert Plan.objects.count() == 0
    assert secret_hits()[0] == []


def test_an_echo_in_an_etag_header_refuses_the_preview_too(client, api_headers, upstream, catalog):
    upstream.add_fault(method="GET", path_prefix="/contacts/", echo_auth="header")
    body = {"action": "update_contact_email", "input": {"contact_id": "c-1001", "email": "a@b.c"}}
    response = client.post(PLANS, body, content_type="application/json", **api_headers)
    assert response.status_code == 502
    assert response.json()["type"].endswith("upstream-echoes-secrets")


# --- the worker's re-read, the write's answer, status requests, reconciliation ---------------


def test_a_reread_that_echoes_the_credential_refuses_the_write(upstream, make_plan, approve, run):
    plan = approve(make_plan("replace_note", {**NOTE, "title": "Runbook v2"}))
    upstream.add_fault(method="GET", path_prefix="/notes/", echo_auth="base64")
    assert run(plan) == PlanStatus.REFUSED
    plan.refresh_from_db()
    assert "repeated a credential" in plan.outcome_detail
    assert upstream.writes() == []
    assert secret_hits()[0] == []


@pytest.mark.parametrize("mode", ["body", "header", "unicode"])
def test_the_answer_to_the_write_is_stored_scrubbed(upstream, make_plan, approve, run, mode):
    plan = approve(make_plan("replace_note", {**NOTE, "title": "Runbook v2"}))
    upstream.add_fault(method="PUT", path_prefix="/notes/", echo_auth=mode)
    assert run(plan) == PlanStatus.COMPLETED
    attempt = Attempt.objects.get(plan=plan)
    stored = attempt.response_body + json.dumps(attempt.response_headers)
    assert WRITE_TOKEN not in stored
    if mode != "unicode":  # invisible until parsed; the stored text is scrubbed as text
        assert REDACTED in stored
        assert "repeated a credential" in attempt.error
    assert len(upstream.writes()) == 1
    assert secret_hits()[0] == []


def test_a_status_request_that_echoes_the_credential_is_read_scrubbed(
    upstream, make_plan, approve, run, django_capture_on_commit_callbacks
):
    plan = approve(make_plan("start_deployment", {"service": "api", "version": "v1.2.3"}))
    assert run(plan) == PlanStatus.PENDING
    upstream.add_fault(method="GET", path_prefix="/deployments/", echo_auth="body", times=5)
    with django_capture_on_commit_callbacks(execute=False):
        while (result := pending_follow(plan_id=plan.id)) == "following":
            pass
    assert result == PlanStatus.COMPLETED
    assert secret_hits()[0] == []


def test_a_reconciliation_read_that_echoes_the_credential_settles_nothing(
    upstream, make_plan, approve, run, django_capture_on_commit_callbacks
):
    plan = approve(make_plan("replace_note", {**NOTE, "title": "Runbook v2"}))
    upstream.add_fault(method="PUT", path_prefix="/notes/", status=503, apply=True)
    assert run(plan) == PlanStatus.UNKNOWN
    upstream.add_fault(method="GET", path_prefix="/notes/", echo_auth="url")
    with django_capture_on_commit_callbacks(execute=False):
        assert reconcile(plan_id=plan.id) == "unknown"
    attempt = Attempt.objects.get(plan=plan)
    assert "repeated a credential" in attempt.reconciliation["verdict"]
    # The next look, with an upstream that behaves, settles it.
    with django_capture_on_commit_callbacks(execute=False):
        assert reconcile(plan_id=plan.id) == PlanStatus.COMPLETED
    assert len(upstream.writes()) == 1
    assert secret_hits()[0] == []
