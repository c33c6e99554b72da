"""Reading an HTTP upstream: GET through the read-only client (it refuses any other
method before anything leaves the process), with the connector's read credential."""

from __future__ import annotations

from typing import Any

from actions.lib.canonical import CanonicalJSONError, digest, resolve_pointer
from actions.lib.exceptions import UpstreamError
from actions.lib.redaction import scrub_text

from ..base import (
    STRONG,
    WEAK,
    PreviewError,
    Read,
    StatusRead,
    UpstreamEchoesSecrets,
    UpstreamTimeout,
)

OK = 200


def is_weak_etag(value: Any) -> bool:
    """A weak entity tag (``W/"…"``), which RFC 9110 never lets satisfy If-Match."""
    return isinstance(value, str) and value[:2] in ("W/", "w/")


def read_target(client, spec, values: dict[str, Any]) -> Read:
    """GET the target through the read-only client and extract its version."""

    path = spec.render_path(spec.read.path, values)
    try:
        response = client.get(path)
    except UpstreamError as exc:
        if exc.timeout:
            raise UpstreamTimeout(str(exc)) from None
        raise PreviewError(str(exc)) from None
    if response.status in spec.read.not_found:
        return Read(exists=False, body=None, version=None, status=response.status)
    if response.status != OK:
        raise PreviewError(f"the upstream answered {response.status} to the read")
    if response.truncated:
        raise PreviewError("the upstream's representation is larger than allowed")
    echoed = UpstreamEchoesSecrets(
        "the upstream's answer to the read repeated a credential it was sent; "
        "nothing was stored (fix the upstream or its proxy, then propose again)"
    )
    if response.secret_echoed:
        raise echoed
    try:
        body = response.json()
    except CanonicalJSONError as exc:
        raise PreviewError(
            "the upstream's representation is not usable JSON: " + scrub_text(exc.message)[0]
        ) from None
    if response.secret_echoed:
        raise echoed
    version, strength = None, None
    if spec.version is not None:
        strength = STRONG
        if spec.version.source == "etag":
            version = response.header("etag")
            if not version:
                raise PreviewError("the upstream sent no ETag for a target versioned by ETag")
            if is_weak_etag(version):
                strength = WEAK
        elif spec.version.source == "field":
            try:
                version = resolve_pointer(body, spec.version.field)
            except KeyError:
                raise PreviewError(
                    f"the upstream's representation has no version field {spec.version.field}"
                ) from None
        else:
            version = digest(body)
    return Read(exists=True, body=body, version=version, status=response.status, strength=strength)


def read_status(client, path: str) -> StatusRead:
    """One status request; its body only when it answered 200 (parsed strictly: a body
    that is not JSON raises ValueError)."""
    response = client.get(path)
    body = response.json() if response.status == OK else None
    return StatusRead(answer=response, body=body, said=f"answered {response.status}")


def read_refusal(spec, response) -> str | None:
    """Why an observation's answer gives nothing to the agent (None: it is the target)."""
    if response.secret_echoed:
        return "the upstream's answer repeated a credential; nothing is returned"
    if response.status in spec.read.not_found:
        return "the target was not found upstream"
    if response.status != OK:
        if response.status >= 500:
            return f"the upstream failed the read ({response.status}); nothing changed"
        return f"the upstream refused the read ({response.status})"
    return None
