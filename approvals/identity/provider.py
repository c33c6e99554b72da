"""One bounded read of a JSON document the identity provider publishes (its discovery
document, its keys): the sign-in's timeout, TLS and proxy settings, no redirect, a cap on
the size, and a cap on the time the body may take. Imports nothing of the app, so both
the sign-in (oidc.py) and the on-behalf-of check (requester.py) use it."""

from __future__ import annotations

import json
import time
from typing import Any

import requests
from django.conf import settings


def provider_json(url: str, *, max_bytes: int) -> Any:
    """The JSON document at ``url``. Raises ``requests.RequestException`` or
    ``ValueError`` (a status other than 200, more than ``max_bytes``, a body still
    arriving after twice OIDC_TIMEOUT, or not JSON). Each read waits at most
    OIDC_TIMEOUT, so the whole call takes three times it at the very most."""
    timeout = settings.OIDC_TIMEOUT
    deadline = time.monotonic() + 2 * timeout
    with requests.get(
        url,
        timeout=timeout,
        allow_redirects=False,
        stream=True,
        verify=getattr(settings, "OIDC_VERIFY_SSL", True),
        proxies=getattr(settings, "OIDC_PROXY", None),
        headers={"Accept": "application/json"},
    ) as response:
        if response.status_code != 200:
            raise ValueError(f"status {response.status_code}")
        body = bytearray()
        for chunk in response.iter_content(64 * 1024):
            body += chunk
            if len(body) > max_bytes:
                raise ValueError(f"larger than {max_bytes} bytes")
            if time.monotonic() > deadline:
                raise ValueError("too slow")
    return json.loads(body)
