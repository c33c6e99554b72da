"""The canary (tests/conftest.py) fails a test whose responses leak a secret, a bearer
credential, the upstream's address or a stack trace. These tests prove it fires."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from django.http import HttpResponse
from django.urls import path

from tests.conftest import (
    OAUTH_CLIENT_ID,
    READ_TOKEN,
    WRITE_TOKEN,
    CanaryLeak,
    canary_check,
    canary_leaks,
)

UPSTREAM = "http://127.0.0.1:8765"
API = "http://testserver/api/v1/plans/42"


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (f'{{"detail": "token {READ_TOKEN}"}}', "read token"),
        (f'{{"detail": "token {WRITE_TOKEN}"}}', "write token"),
        ('{"sent": "Authorization: Bearer abcdef123456"}', "Authorization: Bearer"),
        ('{"headers": {"Authorization": "Bearer abcdef123456"}}', "Authorization: Bearer"),
        ('{"detail": "POST http://127.0.0.1:8765/contacts/c-1 timed out"}', "address"),
        ("<pre>Traceback (most recent call last):\n  File ...</pre>", "stack trace"),
    ],
)
def test_the_checker_fails_loudly_with_the_url(body, what):
    with pytest.raises(CanaryLeak, match=f"{API}.*{what}"):
        canary_check(API, [], body, internal_urls={UPSTREAM})


def test_headers_are_checked_too():
    with pytest.raises(CanaryLeak, match="write token"):
        canary_check(API, [("X-Debug", WRITE_TOKEN)], b"{}")


def test_what_is_not_a_leak():
    # A help text naming the header, redacted records, and Countersign's own address.
    body = (
        '{"detail": "send Authorization: Bearer <agent token>", '
        '"headers": {"Authorization": "[redacted]"}, '
        '"review_url": "http://127.0.0.1:8000/plans/42/"}'
    )
    assert canary_leaks(API, [], body, internal_urls={UPSTREAM}) == []
    html = "<p>Authorization: Bearer &lt;agent token&gt;</p>"
    assert canary_leaks(API, [], html, internal_urls={UPSTREAM}) == []


def test_admin_pages_may_show_addresses_but_never_secrets():
    admin = "http://testserver/admin/actions/connector/1/change/"
    assert canary_leaks(admin, [], f'<input value="{UPSTREAM}">', internal_urls={UPSTREAM}) == []
    with pytest.raises(CanaryLeak, match="read token"):
        canary_check(admin, [], f'<input value="{READ_TOKEN}">', internal_urls={UPSTREAM})


def _leaky(request):
    return HttpResponse(f"upstream said: {WRITE_TOKEN}")


urlpatterns = [path("leaky/", _leaky)]


@pytest.mark.urls("tests.test_canary")
def test_the_canary_watches_the_django_test_client(client, canary):
    with pytest.raises(CanaryLeak, match="http://testserver/leaky/"):
        client.get("/leaky/")
    assert canary.leaks  # would fail this test at teardown, had the test swallowed it
    canary.leaks.clear()


def test_the_canary_watches_httpx_calls_to_the_live_server(canary):
    canary.ours.add("http://countersign.test")
    leaky = httpx.MockTransport(lambda request: httpx.Response(500, text=f"{READ_TOKEN}"))
    with httpx.Client(transport=leaky) as http:
        # Other servers (the upstream) are not Countersign's: not checked.
        assert http.get("http://upstream.test/x").status_code == 500
        with pytest.raises(CanaryLeak, match="http://countersign.test/api/v1/plans"):
            http.get("http://countersign.test/api/v1/plans")
    canary.leaks.clear()


def test_the_canary_reads_every_log_record_at_every_level(canary):
    import logging

    logging.getLogger("countersign.test").debug("sending with %s", WRITE_TOKEN)
    assert canary.leaks == [
        "a DEBUG log record of countersign.test carries the upstream write token"
    ]
    canary.leaks.clear()
    try:
        raise ValueError(f"bad token {READ_TOKEN}")
    except ValueError:
        logging.getLogger("countersign.test").exception("failed")
    assert "read token" in canary.leaks[0]
    canary.leaks.clear()


def test_the_canary_knows_the_oauth_client_secret_and_issued_tokens(upstream, canary):
    from tests.conftest import OAUTH_CLIENT_SECRET

    with pytest.raises(CanaryLeak, match="OAuth2 client secret"):
        canary_check(API, [], OAUTH_CLIENT_SECRET)
    token = httpx.post(
        upstream.url + "/oauth/token",
        data={"grant_type": "client_credentials"},
        auth=(OAUTH_CLIENT_ID, OAUTH_CLIENT_SECRET),
    ).json()["access_token"]
    with pytest.raises(CanaryLeak, match="access token"):
        canary.check(API, [], f"token {token}")
    canary.leaks.clear()


def test_the_log_canary_reads_json_lines_as_json():
    from actions.lib import logcontext
    from tests.conftest import log_leaks

    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "sent %s", (WRITE_TOKEN,), None)
    line = logcontext.JsonFormatter().format(record)
    assert log_leaks(line) == ["line 1: the upstream write token"]
    # Read as JSON: a secret the encoder escaped is compared as it was written.
    escaped = json.dumps({"message": WRITE_TOKEN + "\u00e9"}, ensure_ascii=True)
    assert log_leaks(escaped) == ["line 1: the upstream write token"]
    assert log_leaks('{"message": broken') == ["line 1: not one JSON object"]
    assert log_leaks("plain text line, no secret\n" + line) == ["line 2: the upstream write token"]
