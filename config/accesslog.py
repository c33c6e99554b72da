"""uvicorn's access log without the secrets a query string can carry.

The single sign-on callback arrives as ``/accounts/oidc/callback/?code=…&state=…``: an
authorization code is single-use and short-lived, but access logs travel further than
any secret should (to log shippers, tickets, screenshots). uvicorn writes each request's
path with its query string; this filter, on the ``uvicorn.access`` logger (settings
``LOGGING``), drops the whole query string of the callback (its ``error_description``
is the provider's text; the refusal, with the error, has a line of its own) and, on
every other path, replaces the value of any parameter named like a credential with
``[redacted]``. What the logs hold is listed in docs/security.md, *Logs*.
"""

from __future__ import annotations

import logging
from urllib.parse import unquote_plus

# Paths whose query string is never logged (compared at the end of the path, so a
# deployment under a path prefix is covered too): the OpenID Connect callback.
QUERYLESS_PATHS = ("/accounts/oidc/callback/",)
# Parameters whose value is never logged, on any path (compared without case).
SECRET_PARAMETERS = frozenset(
    {
        "access_token",
        "client_secret",
        "code",
        "code_verifier",
        "id_token",
        "id_token_hint",
        "password",
        "refresh_token",
        "session_state",
        "state",
        "token",
    }
)
REDACTED = "[redacted]"


def loggable_path(full_path: str) -> str:
    """``full_path`` (a path with its query string, as uvicorn logs it) as it may be
    logged."""
    path, question, query = full_path.partition("?")
    if not question:
        return full_path
    if path.endswith(QUERYLESS_PATHS):
        return path
    kept = []
    for pair in query.split("&"):
        name, equals, _value = pair.partition("=")
        if equals and unquote_plus(name).strip().lower() in SECRET_PARAMETERS:
            pair = f"{name}={REDACTED}"
        kept.append(pair)
    return f"{path}?{'&'.join(kept)}"


class AccessLogFilter(logging.Filter):
    """Rewrites the path of uvicorn's access lines: ``'%s - "%s %s HTTP/%s" %d'`` with
    (client, method, path with query, HTTP version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            record.args = (args[0], args[1], loggable_path(args[2]), args[3], args[4])
        return True
