"""How a connector's MCP server is started or reached, for each role: the read side (the
web processes' previews) with the read credential, the worker with the write credential
it opened. Credentials are never in the connector row: an ``env`` credential's variables
go to the stdio server's environment, a ``bearer``/``header``/``basic`` credential's
headers to the Streamable HTTP requests."""

from __future__ import annotations

import json
from typing import Any

from actions.lib.redaction import remember_secrets
from actions.models import Credential
from actions.vault import VaultError, auth_headers, open_read_secret, secret_values

from ..base import PreviewError
from .sessions import ServerSpec


class McpAuth:
    """An opened credential as an MCP server is given it (the worker's, or the reader's)."""

    def __init__(self, env: dict[str, str], headers: dict[str, str], secrets: list[str]) -> None:
        self.env = env
        self.headers = headers
        self._secrets = secrets
        remember_secrets(secrets)

    def secret_values(self) -> list[str]:
        return list(self._secrets)


NO_AUTH = McpAuth({}, {}, [])


def credential_auth(credential, secret: dict[str, Any]) -> McpAuth:
    """How ``credential`` (its ``secret`` opened by the caller) is given to the server."""
    if credential.scheme == Credential.Scheme.ENV:
        env = {str(k): str(v) for k, v in (secret.get("env") or {}).items()}
        return McpAuth(env, {}, [v for v in env.values() if v])
    if credential.scheme == Credential.Scheme.OAUTH2:
        raise VaultError("an MCP server takes environment variables or static headers")
    return McpAuth({}, auth_headers(credential, secret), secret_values(secret))


def server_spec(connector, auth: McpAuth) -> ServerSpec:
    server = connector.server or {}
    if server.get("transport") == "http":
        headers = {**(server.get("headers") or {}), **auth.headers}
        return ServerSpec(
            transport="http",
            url=server["url"],
            headers=tuple(sorted(headers.items())),
            connect_timeout=connector.connect_timeout,
            call_timeout=connector.read_timeout,
            secrets=tuple(auth.secret_values()),
        )
    if auth.headers:
        raise VaultError("a stdio MCP server takes its credential as environment variables")
    env = {**(server.get("env") or {}), **auth.env}
    return ServerSpec(
        transport="stdio",
        command=server.get("command", ""),
        args=tuple(server.get("args") or ()),
        env=tuple(sorted(env.items())),
        cwd=server.get("cwd", ""),
        connect_timeout=connector.connect_timeout,
        call_timeout=connector.read_timeout,
        secrets=tuple(auth.secret_values()),
    )


# The preview side's server for each connector, kept per process so a submission does not
# open the read secret again: keyed by everything that shapes it (the connector's server
# and timeouts, the credential and its ciphertext), so a rotated or edited one is never
# served from an old entry.
_read_servers: dict[int, tuple[tuple, ServerSpec]] = {}


def read_server(connector, credential) -> ServerSpec:
    """The preview side's server: the read credential, or none."""
    key = (
        json.dumps(connector.server, sort_keys=True),
        connector.connect_timeout,
        connector.read_timeout,
        None if credential is None else (str(credential.pk), bytes(credential.ciphertext)),
    )
    kept = _read_servers.get(connector.pk)
    if kept is not None and kept[0] == key:
        return kept[1]
    if credential is None:
        spec = server_spec(connector, NO_AUTH)
    else:
        try:
            spec = server_spec(connector, credential_auth(credential, open_read_secret(credential)))
        except VaultError as exc:
            raise PreviewError(f"the read credential cannot be used: {exc}") from None
    _read_servers[connector.pk] = (key, spec)
    return spec
