"""A small, real HTTP JSON service that stands in for "the upstream system" in the demo and tests.

Countersign previews a change by reading an upstream with a read-only credential and later makes
the write with a separate write credential. To prove those guarantees end to end we need an
upstream that behaves like a real one: it enforces bearer tokens (the read token cannot write),
exposes every flavour of versioning the catalog supports (ETag header, body ``revision`` field,
no version at all), accepts asynchronous work (202 + status polling), honours idempotency keys,
and can be told to misbehave (slow answers, 5xx after applying, dropped connections) so the
"unknown outcome" paths can be exercised with real sockets rather than mocks.

Standard library only, so ``make run`` and the test-suite can start it anywhere without
installing anything. See ``docs/demo-upstream.md`` for the endpoint reference.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import copy
import hashlib
import hmac
import json
import os
import re
import secrets
import signal
import socket
import socketserver
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, unquote_plus, urlsplit

MAX_BODY_BYTES = 1024 * 1024
# A too-large body is read and thrown away (up to this much) before answering 413, so the client
# sees the 413 instead of a connection reset while it is still sending.
_MAX_DRAIN_BYTES = 16 * MAX_BODY_BYTES

DEFAULT_READ_TOKEN = "demo-read-token"
DEFAULT_WRITE_TOKEN = "demo-write-token"
# OAuth2 client credentials (POST /oauth/token): the one registered client, and how long
# the access tokens it gets live (seconds).
DEFAULT_OAUTH_CLIENT_ID = "demo-client"
DEFAULT_OAUTH_CLIENT_SECRET = "demo-client-secret"
DEFAULT_OAUTH_TOKEN_TTL = 300
TOKEN_PATH = "/oauth/token"
_OAUTH_SCOPES = frozenset({"read", "write"})

_SAFE_METHODS = frozenset({"GET", "HEAD"})
_MERGE_PATCH_TYPES = frozenset({"application/merge-patch+json", "application/json"})
_INVOICE_STATUSES = frozenset({"draft", "sent", "paid", "void"})
_AMOUNT_RE = re.compile(r"^\d+\.\d{2}$")
_CURRENCY_RE = re.compile(r"^[A-Z]{3}$")
# Deployments advance one step per GET, so tests can walk pending -> settled deterministically.
_DEPLOYMENT_NEXT = {"queued": "running", "running": "succeeded"}
_COLLECTIONS = ("contacts", "invoices", "notes", "deployments", "reminders")


# --------------------------------------------------------------------------------------------
# Seed data
# --------------------------------------------------------------------------------------------


def _seed() -> dict[str, dict[str, dict[str, Any]]]:
    """Return a fresh copy of the seed data (a new object each time, so reset() is clean)."""
    return {
        "contacts": {
            "c-1001": {
                "id": "c-1001",
                "name": "Ada Lovelace",
                "email": "ada@example.test",
                "phone": "+44 20 7946 0001",
                "workspace": "ws-blue",
                "tags": ["vip"],
                "version": 1,
            },
            "c-1002": {
                "id": "c-1002",
                "name": "Grace Hopper",
                "email": "grace@example.test",
                "phone": "+1 202 555 0142",
                "workspace": "ws-blue",
                "tags": [],
                "version": 1,
            },
            "c-1003": {
                "id": "c-1003",
                "name": "Alan Turing",
                "email": "alan@example.test",
                "phone": "+44 161 496 0003",
                "workspace": "ws-red",
                "tags": [],
                "version": 1,
            },
        },
        "invoices": {
            "inv-2001": {
                "id": "inv-2001",
                "customer_id": "cus-77",
                "amount": "120.00",
                "currency": "EUR",
                "status": "draft",
                "memo": "",
                "revision": 3,
            },
            "inv-2002": {
                "id": "inv-2002",
                "customer_id": "cus-77",
                "amount": "80.00",
                "currency": "EUR",
                "status": "paid",
                "memo": "",
                "revision": 5,
            },
        },
        "notes": {
            "n-1": {
                "id": "n-1",
                "title": "Runbook",
                "body": "Restart the worker, then check the queue.",
            },
        },
        "deployments": {},
        "reminders": {},
    }


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


class HTTPError(Exception):
    """Raised by request handlers to answer with a JSON error ``{"error": ..., **extra}``."""

    def __init__(
        self,
        status: int,
        error: str,
        *,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.headers = headers or {}
        self.extra = extra

    def response(self) -> Response:
        return Response(self.status, {"error": self.error, **self.extra}, dict(self.headers))


@dataclass
class Response:
    """What a handler decided to send; the socket layer turns it into bytes."""

    status: int
    body: Any = None  # JSON-serialisable; None means "no body"
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # the body's exact bytes, when JSON escaping matters


@dataclass
class Request:
    """A parsed request as the handlers see it (no socket access, so the logic is testable)."""

    method: str
    path: str  # without the query string
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names
    raw_body: bytes

    def json(self) -> Any:
        if not self.raw_body:
            raise HTTPError(400, "request body required")
        try:
            return _parse_json(self.raw_body)
        except ValueError as exc:
            raise HTTPError(400, "malformed JSON") from exc

    def json_object(self) -> dict[str, Any]:
        body = self.json()
        if not isinstance(body, dict):
            raise HTTPError(400, "JSON object expected")
        return body

    def media_type(self) -> str | None:
        value = self.headers.get("content-type")
        if value is None:
            return None
        return value.split(";", 1)[0].strip().lower()


@dataclass
class Fault:
    """An injected misbehaviour for the next ``times`` requests matching method + path prefix.

    ``apply`` decides whether the request is really processed before the fault is delivered: a
    503 *after* the write took effect is exactly the "unknown outcome" Countersign must handle.
    """

    method: str | None = None  # None (or "*") matches any method
    path_prefix: str = "/"
    times: int = 1
    status: int | None = None
    delay: float | None = None
    apply: bool = False
    retry_after: float | None = None
    close: bool = False
    # With a status: "echo" answers with an error page that leaks what a careless upstream
    # leaks (the Authorization header it received, an internal URL, a stack trace);
    # "echo-request" leaks every request header and the request body as well;
    # "huge" answers with a body of several megabytes.
    body: str | None = None
    # The request is answered as usual, and the answer repeats the Authorization header it
    # received, as a debugging echo or a careless proxy would: "body" (a field of the
    # JSON answer), "base64", "url" (every character percent-encoded), "unicode" (every
    # character a JSON \u escape, visible only once parsed) or "header" (a response header).
    echo_auth: str | None = None
    # A write answered 200 with the resource as it was, without applying anything (a
    # server that ignores a media type it does not understand).
    ignore: bool = False

    def matches(self, method: str, path: str) -> bool:
        if self.method is not None and self.method != method:
            return False
        return path.startswith(self.path_prefix)


def _reject_constant(value: str) -> Any:
    # json.loads accepts NaN/Infinity by default; real JSON does not.
    raise ValueError(f"invalid JSON constant {value}")


def _parse_json(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError("body is not UTF-8") from exc
    return json.loads(text, parse_constant=_reject_constant)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch, returning a new value (inputs are not modified)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def contact_etag(contact: dict[str, Any]) -> str:
    """Strong ETag ``"<version>-<short hash>"``; the version part makes every change visible."""
    digest = hashlib.sha256(_canonical(contact).encode("utf-8")).hexdigest()[:8]
    return f'"{contact["version"]}-{digest}"'


def _etag_matches(header: str, current: str | None) -> bool:
    """If-Match evaluation with strong comparison (weak tags never match, RFC 9110 13.1.1)."""
    if current is None:
        return False
    candidates = [part.strip() for part in header.split(",")]
    if "*" in candidates:
        return True
    return not current.startswith("W/") and current in candidates


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _require_str(obj: dict[str, Any], key: str, *, required: bool = True) -> None:
    if key not in obj:
        if required:
            raise HTTPError(422, f"{key} is required")
        return
    if not isinstance(obj[key], str) or (required and not obj[key].strip()):
        raise HTTPError(422, f"{key} must be a non-empty string")


def _validate_contact(contact: dict[str, Any]) -> None:
    _require_str(contact, "name")
    _require_str(contact, "email")
    if "@" not in contact["email"]:
        raise HTTPError(422, "invalid email")
    _require_str(contact, "workspace")
    if "phone" in contact and not isinstance(contact["phone"], str):
        raise HTTPError(422, "phone must be a string")
    tags = contact.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise HTTPError(422, "tags must be a list of strings")


def _validate_invoice(invoice: dict[str, Any]) -> None:
    _require_str(invoice, "customer_id")
    _require_str(invoice, "amount")
    if not _AMOUNT_RE.match(invoice["amount"]):
        raise HTTPError(422, "amount must be a decimal string like 120.00")
    _require_str(invoice, "currency")
    if not _CURRENCY_RE.match(invoice["currency"]):
        raise HTTPError(422, "currency must be a three-letter code")
    if invoice.get("status") not in _INVOICE_STATUSES:
        raise HTTPError(422, f"status must be one of {sorted(_INVOICE_STATUSES)}")
    if not isinstance(invoice.get("memo", ""), str):
        raise HTTPError(422, "memo must be a string")


def _reject_read_only(
    patch: dict[str, Any], current: dict[str, Any], keys: tuple[str, ...]
) -> None:
    for key in keys:
        if key in patch and patch[key] != current.get(key):
            raise HTTPError(422, f"{key} is read-only")


def base64_decode(value: str) -> str:
    """Strict base64 to text (an HTTP Basic credential); ValueError if it is not."""
    try:
        return base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise ValueError("not base64 text") from None


def _format_seconds(value: float) -> str:
    # "1" rather than "1.0" for whole seconds; fractions are kept so tests can stay fast.
    return f"{value:g}"


# --------------------------------------------------------------------------------------------
# The service
# --------------------------------------------------------------------------------------------


class DemoUpstream:
    """The demo upstream: state + request log + faults, served over a ThreadingHTTPServer.

    Usable in-process (tests start it on port 0 and inspect ``requests_log()``/``state()``) or
    as a CLI (``python -m demo.upstream``).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        read_token: str = DEFAULT_READ_TOKEN,
        write_token: str = DEFAULT_WRITE_TOKEN,
        oauth_client_id: str = DEFAULT_OAUTH_CLIENT_ID,
        oauth_client_secret: str = DEFAULT_OAUTH_CLIENT_SECRET,
        oauth_token_ttl: int = DEFAULT_OAUTH_TOKEN_TTL,
        verbose: bool = False,
    ) -> None:
        if not oauth_client_id or not oauth_client_secret:
            raise ValueError("the OAuth2 client id and secret must be non-empty")
        if not _is_int(oauth_token_ttl) or oauth_token_ttl < 1:
            raise ValueError("oauth_token_ttl must be a positive number of seconds")
        if not read_token or not write_token:
            raise ValueError("read and write tokens must be non-empty")
        if read_token == write_token:
            # The whole point of this server is to prove the read credential cannot write.
            raise ValueError("read and write tokens must differ")
        self.host = host
        self.read_token = read_token
        self.write_token = write_token
        self.oauth_client_id = oauth_client_id
        self.oauth_client_secret = oauth_client_secret
        self.oauth_token_ttl = oauth_token_ttl
        self.verbose = verbose
        self._requested_port = port
        self._bound_port: int | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        # One re-entrant lock around all mutable state (data, log, faults, counters).
        self._lock = threading.RLock()
        # Every access token ever issued, kept across resets, so a test can look for them
        # where they must never appear (tests/conftest.py, the canary).
        self._issued_tokens: list[str] = []
        self.epoch = 0
        # Requests sleeping in a delay fault wake early once it is set (release_delays()).
        self._delays_released = threading.Event()
        self._reset_locked()
        self._routes = self._build_routes()

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> DemoUpstream:
        """Bind and serve in a daemon thread; returns self so ``DemoUpstream().start()`` reads."""
        if self._server is not None:
            raise RuntimeError("demo upstream already started")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        server = _Server((self.host, self._requested_port), self, family)
        self._server = server
        self._bound_port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever,
            # A short poll interval keeps stop() fast (shutdown waits for the next poll).
            kwargs={"poll_interval": 0.05},
            name=f"demo-upstream-{self._bound_port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket and any kept-alive connections."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._server = None
        self._thread = None
        server.shutdown()
        # Keep-alive connections have their own threads which would otherwise go on answering
        # after stop(); cut them so "stopped" really means unreachable.
        server.close_connections()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> DemoUpstream:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._bound_port is None:
            raise RuntimeError("demo upstream not started")
        return self._bound_port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # ---------------------------------------------------------------- inspection / control

    def reset(self) -> None:
        """Restore the seed data and clear the request log, faults and idempotency keys."""
        with self._lock:
            self._reset_locked()

    def _reset_locked(self) -> None:
        # A request that arrived before a reset belongs to the world before it: one still
        # sleeping in a delay fault is dropped when it wakes, never applied to the fresh
        # data (a test's slow PATCH would otherwise change the next test's contact).
        self.epoch += 1
        self._data = _seed()
        self._log: list[dict[str, Any]] = []
        self._faults: list[Fault] = []
        self._idempotency: dict[str, tuple[str, Response]] = {}
        self._counters = {"deployments": 0, "reminders": 0}
        # Issued access tokens: token -> (expiry as time.time(), scopes).
        self._oauth_tokens: dict[str, tuple[float, frozenset[str]]] = {}
        self._token_requests = 0
        self._weak_etags = False

    def requests_log(self) -> list[dict[str, Any]]:
        """Every non-``/_demo/`` request, oldest first: {method, path, headers, body, at, status}.

        ``path`` is the raw request target (query string included); ``status`` is what was
        sent, or None if the connection was dropped (or the response is still in flight).
        """
        with self._lock:
            return copy.deepcopy(self._log)

    def writes(self) -> list[dict[str, Any]]:
        """The logged requests that are not GET/HEAD, whatever their outcome."""
        return [entry for entry in self.requests_log() if entry["method"] not in _SAFE_METHODS]

    def state(self) -> dict[str, dict[str, dict[str, Any]]]:
        """A deep copy of all stored objects, keyed by collection then id."""
        with self._lock:
            return copy.deepcopy(self._data)

    def add_fault(
        self,
        *,
        method: str | None = None,
        path_prefix: str = "/",
        times: int = 1,
        status: int | None = None,
        delay: float | None = None,
        apply: bool = False,
        retry_after: float | None = None,
        close: bool = False,
        body: str | None = None,
        echo_auth: str | None = None,
        ignore: bool = False,
    ) -> dict[str, Any]:
        """Make the next ``times`` matching requests misbehave; returns the fault as a dict."""
        if method is not None and not isinstance(method, str):
            raise ValueError("method must be a string or null")
        normalized_method = None if method in (None, "*") else method.upper()
        if not isinstance(path_prefix, str) or not path_prefix.startswith("/"):
            raise ValueError("path_prefix must be a string starting with /")
        if not _is_int(times) or times < 1:
            raise ValueError("times must be a positive integer")
        if status is not None and (not _is_int(status) or not 100 <= status <= 599):
            raise ValueError("status must be an HTTP status code or null")
        if delay is not None and (not _is_number(delay) or delay < 0):
            raise ValueError("delay must be a non-negative number or null")
        if retry_after is not None and (not _is_number(retry_after) or retry_after < 0):
            raise ValueError("retry_after must be a non-negative number or null")
        if not isinstance(apply, bool) or not isinstance(close, bool):
            raise ValueError("apply and close must be booleans")
        if body not in (None, "echo", "echo-request", "huge"):
            raise ValueError('body must be null, "echo", "echo-request" or "huge"')
        if echo_auth not in (None, *_ECHO_MODES):
            raise ValueError(f"echo_auth must be null or one of {', '.join(_ECHO_MODES)}")
        if not isinstance(ignore, bool):
            raise ValueError("ignore must be a boolean")
        fault = Fault(
            method=normalized_method,
            path_prefix=path_prefix,
            times=times,
            status=status,
            delay=delay,
            apply=apply,
            retry_after=retry_after,
            close=close,
            body=body,
            echo_auth=echo_auth,
            ignore=ignore,
        )
        with self._lock:
            self._faults.append(fault)
        return asdict(fault)

    def set_weak_etags(self, weak: bool) -> None:
        """Send contacts' ETags as weak validators (``W/"…"``), as servers that compress
        or re-serialize do; If-Match then never matches them (strong comparison), and a
        write without If-Match is accepted."""
        with self._lock:
            self._weak_etags = bool(weak)

    def faults(self) -> list[dict[str, Any]]:
        """The faults still armed (``times`` counts down as they fire)."""
        with self._lock:
            return [asdict(fault) for fault in self._faults]

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def release_delays(self) -> None:
        """Let every request sleeping in a delay fault go on now, as if its delay were
        over; delay faults met later sleep as usual."""
        with self._lock:
            released, self._delays_released = self._delays_released, threading.Event()
        released.set()

    def token_requests(self) -> int:
        """How many requests reached POST /oauth/token (granted or not) since the reset."""
        with self._lock:
            return self._token_requests

    def revoke_tokens(self) -> int:
        """Forget every issued access token (as an authorization server revoking them
        would): the next request presenting one gets 401. Returns how many there were."""
        with self._lock:
            count = len(self._oauth_tokens)
            self._oauth_tokens.clear()
            return count

    def issued_tokens(self) -> list[str]:
        """Every access token this server issued since it started."""
        with self._lock:
            return list(self._issued_tokens)

    def oauth_info(self) -> dict[str, Any]:
        with self._lock:
            now = time.time()
            live = sum(1 for expiry, _ in self._oauth_tokens.values() if expiry > now)
            return {"token_requests": self._token_requests, "live_tokens": live}

    def mutate(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch a stored object as if someone else changed it upstream.

        Bumps ``version`` (contacts, hence the ETag) or ``revision`` (invoices) like a normal
        write would; no validation, so tests can also put objects into odd states. ``id`` and
        the version fields cannot be patched. Raises LookupError if the object does not exist.
        """
        if not isinstance(patch, dict):
            raise ValueError("patch must be a JSON object")
        match = re.fullmatch(r"/([a-z]+)/([^/?#]+)", urlsplit(path).path)
        if match is None or match.group(1) not in _COLLECTIONS:
            raise LookupError(f"unknown object path {path!r}")
        collection, object_id = match.group(1), unquote(match.group(2))
        with self._lock:
            current = self._data[collection].get(object_id)
            if current is None:
                raise LookupError(f"{path} not found")
            protected = ("id", "version", "revision")
            updated = merge_patch(current, {k: v for k, v in patch.items() if k not in protected})
            updated["id"] = object_id
            if collection == "contacts":
                updated["version"] = current["version"] + 1
            elif collection == "invoices":
                updated["revision"] = current["revision"] + 1
            self._data[collection][object_id] = updated
            return copy.deepcopy(updated)

    # ---------------------------------------------------------------- request plumbing

    def _log_request(
        self, method: str, target: str, headers: dict[str, str], raw_body: bytes | None
    ) -> dict[str, Any]:
        body: Any = None
        if raw_body:
            try:
                body = _parse_json(raw_body)
            except ValueError:
                body = None
        entry = {
            "method": method,
            "path": target,
            "headers": dict(headers),
            "body": body,
            "at": time.time(),
            "status": None,
        }
        with self._lock:
            self._log.append(entry)
        return entry

    def _set_logged_status(self, entry: dict[str, Any], status: int | None) -> None:
        with self._lock:
            entry["status"] = status

    def _take_fault(self, method: str, path: str) -> Fault | None:
        """Pop one use of the first matching fault (atomically, so concurrent requests share)."""
        with self._lock:
            for fault in self._faults:
                # The token endpoint misbehaves only when a fault is aimed at it: a
                # catch-all fault is about the upstream's business requests.
                if path == TOKEN_PATH and not fault.path_prefix.startswith("/oauth"):
                    continue
                if fault.matches(method, path):
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    return copy.copy(fault)
        return None

    def _authorise(self, request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        challenge = {"WWW-Authenticate": 'Bearer realm="demo-upstream"'}
        if scheme.lower() != "bearer" or not token:
            raise HTTPError(401, "missing bearer token", headers=challenge)
        is_write = hmac.compare_digest(token.encode(), self.write_token.encode())
        is_read = hmac.compare_digest(token.encode(), self.read_token.encode())
        if not (is_write or is_read):
            with self._lock:
                issued = self._oauth_tokens.get(token)
            if issued is not None and issued[0] <= time.time():
                raise HTTPError(401, "token expired", headers=challenge)
            if issued is not None:
                is_read, is_write = True, "write" in issued[1]
        if not (is_write or is_read):
            raise HTTPError(401, "invalid token", headers=challenge)
        if request.method not in _SAFE_METHODS and not is_write:
            raise HTTPError(403, "read-only credential")

    def handle(self, request: Request) -> Response:
        """Answer one (non-control) request: auth, routing, then the handler under the lock."""
        try:
            self._authorise(request)
            handler, args = self._route(request.method, request.path)
            with self._lock:
                return handler(request, *args)
        except HTTPError as exc:
            return exc.response()
        except Exception:  # a bug here must still produce an HTTP answer, not a hung client
            traceback.print_exc()
            return Response(500, {"error": "internal error"})

    def handle_token(self, request: Request) -> Response:
        """POST /oauth/token: the OAuth2 client-credentials grant (RFC 6749 4.4).

        The client authenticates with HTTP Basic or with client_id/client_secret in the
        form body (not both). ``scope`` is "read", "write" or both (default "read"); a
        token with "write" may write, like the static write token. Errors follow RFC 6749
        5.2 and never repeat what the client sent."""
        with self._lock:
            self._token_requests += 1
        no_store = {"Cache-Control": "no-store"}

        def error(status: int, code: str, **headers: str) -> Response:
            return Response(status, {"error": code}, {**no_store, **headers})

        if request.method != "POST":
            return error(405, "invalid_request", Allow="POST")
        if request.media_type() != "application/x-www-form-urlencoded":
            return error(400, "invalid_request")
        try:
            form = parse_qs(request.raw_body.decode("ascii"), keep_blank_values=True)
        except UnicodeDecodeError:
            return error(400, "invalid_request")
        if any(len(values) != 1 for values in form.values()):
            return error(400, "invalid_request")
        fields = {name: values[0] for name, values in form.items()}
        if fields.get("grant_type") != "client_credentials":
            return error(400, "unsupported_grant_type")
        header = request.headers.get("authorization", "")
        scheme, _, encoded = header.partition(" ")
        in_body = "client_id" in fields or "client_secret" in fields
        if header and in_body:
            return error(400, "invalid_request")  # one authentication method only
        if header:
            if scheme.lower() != "basic":
                return error(401, "invalid_client", **{"WWW-Authenticate": "Basic"})
            try:
                decoded = base64_decode(encoded.strip())
            except ValueError:
                return error(401, "invalid_client", **{"WWW-Authenticate": "Basic"})
            raw_id, _, raw_secret = decoded.partition(":")
            client_id, client_secret = unquote_plus(raw_id), unquote_plus(raw_secret)
        else:
            client_id = fields.get("client_id", "")
            client_secret = fields.get("client_secret", "")
        valid = hmac.compare_digest(
            client_id.encode(), self.oauth_client_id.encode()
        ) & hmac.compare_digest(client_secret.encode(), self.oauth_client_secret.encode())
        if not valid:
            return error(401, "invalid_client", **{"WWW-Authenticate": "Basic"})
        scopes = frozenset((fields.get("scope") or "read").split())
        if not scopes or not scopes <= _OAUTH_SCOPES:
            return error(400, "invalid_scope")
        token = "oat-" + secrets.token_urlsafe(24)
        with self._lock:
            self._oauth_tokens[token] = (time.time() + self.oauth_token_ttl, scopes)
            self._issued_tokens.append(token)
        return Response(
            200,
            {
                "access_token": token,
                "token_type": "Bearer",
                "expires_in": self.oauth_token_ttl,
                "scope": " ".join(sorted(scopes)),
            },
            no_store,
        )

    def _route(self, method: str, path: str) -> tuple[Any, tuple[str, ...]]:
        for pattern, methods in self._routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            lookup = "GET" if method == "HEAD" else method
            if lookup not in methods:
                allowed = sorted(set(methods) | ({"HEAD"} if "GET" in methods else set()))
                raise HTTPError(405, "method not allowed", headers={"Allow": ", ".join(allowed)})
            return methods[lookup], tuple(unquote(group) for group in match.groups())
        raise HTTPError(404, "not found")

    def _build_routes(self) -> list[tuple[re.Pattern[str], dict[str, Any]]]:
        segment = r"([^/]+)"
        return [
            (re.compile(r"/contacts"), {"GET": self._list_contacts}),
            (
                re.compile(rf"/contacts/{segment}"),
                {
                    "GET": self._get_contact,
                    "PATCH": self._patch_contact,
                    "PUT": self._put_contact,
                    "DELETE": self._delete_contact,
                },
            ),
            (
                re.compile(rf"/invoices/{segment}"),
                {"GET": self._get_invoice, "PATCH": self._patch_invoice},
            ),
            (re.compile(rf"/notes/{segment}"), {"GET": self._get_note, "PUT": self._put_note}),
            (re.compile(r"/deployments"), {"POST": self._create_deployment}),
            (re.compile(rf"/deployments/{segment}"), {"GET": self._get_deployment}),
            (re.compile(r"/reminders"), {"POST": self._create_reminder}),
            (re.compile(rf"/reminders/{segment}"), {"GET": self._get_reminder}),
        ]

    # ---------------------------------------------------------------- contacts (ETag)

    def _contact_etag(self, contact: dict[str, Any]) -> str:
        etag = contact_etag(contact)
        return "W/" + etag if self._weak_etags else etag

    def _contact_response(self, status: int, contact: dict[str, Any], **headers: str) -> Response:
        return Response(
            status, copy.deepcopy(contact), {"ETag": self._contact_etag(contact), **headers}
        )

    def _existing(self, collection: str, object_id: str, label: str) -> dict[str, Any]:
        found = self._data[collection].get(object_id)
        if found is None:
            raise HTTPError(404, f"{label} not found")
        return found

    def _list_contacts(self, request: Request) -> Response:
        workspace = request.query.get("workspace", [None])[0]
        contacts = [
            copy.deepcopy(contact)
            for _, contact in sorted(self._data["contacts"].items())
            if workspace is None or contact.get("workspace") == workspace
        ]
        return Response(200, contacts)

    def _get_contact(self, request: Request, contact_id: str) -> Response:
        return self._contact_response(200, self._existing("contacts", contact_id, "contact"))

    def _check_if_match(self, request: Request, current: dict[str, Any]) -> None:
        if_match = request.headers.get("if-match")
        if if_match is None:
            if self._weak_etags:
                return  # a server with weak validators cannot insist on If-Match
            raise HTTPError(428, "If-Match required")
        if not _etag_matches(if_match, self._contact_etag(current)):
            raise HTTPError(412, "precondition failed")

    def _patch_contact(self, request: Request, contact_id: str) -> Response:
        current = self._existing("contacts", contact_id, "contact")
        if request.media_type() not in _MERGE_PATCH_TYPES:
            raise HTTPError(415, "use application/merge-patch+json or application/json")
        self._check_if_match(request, current)
        patch = request.json()
        if not isinstance(patch, dict):
            raise HTTPError(400, "merge patch must be a JSON object")
        _reject_read_only(patch, current, ("id", "version"))
        updated = merge_patch(current, patch)
        updated["id"], updated["version"] = contact_id, current["version"] + 1
        _validate_contact(updated)
        self._data["contacts"][contact_id] = updated
        return self._contact_response(200, updated)

    def _put_contact(self, request: Request, contact_id: str) -> Response:
        current = self._data["contacts"].get(contact_id)
        if_none_match = request.headers.get("if-none-match")
        if if_none_match is not None:
            if if_none_match.strip() != "*":
                raise HTTPError(400, "only If-None-Match: * is supported")
            if current is not None:
                raise HTTPError(412, "contact already exists")
            version = 1
        elif request.headers.get("if-match") is not None:
            if current is None:
                raise HTTPError(404, "contact not found")
            self._check_if_match(request, current)
            version = current["version"] + 1
        else:
            raise HTTPError(428, "If-Match or If-None-Match: * required")
        body = request.json_object()
        if "id" in body and body["id"] != contact_id:
            raise HTTPError(422, "id does not match the URL")
        # `version` is server-managed: a round-tripped representation may carry it; ignore it.
        contact = {**{k: v for k, v in body.items() if k != "version"}, "id": contact_id}
        contact["version"] = version
        _validate_contact(contact)
        self._data["contacts"][contact_id] = contact
        if current is None:
            return self._contact_response(201, contact, Location=f"/contacts/{contact_id}")
        return self._contact_response(200, contact)

    def _delete_contact(self, request: Request, contact_id: str) -> Response:
        current = self._existing("contacts", contact_id, "contact")
        self._check_if_match(request, current)
        del self._data["contacts"][contact_id]
        return Response(204)

    # ---------------------------------------------------------------- invoices (body revision)

    def _get_invoice(self, request: Request, invoice_id: str) -> Response:
        return Response(200, copy.deepcopy(self._existing("invoices", invoice_id, "invoice")))

    def _patch_invoice(self, request: Request, invoice_id: str) -> Response:
        current = self._existing("invoices", invoice_id, "invoice")
        if request.media_type() not in _MERGE_PATCH_TYPES:
            raise HTTPError(415, "use application/merge-patch+json or application/json")
        patch = request.json_object()
        if "expected_revision" not in patch:
            raise HTTPError(428, "expected_revision required")
        expected = patch.pop("expected_revision")
        if not _is_int(expected):
            raise HTTPError(422, "expected_revision must be an integer")
        if expected != current["revision"]:
            raise HTTPError(409, "revision conflict", current_revision=current["revision"])
        if current["status"] == "paid":
            # A domain refusal reported inside a 200, as some real APIs do: the gateway must
            # read the body, not just the status, to see that nothing happened.
            return Response(200, {"ok": False, "error": "invoice is paid"})
        _reject_read_only(patch, current, ("id", "revision"))
        updated = merge_patch(current, patch)
        updated["id"], updated["revision"] = invoice_id, current["revision"] + 1
        _validate_invoice(updated)
        self._data["invoices"][invoice_id] = updated
        return Response(200, copy.deepcopy(updated))

    # ---------------------------------------------------------------- notes (no version)

    def _get_note(self, request: Request, note_id: str) -> Response:
        return Response(200, copy.deepcopy(self._existing("notes", note_id, "note")))

    def _put_note(self, request: Request, note_id: str) -> Response:
        body = request.json_object()
        if "id" in body and body["id"] != note_id:
            raise HTTPError(422, "id does not match the URL")
        for key in ("title", "body"):
            if key in body and not isinstance(body[key], str):
                raise HTTPError(422, f"{key} must be a string")
        created = note_id not in self._data["notes"]
        note = {**body, "id": note_id}
        self._data["notes"][note_id] = note
        return Response(201 if created else 200, copy.deepcopy(note))

    # ---------------------------------------------------------------- deployments (202)

    def _create_deployment(self, request: Request) -> Response:
        body = request.json_object()
        _require_str(body, "service")
        _require_str(body, "version")
        self._counters["deployments"] += 1
        deployment_id = f"dep-{self._counters['deployments']}"
        deployment = {
            "id": deployment_id,
            "service": body["service"],
            "version": body["version"],
            "status": "queued",
        }
        self._data["deployments"][deployment_id] = deployment
        location = f"/deployments/{deployment_id}"
        return Response(202, copy.deepcopy(deployment), {"Location": location})

    def _get_deployment(self, request: Request, deployment_id: str) -> Response:
        deployment = self._existing("deployments", deployment_id, "deployment")
        # Each GET (not HEAD) advances one step, then reports: 1st GET running, 2nd succeeded.
        if request.method == "GET" and deployment["status"] in _DEPLOYMENT_NEXT:
            deployment["status"] = _DEPLOYMENT_NEXT[deployment["status"]]
        return Response(200, copy.deepcopy(deployment))

    # ---------------------------------------------------------------- reminders (idempotency)

    def _create_reminder(self, request: Request) -> Response:
        body = request.json_object()
        key = request.headers.get("idempotency-key")
        fingerprint = _canonical(body)
        if key is not None and key in self._idempotency:
            stored_fingerprint, stored = self._idempotency[key]
            if stored_fingerprint != fingerprint:
                raise HTTPError(422, "idempotency key reused with a different body")
            headers = {**stored.headers, "Idempotent-Replayed": "true"}
            return Response(stored.status, copy.deepcopy(stored.body), headers)
        for name in ("customer_id", "channel", "send_at", "message"):
            _require_str(body, name)
        self._counters["reminders"] += 1
        reminder_id = f"rem-{self._counters['reminders']}"
        reminder = {
            "id": reminder_id,
            "status": "scheduled",
            "customer_id": body["customer_id"],
            "channel": body["channel"],
            "send_at": body["send_at"],
            "message": body["message"],
        }
        self._data["reminders"][reminder_id] = reminder
        response = Response(201, copy.deepcopy(reminder), {"Location": f"/reminders/{reminder_id}"})
        if key is not None:
            # Only successes are remembered: a rejected request changed nothing, so a retry
            # with the same key deserves a fresh evaluation.
            self._idempotency[key] = (fingerprint, copy.deepcopy(response))
        return response

    def _get_reminder(self, request: Request, reminder_id: str) -> Response:
        return Response(200, copy.deepcopy(self._existing("reminders", reminder_id, "reminder")))

    # ---------------------------------------------------------------- /_demo/ control API

    def handle_control(self, method: str, path: str, raw_body: bytes) -> Response:
        """The unauthenticated loopback control API under ``/_demo/`` (never logged)."""
        request = Request(method, path, {}, {}, raw_body)
        try:
            if path == "/_demo/reset":
                if method != "POST":
                    raise HTTPError(405, "method not allowed", headers={"Allow": "POST"})
                self.reset()
                return Response(200, {"ok": True})
            if path == "/_demo/requests":
                if method not in _SAFE_METHODS:
                    raise HTTPError(405, "method not allowed", headers={"Allow": "GET, HEAD"})
                return Response(200, self.requests_log())
            if path == "/_demo/state":
                if method not in _SAFE_METHODS:
                    raise HTTPError(405, "method not allowed", headers={"Allow": "GET, HEAD"})
                return Response(200, self.state())
            if path == "/_demo/mutate":
                if method != "POST":
                    raise HTTPError(405, "method not allowed", headers={"Allow": "POST"})
                body = request.json_object()
                target, patch = body.get("path"), body.get("patch")
                if not isinstance(target, str) or not isinstance(patch, dict):
                    raise HTTPError(400, "expected {path: string, patch: object}")
                try:
                    updated = self.mutate(target, patch)
                except LookupError as exc:
                    raise HTTPError(404, str(exc)) from exc
                is_contact = urlsplit(target).path.startswith("/contacts/")
                headers = {"ETag": self._contact_etag(updated)} if is_contact else {}
                return Response(200, updated, headers)
            if path == "/_demo/oauth":
                if method not in _SAFE_METHODS:
                    raise HTTPError(405, "method not allowed", headers={"Allow": "GET, HEAD"})
                return Response(200, self.oauth_info())
            if path == "/_demo/oauth/revoke":
                if method != "POST":
                    raise HTTPError(405, "method not allowed", headers={"Allow": "POST"})
                return Response(200, {"revoked": self.revoke_tokens()})
            if path == "/_demo/settings":
                if method != "POST":
                    raise HTTPError(405, "method not allowed", headers={"Allow": "POST"})
                body = request.json_object()
                if set(body) - {"weak_etags"} or not isinstance(body.get("weak_etags"), bool):
                    raise HTTPError(400, "expected {weak_etags: boolean}")
                self.set_weak_etags(body["weak_etags"])
                return Response(200, {"weak_etags": body["weak_etags"]})
            if path == "/_demo/faults":
                if method in _SAFE_METHODS:
                    return Response(200, self.faults())
                if method == "DELETE":
                    self.clear_faults()
                    return Response(200, {"ok": True})
                if method != "POST":
                    raise HTTPError(
                        405, "method not allowed", headers={"Allow": "GET, HEAD, POST, DELETE"}
                    )
                spec = request.json_object()
                unknown = set(spec) - set(Fault.__dataclass_fields__)
                if unknown:
                    raise HTTPError(400, f"unknown fault fields: {sorted(unknown)}")
                try:
                    return Response(201, self.add_fault(**spec))
                except ValueError as exc:
                    raise HTTPError(400, str(exc)) from exc
            raise HTTPError(404, "not found")
        except HTTPError as exc:
            return exc.response()


# --------------------------------------------------------------------------------------------
# Socket layer
# --------------------------------------------------------------------------------------------


class _BodyTooLarge(Exception):
    pass


class _LengthRequired(Exception):
    pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # Don't join handler threads on server_close(): a thread may be sleeping in a delay fault.
    block_on_close = False

    def __init__(
        self, address: tuple[str, int], upstream: DemoUpstream, family: socket.AddressFamily
    ) -> None:
        self.address_family = family
        self.upstream = upstream
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind() calls socket.getfqdn(), which can stall for seconds on a
        # machine with slow DNS; the name is only used for logging, so skip it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up (timeouts in tests, dropped connections) are expected, not errors.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "CountersignDemoUpstream/1.0"
    # Idle keep-alive connections give their thread back after a minute.
    timeout = 60
    # Headers and body go out in separate writes; with Nagle on, each response would wait
    # ~40 ms for the client's delayed ACK.
    disable_nagle_algorithm = True
    server: _Server

    def do_GET(self) -> None:
        self._dispatch()

    do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_GET

    def version_string(self) -> str:
        return self.server_version  # the default appends the Python version

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.upstream.verbose:
            super().log_message(format, *args)

    # ---------------------------------------------------------------- I/O helpers

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise _LengthRequired
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            return b""
        try:
            length = int(length_header)
        except ValueError:
            raise ValueError("bad Content-Length") from None
        if length < 0:
            raise ValueError("bad Content-Length")
        if length > MAX_BODY_BYTES:
            if length <= _MAX_DRAIN_BYTES:
                remaining = length
                while remaining > 0:
                    chunk = self.rfile.read(min(remaining, 65536))
                    if not chunk:
                        break
                    remaining -= len(chunk)
            raise _BodyTooLarge
        return self.rfile.read(length)

    def _send(self, response: Response) -> None:
        status = response.status
        no_body = status in (204, 304) or status < 200
        if no_body or (response.body is None and response.raw is None):
            payload = b""
        else:
            payload = (
                response.raw if response.raw is not None else json.dumps(response.body).encode()
            )
        try:
            self.send_response(status)
            if payload:
                self.send_header("Content-Type", "application/json")
            for name, value in response.headers.items():
                self.send_header(name, value)
            if not no_body:
                self.send_header("Content-Length", str(len(payload)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if payload and self.command != "HEAD":
                self.wfile.write(payload)
            self.wfile.flush()
        except OSError:
            # The client went away (e.g. it timed out during a delay fault): nothing to do.
            self.close_connection = True

    def _drop(self) -> None:
        """Close the connection without a single byte of response (a `close` fault)."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # ---------------------------------------------------------------- dispatch

    def _dispatch(self) -> None:
        upstream = self.server.upstream
        method = self.command.upper()
        split = urlsplit(self.path)
        path = split.path or "/"
        is_control = path == "/_demo" or path.startswith("/_demo/")
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value

        try:
            raw_body = self._read_body()
        except (_BodyTooLarge, _LengthRequired, ValueError) as exc:
            self.close_connection = True
            if isinstance(exc, _BodyTooLarge):
                response = Response(413, {"error": "request body too large (limit 1 MiB)"})
            elif isinstance(exc, _LengthRequired):
                response = Response(411, {"error": "send Content-Length (no chunked bodies)"})
            else:
                response = Response(400, {"error": str(exc)})
            if is_control:
                self._send(response)
            else:
                entry = upstream._log_request(method, self.path, headers, None)
                self._respond(entry, response)
            return

        if is_control:
            self._send(upstream.handle_control(method, path, raw_body))
            return

        # Token requests are counted (token_requests()) but kept out of the request log, so
        # requests_log() and writes() stay the business requests they always were.
        is_token = path == TOKEN_PATH
        handle = upstream.handle_token if is_token else upstream.handle
        entry = None if is_token else upstream._log_request(method, self.path, headers, raw_body)
        request = Request(method, path, parse_qs(split.query), headers, raw_body)
        fault = upstream._take_fault(method, path)
        if fault is None:
            self._respond(entry, handle(request))
            return

        if fault.ignore and method not in _SAFE_METHODS:
            self._respond(entry, self._ignored(request, handle))
            return
        # With apply the request really takes effect before the fault is delivered; without it
        # nothing is processed unless the fault only delays (then it is just a slow upstream).
        response = handle(request) if fault.apply or fault.echo_auth else None
        if fault.delay:
            epoch = upstream.epoch
            upstream._delays_released.wait(fault.delay)
            if upstream.epoch != epoch:
                self._drop()  # reset meanwhile: the request is not processed
                return
        if fault.close:
            self._drop()  # the log entry keeps status None: nothing was sent
            return
        if fault.status is not None:
            phrase = HTTPStatus(fault.status).phrase if fault.status in HTTPStatus else ""
            response = Response(fault.status, {"error": f"injected fault: {phrase}".strip()})
            if fault.body == "echo":
                response = Response(
                    fault.status,
                    {
                        "error": "internal error",
                        "debug": (
                            f"request had Authorization: {headers.get('authorization', '')}; "
                            "backend http://10.0.0.12:8080/internal/contacts failed\n"
                            "Traceback (most recent call last):\n"
                            '  File "/srv/app/handlers.py", line 42, in patch\n'
                            "ValueError: boom"
                        ),
                    },
                )
            elif fault.body == "echo-request":
                response = Response(
                    fault.status,
                    {
                        "error": "internal error",
                        "request_headers": headers,
                        "request_body": raw_body[:4096].decode("utf-8", "replace"),
                    },
                )
            elif fault.body == "huge":
                response = Response(fault.status, {"error": "x" * (3 * MAX_BODY_BYTES)})
        elif response is None:
            response = handle(request)
        if fault.retry_after is not None:
            response.headers["Retry-After"] = _format_seconds(fault.retry_after)
        if fault.echo_auth:
            response = _echo_auth(response, headers.get("authorization", ""), fault.echo_auth)
        self._respond(entry, response)

    def _ignored(self, request: Request, handle: Any) -> Response:
        """200 with the resource as it stands (read with the same credential), unchanged."""
        current = handle(Request("GET", request.path, {}, request.headers, b""))
        if current.status != 200:
            return Response(200, {"ok": True})
        return Response(200, current.body, current.headers)

    def _respond(self, entry: dict[str, Any] | None, response: Response) -> None:
        # Record the status *before* sending: a client that reads the log right after getting
        # its answer must find it there.
        if entry is not None:
            self.server.upstream._set_logged_status(entry, response.status)
        self._send(response)


_ECHO_MODES = ("body", "base64", "url", "unicode", "header")


def _echo_auth(response: Response, authorization: str, mode: str) -> Response:
    """``response`` repeating the Authorization header it was sent, encoded as ``mode``."""
    if mode == "header":
        response.headers["X-Debug-Authorization"] = authorization
        return response
    body = response.body if isinstance(response.body, dict) else {"answer": response.body}
    if mode == "base64":
        value = base64.b64encode(f"Authorization: {authorization}".encode()).decode()
    elif mode == "url":
        value = "".join(f"%{byte:02X}" for byte in authorization.encode())
    else:
        value = authorization
    echoed = {**body, "debug_authorization": value}
    raw = None
    if mode == "unicode":
        placeholder = "\x00echo\x00"
        escaped = "".join(f"\\u{ord(ch):04x}" for ch in authorization)
        text = json.dumps({**body, "debug_authorization": placeholder})
        raw = text.replace(json.dumps(placeholder)[1:-1], escaped).encode()
    return Response(response.status or 200, echoed, response.headers, raw)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m demo.upstream",
        description="Serve the Countersign demo upstream until SIGINT/SIGTERM.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--read-token",
        default=os.environ.get("DEMO_UPSTREAM_READ_TOKEN") or DEFAULT_READ_TOKEN,
        help="bearer token that may only read (env DEMO_UPSTREAM_READ_TOKEN)",
    )
    parser.add_argument(
        "--write-token",
        default=os.environ.get("DEMO_UPSTREAM_WRITE_TOKEN") or DEFAULT_WRITE_TOKEN,
        help="bearer token that may read and write (env DEMO_UPSTREAM_WRITE_TOKEN)",
    )
    parser.add_argument(
        "--oauth-client-id",
        default=os.environ.get("DEMO_UPSTREAM_OAUTH_CLIENT_ID") or DEFAULT_OAUTH_CLIENT_ID,
        help="client id accepted at POST /oauth/token (env DEMO_UPSTREAM_OAUTH_CLIENT_ID)",
    )
    parser.add_argument(
        "--oauth-client-secret",
        default=os.environ.get("DEMO_UPSTREAM_OAUTH_CLIENT_SECRET") or DEFAULT_OAUTH_CLIENT_SECRET,
        help="its client secret (env DEMO_UPSTREAM_OAUTH_CLIENT_SECRET)",
    )
    parser.add_argument(
        "--oauth-token-ttl",
        type=int,
        default=DEFAULT_OAUTH_TOKEN_TTL,
        help="seconds an issued access token lives",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)

    try:
        upstream = DemoUpstream(
            host=args.host,
            port=args.port,
            read_token=args.read_token,
            write_token=args.write_token,
            oauth_client_id=args.oauth_client_id,
            oauth_client_secret=args.oauth_client_secret,
            oauth_token_ttl=args.oauth_token_ttl,
            verbose=args.verbose,
        ).start()
    except (OSError, ValueError) as exc:
        print(f"demo upstream: cannot start on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1

    stopping = threading.Event()

    def _on_signal(signum: int, frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    print(f"demo upstream listening on {upstream.url}", flush=True)
    try:
        # Wait in slices so the main thread regularly returns to the interpreter to run the
        # signal handlers.
        while not stopping.wait(0.5):
            pass
    finally:
        upstream.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
