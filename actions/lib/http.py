"""The only ways Countersign talks to upstreams: one read-only client, one write client.

Both build URLs from the connector's base URL and a path (never a URL from input),
refuse redirects, bound every timeout and response size, and present exactly one
credential. The read client refuses any method but GET and HEAD before anything
leaves the process: the preview path cannot write even by mistake.
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cache
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit

import httpx
from django.conf import settings

from .canonical import loads_strict
from .exceptions import UpstreamError
from .metrics import UPSTREAM_REQUESTS, status_class
from .redaction import remember_secrets, scrub_bytes, scrub_text, scrub_value

# A form-encoded body (its pairs are built by the preview; the client only encodes them).
FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
READ_METHODS = frozenset({"GET", "HEAD"})


class ReadOnlyViolation(RuntimeError):
    """Something tried to send a write through the read-only client. Always a bug."""


@dataclass
class UpstreamResponse:
    status: int
    headers: dict[str, str]
    body: bytes
    elapsed_ms: int
    truncated: bool = False
    # The first answer was 401 and the request was sent again with a renewed OAuth2 token.
    reauthenticated: bool = False
    # The answer repeated a credential this process presents or holds; ``body`` and
    # ``headers`` (and what json() returns) have it replaced already.
    secret_echoed: bool = False
    _json: Any = field(default=None, repr=False)

    def json(self) -> Any:
        """The body parsed strictly, with every credential in its strings and keys
        replaced (a server may escape one so that only parsing reveals it)."""
        if self._json is None and self.body:
            value, echoed = scrub_value(loads_strict(self.body))
            self.secret_echoed = self.secret_echoed or echoed
            self._json = value
        return self._json

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def connector_url(connector, path: str) -> str:
    """Join base URL and path, refusing anything that could leave the connector's host."""
    if not path.startswith("/") or path.startswith("//") or "\\" in path:
        raise ValueError("upstream paths must be absolute paths on the connector")
    if any(ch in path for ch in "?#@") or any(ord(ch) < 0x21 for ch in path):
        raise ValueError("upstream paths carry no query, fragment, userinfo or whitespace")
    url = connector.base_url.rstrip("/") + path
    base = urlsplit(connector.base_url)
    final = urlsplit(url)
    if (final.scheme, final.netloc) != (base.scheme, base.netloc):
        raise ValueError("upstream path escapes the connector's host")
    return url


@cache
def _tls_context() -> ssl.SSLContext:
    """The verifying TLS context httpx would build for each client (certifi roots, no
    environment overrides), built once: loading the roots costs ~50 ms per client."""
    return httpx.create_ssl_context(verify=True, trust_env=False)


# --- kept clients ------------------------------------------------------------------------
#
# The httpx clients (their connection pools) are kept per process and reused across
# executions and previews: opening a TCP (and TLS) connection per request cost more than
# the request. What is kept knows no credential: every request carries its role's headers
# (``_Client.request``), no cookie is ever stored, and a client is keyed by the role, the
# connector and everything that configures it, so a connection never serves two roles,
# two connectors, or a connector as it was before an edit of its URL or timeouts.

# A write's connection is reused only if it was idle for less than this. httpcore checks a
# kept connection before reusing it (a server that closed it has made it readable) and
# never sends a request twice; what is left is a server closing it in the instant the
# write leaves, which would make a write that never arrived look "unknown". Servers close
# idle connections after their keep-alive timeout (2 s at the shortest of the common
# ones), so below that the instant cannot come from an idle timeout.
WRITE_KEEPALIVE_SECONDS = 1.0
READ_KEEPALIVE_SECONDS = 5.0  # httpx's default: a read may simply be read again
KEPT_CLIENTS_MAX = 32  # a process speaks to few upstreams; the least recently used go

_kept: OrderedDict[tuple, httpx.Client] = OrderedDict()
_kept_lock = threading.Lock()


def _kept_client(key: tuple, build) -> httpx.Client:
    """The kept client for ``key``, built by ``build()`` the first time. One evicted is
    dropped, not closed: a request on another thread may still be using it; its
    connections close when it is collected."""
    with _kept_lock:
        client = _kept.get(key)
        if client is not None:
            _kept.move_to_end(key)
            return client
    client = build()
    with _kept_lock:
        _kept.setdefault(key, client)
        _kept.move_to_end(key)
        while len(_kept) > KEPT_CLIENTS_MAX:
            _kept.popitem(last=False)
        return _kept[key]


def kept_clients_clear() -> None:
    """Close and forget every kept client (the tests, between upstreams)."""
    with _kept_lock:
        clients = list(_kept.values())
        _kept.clear()
    for client in clients:
        client.close()


def _forget_kept_after_fork() -> None:
    # A forked child (a Celery prefork worker, a web worker) must not share its parent's
    # connections: they are dropped without closing, which would act on the parent's
    # sockets; the child opens its own.
    global _kept_lock
    _kept_lock = threading.Lock()
    _kept.clear()


os.register_at_fork(after_in_child=_forget_kept_after_fork)


class Auth(Protocol):
    """How a client presents its credential."""

    renewable: bool  # may a 401 be answered by renewing the credential and resending once?
    header_names: frozenset[str]

    def headers(self) -> dict[str, str]: ...

    def renew(self) -> dict[str, str]: ...

    def secret_values(self) -> list[str]: ...


class StaticAuth:
    """Fixed headers (bearer token, API-key header, basic auth)."""

    renewable = False

    def __init__(self, headers: dict[str, str] | None, secrets: list[str] | None = None) -> None:
        self._headers = dict(headers or {})
        self.header_names = frozenset(self._headers)
        self._secrets = list(secrets or [])

    def headers(self) -> dict[str, str]:
        return dict(self._headers)

    def renew(self) -> dict[str, str]:
        return dict(self._headers)

    def secret_values(self) -> list[str]:
        return list(self._secrets)


def _presented_values(headers: dict[str, str]) -> list[str]:
    """The credential headers' values as sent, and the part after a scheme word
    ("Bearer …", "Basic …"): what an echoing server would repeat."""
    values = []
    for value in headers.values():
        values.append(value)
        scheme, _, rest = value.partition(" ")
        if rest and scheme.isalpha():
            values.append(rest.strip())
    return values


class _Client:
    allowed_methods: frozenset[str] | None = None

    def __init__(self, connector, credential: dict[str, str] | Auth | None = None) -> None:
        self.connector = connector
        if credential is None or isinstance(credential, dict):
            credential = StaticAuth(credential)
        self._auth: Auth = credential
        connect = min(connector.connect_timeout, settings.COUNTERSIGN_HTTP_CONNECT_TIMEOUT)
        read = min(connector.read_timeout, settings.COUNTERSIGN_HTTP_READ_TIMEOUT)
        role = "read" if self.allowed_methods is not None else "write"
        # Everything the kept client is built from; the TLS context is the process's one.
        key = (role, getattr(connector, "pk", None), connector.base_url, connect, read)
        self._http = _kept_client(key, lambda: _new_http(connect, read, role))

    def close(self) -> None:
        """Nothing to release: the connections belong to the process's kept clients."""

    @property
    def credential_header_names(self) -> frozenset[str]:
        """The headers the credential sets (recorded by name only, never by value)."""
        return self._auth.header_names

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> UpstreamResponse:
        method = method.upper()
        if self.allowed_methods is not None and method not in self.allowed_methods:
            raise ReadOnlyViolation(f"the read-only client refuses {method}")
        url = connector_url(self.connector, path)
        all_headers = {"Accept": "application/json", "User-Agent": "countersign"}
        all_headers.update(headers or {})
        content = None
        if body is not None:
            if content_type == FORM_CONTENT_TYPE:
                content = _form_content(body)
            else:
                content = json.dumps(body, ensure_ascii=False).encode()
            all_headers["Content-Type"] = content_type
        # An OAuth2 credential may fetch its token here (TokenError: nothing was sent).
        # Header names are case-insensitive: the credential's replace any spelling of
        # theirs, so an action's fixed headers can never ride along as a second one.
        credential_headers = self._auth.headers()
        remember_secrets([*self._auth.secret_values(), *_presented_values(credential_headers)])
        taken = {name.lower() for name in credential_headers}
        all_headers = {k: v for k, v in all_headers.items() if k.lower() not in taken}
        all_headers.update(credential_headers)
        response = self._send(method, url, all_headers, content)
        if response.status == 401 and self._auth.renewable:
            # The token may have been revoked or expired early upstream. A request refused
            # at authentication had no effect, so sending it once more with a fresh token
            # is not a second write; a second 401 stands.
            credential_headers = self._auth.renew()
            remember_secrets([*self._auth.secret_values(), *_presented_values(credential_headers)])
            all_headers.update(credential_headers)
            response = self._send(method, url, all_headers, content)
            response.reauthenticated = True
        return response

    def _send(
        self, method: str, url: str, all_headers: dict[str, str], content: bytes | None
    ) -> UpstreamResponse:
        """One request on the wire, counted by connector, role and status class."""
        labels = {
            "connector": getattr(self.connector, "name", "") or "unnamed",
            "role": "read" if self.allowed_methods is not None else "write",
        }
        try:
            response = self._send_once(method, url, all_headers, content)
        except UpstreamError as exc:
            UPSTREAM_REQUESTS.labels(
                **labels, status_class=status_class(None, timeout=exc.timeout)
            ).inc()
            raise
        UPSTREAM_REQUESTS.labels(**labels, status_class=status_class(response.status)).inc()
        return response

    def _send_once(
        self, method: str, url: str, all_headers: dict[str, str], content: bytes | None
    ) -> UpstreamResponse:
        started = time.monotonic()
        limit = settings.COUNTERSIGN_HTTP_MAX_RESPONSE_BYTES
        try:
            with self._http.stream(method, url, headers=all_headers, content=content) as resp:
                chunks: list[bytes] = []
                size = 0
                truncated = False
                for chunk in resp.iter_bytes():
                    size += len(chunk)
                    if size > limit:
                        truncated = True
                        break
                    chunks.append(chunk)
                # Scrubbed as it arrives: nothing downstream (previews, re-reads, stored
                # answers, results, error details) ever sees a credential it echoed.
                body, echoed = scrub_bytes(b"".join(chunks))
                headers = {}
                for name, value in resp.headers.items():
                    value, hit = scrub_text(value)
                    headers[name.lower()] = value
                    echoed = echoed or hit
                return UpstreamResponse(
                    status=resp.status_code,
                    headers=headers,
                    body=body,
                    elapsed_ms=int((time.monotonic() - started) * 1000),
                    truncated=truncated,
                    secret_echoed=echoed,
                )
        except httpx.ConnectTimeout:
            raise UpstreamError(
                "connecting to the upstream timed out", sent=False, timeout=True
            ) from None
        except httpx.ConnectError:
            raise UpstreamError("the upstream refused the connection", sent=False) from None
        except httpx.PoolTimeout:
            raise UpstreamError("no connection available", sent=False, timeout=True) from None
        except httpx.TimeoutException:
            raise UpstreamError(
                "the upstream did not answer in time", sent=True, timeout=True
            ) from None
        except httpx.HTTPError as exc:
            # RemoteProtocolError and friends: the request was (at least partly) sent.
            raise UpstreamError(f"the connection broke: {type(exc).__name__}", sent=True) from None


def _new_http(connect: float, read: float, role: str) -> httpx.Client:
    """A client to keep. trust_env=False: no proxy or netrc from the environment may
    redirect traffic or add credentials behind our back. No cookies are kept: a cookie an
    upstream sets must not ride along on a later request (a kept client serves many).
    No limit on connections, as when each request had a client of its own."""
    keepalive = READ_KEEPALIVE_SECONDS if role == "read" else WRITE_KEEPALIVE_SECONDS
    return httpx.Client(
        timeout=httpx.Timeout(connect=connect, read=read, write=read, pool=connect),
        follow_redirects=False,
        trust_env=False,
        verify=_tls_context(),
        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        limits=httpx.Limits(max_connections=None, keepalive_expiry=keepalive),
    )


def _form_content(body: Any) -> bytes:
    """A form body comes as the exact ``[name, value]`` pairs the preview showed
    (actions/connectors/http/forms.py): it is only encoded here, never reshaped."""
    if not isinstance(body, list) or not all(
        isinstance(pair, list | tuple)
        and len(pair) == 2
        and all(isinstance(part, str) for part in pair)
        for pair in body
    ):
        raise ValueError("a form body is a list of [name, value] string pairs")
    return urlencode([(name, value) for name, value in body]).encode("ascii")


class ReadOnlyClient(_Client):
    """GET and HEAD only, with the connector's read credential."""

    allowed_methods = READ_METHODS

    def get(self, path: str) -> UpstreamResponse:
        return self.request("GET", path)


class WriteClient(_Client):
    """Any method, with the connector's write credential. Workers only."""

    allowed_methods = None
