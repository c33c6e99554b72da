"""Writing to an HTTP upstream: the exact request (its fence an If-Match or
If-None-Match header, or a version field in the body), sent once through the write
client with the credential the worker opened, the idempotency key in the header the
action declares."""

from __future__ import annotations

import copy
from typing import Any

from actions.clients import credential_auth
from actions.lib.http import FORM_CONTENT_TYPE, READ_METHODS, WriteClient, connector_url
from actions.lib.redaction import REDACTED, redact_headers

from ..base import WEAK, Read
from .forms import form_pairs


def set_pointer(document: dict[str, Any], pointer: str, value: Any) -> dict[str, Any]:
    result = copy.deepcopy(document)
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    node = result
    for token in tokens[:-1]:
        node = node.setdefault(token, {})
    node[tokens[-1]] = value
    return result


def precondition(spec, read: Read | None, *, absent: bool) -> dict[str, Any]:
    """What the write's fence is, and what enforces it: the upstream (If-Match,
    If-None-Match, a version field it checks) or only the worker's re-read."""
    if absent:
        if read is None:
            return {"kind": "none", "expected": None, "enforced_by": "none"}
        enforced = "if_none_match" if spec.write.precondition == "if_none_match" else "reread"
        return {"kind": "absent", "expected": None, "enforced_by": enforced}
    enforced = {"if_match": "if_match", "field": "field"}.get(spec.write.precondition, "reread")
    weak = spec.version.source == "etag" and read.strength == WEAK
    if weak and enforced == "if_match":
        # By RFC 9110 a weak validator never satisfies If-Match: sending it would be
        # refused with 412 whatever the target's state. The worker's re-read, which
        # compares the tag as it was read, is the only check left.
        enforced = "reread"
    fence = {
        "kind": "version",
        "source": spec.version.source,
        "expected": read.version,
        "enforced_by": enforced,
    }
    if weak:
        fence["weak"] = True
    return fence


def write_request(
    spec, values: dict[str, Any], body: Any, fence: dict[str, Any], read: Read | None
) -> dict[str, Any]:
    """The exact request: method, path, headers (the fence among them), body."""
    headers: dict[str, str] = dict(spec.write.headers)
    write_body = body
    if spec.write.precondition == "if_match" and fence["enforced_by"] == "if_match":
        headers["If-Match"] = read.version
    elif spec.write.precondition == "if_none_match":
        headers["If-None-Match"] = "*"
    elif spec.write.precondition == "field":
        write_body = set_pointer(body or {}, spec.write.precondition_field, read.version)
    if write_body is not None and spec.write.content_type == FORM_CONTENT_TYPE:
        # The exact pairs that will be sent, so the reviewer sees the request as it goes.
        write_body = form_pairs(write_body, spec.write.form_style)
    return {
        "method": spec.write.method,
        "path": spec.render_path(spec.write.path, values),
        "headers": headers,
        "content_type": spec.write.content_type if write_body is not None else None,
        "body": write_body,
    }


def read_request(spec, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "method": "GET",
        "path": spec.render_path(spec.read.path, values),
        "headers": {},
        "content_type": None,
        "body": None,
    }


def reads_only(request: dict[str, Any]) -> bool:
    return request.get("method") in READ_METHODS


def recorded_read(client, request: dict[str, Any]) -> dict[str, Any]:
    """An observation's request as recorded: the read credential's headers by name only."""
    return {
        "method": request["method"],
        "url": client.connector.base_url + request["path"],
        "headers": dict.fromkeys(client.credential_header_names, REDACTED),
        "body": None,
    }


def status_path(connector, spec, values: dict[str, Any], response) -> str:
    """Where to ask about accepted work: the action's status path or the Location header."""
    status = spec.status
    if status is None:
        return ""
    if status.path:
        return spec.render_path(status.path, values)
    location = response.header("location") or ""
    base = connector.base_url.rstrip("/")
    if location.startswith(base + "/"):
        location = location[len(base) :]
    try:
        connector_url(connector, location)  # refuses other hosts and odd paths
    except ValueError:
        return ""
    return location


def authenticate(credential, secret: dict[str, Any]):
    """The write credential presented as its scheme says; an OAuth2 one gets its access
    token now (or reuses the cached one), so a token endpoint that refuses the client
    refuses the plan before anything is sent (actions.oauth.TokenError)."""
    auth = credential_auth(credential, secret)
    auth.headers()
    return auth


class Writer:
    """The write client for one plan, with the credential the worker opened."""

    def __init__(self, connector, spec, auth) -> None:
        self.connector, self.spec, self.auth = connector, spec, auth
        self.client = WriteClient(connector, auth)

    def headers(self, request: dict[str, Any], key: str) -> dict[str, str]:
        headers = dict(request.get("headers") or {})
        if self.spec.write.idempotency_header and key:
            headers[self.spec.write.idempotency_header] = key
        return headers

    def recorded(self, request: dict[str, Any], *, key: str) -> dict[str, Any]:
        """The request as recorded: the credential's own headers by name only."""
        names = self.auth.header_names
        headers = {**self.headers(request, key), **dict.fromkeys(names, "")}
        return {
            "method": request["method"],
            "url": self.connector.base_url + request["path"],
            "headers": redact_headers(headers, set(names)),
            "body": request.get("body"),
        }

    def send(self, request: dict[str, Any], *, key: str):
        return self.client.request(
            request["method"],
            request["path"],
            headers=self.headers(request, key),
            body=request.get("body"),
            content_type=request.get("content_type") or "application/json",
        )

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
