"""How the catalog's connectors get an authenticated upstream client: a credential's
opened secret presented the way its scheme says, and one pooled read-only client per
connector and process. The clients themselves (actions.lib.http) know no credential."""

from __future__ import annotations

import os
import threading
from typing import Any

from django.conf import settings

from .lib.http import Auth, ReadOnlyClient, StaticAuth, kept_clients_clear
from .lib.redaction import remember_secrets
from .models import Connector, Credential
from .oauth import OAuth2Auth
from .vault import auth_headers, open_read_secret, secret_values


def credential_auth(credential, secret: dict[str, Any]) -> Auth:
    """How to present ``credential`` with its opened ``secret``. From here on this process
    holds the secret, so every upstream answer it reads is scrubbed of it."""
    if credential.scheme == Credential.Scheme.OAUTH2:
        auth: Auth = OAuth2Auth(credential, secret)
    else:
        auth = StaticAuth(auth_headers(credential, secret), secret_values(secret))
    remember_secrets(auth.secret_values())
    return auth


# One read-only client per connector and process, reused across requests: its auth is
# opened once; its connections are the process's kept ones (actions.lib.http), which know
# no credential, and closing it (leaving a ``with``) keeps them for the next caller. The
# read-only guard is on the method, not on the connection. An entry is keyed by
# everything that shapes the client, so a rotated, revoked or edited credential, or an
# edited connector, is never served from an old entry: the newest usable credential is
# looked up on every call.
_read_pool: dict[int, tuple[tuple, ReadOnlyClient]] = {}
_read_pool_lock = threading.Lock()


def _read_key(connector: Connector, credential) -> tuple:
    settings_part = (
        settings.COUNTERSIGN_HTTP_CONNECT_TIMEOUT,
        settings.COUNTERSIGN_HTTP_READ_TIMEOUT,
    )
    connector_part = (connector.base_url, connector.connect_timeout, connector.read_timeout)
    if credential is None:
        return (*settings_part, *connector_part, None)
    return (
        *settings_part,
        *connector_part,
        str(credential.pk),
        credential.scheme,
        credential.header_name,
        credential.token_url,
        credential.scope,
        credential.audience,
        credential.client_auth,
        # The ciphertext, not a timestamp: re-keying or replacing the secret changes it.
        bytes(credential.ciphertext),
    )


def read_client(connector: Connector) -> ReadOnlyClient:
    """The read-only client for a connector, carrying only its read credential."""
    credential = connector.credential(Credential.Role.READ)
    key = _read_key(connector, credential)
    with _read_pool_lock:
        entry = _read_pool.get(connector.pk)
    if entry is not None and entry[0] == key:
        return entry[1]
    auth = credential_auth(credential, open_read_secret(credential)) if credential else None
    client = ReadOnlyClient(connector, auth)
    with _read_pool_lock:
        # An older entry is dropped, not closed: a request on another thread may still be
        # using it; its connections go when that request ends and it is collected.
        _read_pool[connector.pk] = (key, client)
    return client


def _forget_read_pool_after_fork() -> None:
    # A forked child (a Celery prefork worker) must not share its parent's sockets; the
    # parent's clients are dropped without closing, which would touch those sockets.
    global _read_pool_lock
    _read_pool_lock = threading.Lock()
    _read_pool.clear()


os.register_at_fork(after_in_child=_forget_read_pool_after_fork)


def read_pool_clear() -> None:
    """Forget every pooled read client and close every kept connection, the write
    clients' too (the tests, between upstreams)."""
    with _read_pool_lock:
        _read_pool.clear()
    kept_clients_clear()
