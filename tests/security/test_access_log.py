"""The access log holds no authorization code, state or other credential from a query
string (config/accesslog.py). The real web server's log of a whole single sign-on is
grepped in tests/e2e/test_sso.py."""

from __future__ import annotations

import logging

import pytest

from config.accesslog import AccessLogFilter, loggable_path


@pytest.mark.parametrize(
    ("logged", "expected"),
    [
        ("/accounts/oidc/callback/?code=abc&state=def&iss=x", "/accounts/oidc/callback/"),
        ("/accounts/oidc/callback/?error=invalid_scope&state=s", "/accounts/oidc/callback/"),
        # Under a path prefix (FORCE_SCRIPT_NAME, a proxy's root path) too.
        ("/countersign/accounts/oidc/callback/?code=abc", "/countersign/accounts/oidc/callback/"),
        ("/plans/?status=awaiting_approval&page=2", "/plans/?status=awaiting_approval&page=2"),
        ("/plans/", "/plans/"),
        ("/anywhere/?Code=abc&next=/plans/", "/anywhere/?Code=[redacted]&next=/plans/"),
        ("/x/?access%5Ftoken=abc&token=def", "/x/?access%5Ftoken=[redacted]&token=[redacted]"),
        ("/x/?id_token_hint=eyJ&state", "/x/?id_token_hint=[redacted]&state"),
    ],
)
def test_what_a_query_string_leaves_in_the_log(logged, expected):
    assert loggable_path(logged) == expected


def test_the_web_servers_access_logger_uses_the_filter():
    # As uvicorn writes each access line (uvicorn/protocols/http/*_impl.py).
    logger = logging.getLogger("uvicorn.access")
    assert any(isinstance(f, AccessLogFilter) for f in logger.filters)
    record = logger.makeRecord(
        logger.name,
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/accounts/oidc/callback/?code=s3cret-code&state=st", "1.1", 302),
        None,
    )
    logger.handle(record)
    assert record.getMessage() == '127.0.0.1:5000 - "GET /accounts/oidc/callback/ HTTP/1.1" 302'
