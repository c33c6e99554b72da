"""OAuth2 client credentials: exchanging a client id and secret for an access token.

The process that presents a credential fetches its token: a worker for a write
credential (only it can open the sealed client secret), whichever process reads for a
read credential. The token is kept in that process's memory, keyed by credential, until
shortly before ``expires_in`` runs out, and dropped when the upstream answers 401 so the
next request fetches a fresh one. It is never written anywhere: not to the database, the
audit trail, an attempt's recorded request (the Authorization header is redacted) nor a
log line. Neither is the client secret.

Token endpoint failures become short reasons written here (the status and, at most, the
RFC 6749 ``error`` code): the endpoint's body is never repeated, since a careless server
may echo the client secret back.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus

import httpx
from django.conf import settings

from actions.models import Credential
from actions.vault import VaultError, oauth_token_url

from .lib.http import UpstreamError, _tls_context

# A token response is a few hundred bytes; anything much larger is not one.
MAX_TOKEN_RESPONSE_BYTES = 64 * 1024
# When the endpoint does not say how long a token lives (expires_in is only RECOMMENDED),
# keep it this long: short enough that a revoked token is not used for long.
DEFAULT_LIFETIME_SECONDS = 60.0
# Refetch this long before the token runs out (at most a tenth of its lifetime), so a
# token never expires between the check and the upstream reading it.
EARLY_REFRESH_SECONDS = 30.0
_ERROR_CODE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class TokenError(UpstreamError):
    """No access token could be had. Nothing was sent to the upstream itself.

    ``permanent`` (the endpoint refused the client: 400/401/403, or the configuration is
    unusable) means retrying will not help; otherwise (timeout, 5xx, 429) it may."""

    def __init__(self, message: str, *, permanent: bool, timeout: bool = False) -> None:
        super().__init__(message, sent=False, timeout=timeout)
        self.permanent = permanent


@dataclass(frozen=True)
class _Token:
    value: str
    refresh_at: float  # on _clock()


# (credential id, token URL, scope, audience) -> token. Per process, never persisted.
_tokens: dict[tuple[str, str, str, str], _Token] = {}
_lock = threading.Lock()
# One fetch at a time per credential: concurrent requests wait for it rather than each
# asking the endpoint (a thundering herd after expiry).
_fetch_locks: dict[tuple[str, str, str, str], threading.Lock] = {}


def _clock() -> float:
    return time.monotonic()


def _key(credential: Credential) -> tuple[str, str, str, str]:
    return (str(credential.pk), credential.token_url, credential.scope, credential.audience)


def access_token(credential: Credential, secret: dict[str, Any]) -> str:
    """A live access token for ``credential``: the cached one, or a freshly fetched one."""
    key = _key(credential)
    with _lock:
        cached = _tokens.get(key)
        if cached is not None and _clock() < cached.refresh_at:
            return cached.value
        fetch_lock = _fetch_locks.setdefault(key, threading.Lock())
    with fetch_lock:
        with _lock:  # another thread may have fetched while we waited
            cached = _tokens.get(key)
            if cached is not None and _clock() < cached.refresh_at:
                return cached.value
        value, lifetime = _fetch(credential, secret)
        early = min(EARLY_REFRESH_SECONDS, lifetime / 10)
        with _lock:
            _tokens[key] = _Token(value, _clock() + lifetime - early)
        return value


def forget(credential: Credential, token: str | None = None) -> None:
    """Drop the cached token (only if it is still ``token``, when given: a token another
    thread already replaced stays)."""
    key = _key(credential)
    with _lock:
        cached = _tokens.get(key)
        if cached is not None and (token is None or cached.value == token):
            del _tokens[key]


def forget_all() -> None:
    with _lock:
        _tokens.clear()


def _fetch(credential: Credential, secret: dict[str, Any]) -> tuple[str, float]:
    """POST grant_type=client_credentials to the token URL; returns (token, lifetime)."""
    connector = credential.connector
    try:
        url = oauth_token_url(base_url=connector.base_url, token_url=credential.token_url)
    except VaultError as exc:
        raise TokenError(str(exc), permanent=True) from None
    client_id, client_secret = secret.get("client_id"), secret.get("client_secret")
    if not isinstance(client_id, str) or not isinstance(client_secret, str):
        raise TokenError("the OAuth2 secret lacks a client id or secret", permanent=True)
    form = {"grant_type": "client_credentials"}
    if credential.scope:
        form["scope"] = credential.scope
    if credential.audience:
        form["audience"] = credential.audience
    headers = {"Accept": "application/json", "User-Agent": "countersign"}
    if credential.client_auth == Credential.ClientAuth.BODY:
        form.update(client_id=client_id, client_secret=client_secret)
    else:
        # RFC 6749 2.3.1: both parts form-encoded before the Basic encoding.
        raw = f"{quote_plus(client_id)}:{quote_plus(client_secret)}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(raw).decode()
    timeout = httpx.Timeout(
        connect=min(connector.connect_timeout, settings.COUNTERSIGN_HTTP_CONNECT_TIMEOUT),
        read=min(connector.read_timeout, settings.COUNTERSIGN_HTTP_READ_TIMEOUT),
        write=min(connector.read_timeout, settings.COUNTERSIGN_HTTP_READ_TIMEOUT),
        pool=min(connector.connect_timeout, settings.COUNTERSIGN_HTTP_CONNECT_TIMEOUT),
    )
    try:
        with (
            httpx.Client(
                timeout=timeout, follow_redirects=False, trust_env=False, verify=_tls_context()
            ) as http,
            http.stream("POST", url, data=form, headers=headers) as response,
        ):
            status = response.status_code
            body = b""
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_TOKEN_RESPONSE_BYTES:
                    raise TokenError("the token endpoint's answer is too large", permanent=False)
    except httpx.TimeoutException:
        raise TokenError(
            "the token endpoint did not answer in time", permanent=False, timeout=True
        ) from None
    except httpx.HTTPError as exc:
        raise TokenError(
            f"the token endpoint could not be reached ({type(exc).__name__})", permanent=False
        ) from None
    payload = _json_object(body)
    if status != 200:
        code = payload.get("error") if payload else None
        reason = f"the token endpoint answered {status}"
        if isinstance(code, str) and _ERROR_CODE.fullmatch(code):
            reason += f" ({code})"
        raise TokenError(reason, permanent=status in (400, 401, 403) or 300 <= status < 400)
    token = payload.get("access_token") if payload else None
    if not isinstance(token, str) or not token or len(token) > 8192:
        raise TokenError("the token endpoint's answer has no access token", permanent=False)
    token_type = payload.get("token_type", "bearer")
    if not isinstance(token_type, str) or token_type.lower() != "bearer":
        raise TokenError(
            "the token endpoint issued a token that is not a bearer token", permanent=True
        )
    lifetime = payload.get("expires_in", DEFAULT_LIFETIME_SECONDS)
    if isinstance(lifetime, str) and lifetime.isdigit():
        lifetime = int(lifetime)
    if isinstance(lifetime, bool) or not isinstance(lifetime, int | float) or lifetime <= 0:
        lifetime = DEFAULT_LIFETIME_SECONDS
    return token, float(lifetime)


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body.decode("utf-8")) if body else None
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


class OAuth2Auth:
    """Presents an OAuth2 credential: a bearer access token fetched with its secret."""

    renewable = True
    header_names = frozenset({"Authorization"})

    def __init__(self, credential: Credential, secret: dict[str, Any]) -> None:
        self.credential = credential
        self._secret = secret
        self._presented: list[str] = []

    def headers(self) -> dict[str, str]:
        token = access_token(self.credential, self._secret)
        if token not in self._presented:
            self._presented.append(token)
        return {"Authorization": f"Bearer {token}"}

    def renew(self) -> dict[str, str]:
        """After a 401: drop the token just presented and fetch a new one."""
        forget(self.credential, self._presented[-1] if self._presented else None)
        return self.headers()

    def secret_values(self) -> list[str]:
        """What must never be stored or shown: the client secret and every token this
        object presented (the client id is an identifier, not a secret)."""
        secret = self._secret.get("client_secret")
        return ([secret] if isinstance(secret, str) and secret else []) + list(self._presented)
