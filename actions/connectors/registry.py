"""Which class implements each connector kind, by name, loaded by dotted path as Django
loads a database backend: the core asks ``kind_of(connector)`` and never imports a kind.
A deployment may add a kind with ``COUNTERSIGN_CONNECTOR_KINDS`` (name -> dotted path)."""

from __future__ import annotations

from functools import cache

from django.conf import settings
from django.utils.module_loading import import_string

from .base import ConnectorKind

DEFAULT_KIND = "http"
KINDS = {
    "http": "actions.connectors.http.HTTPKind",
    "mcp": "actions.connectors.mcp.MCPKind",
}


class UnknownKind(LookupError):
    """A connector names a kind no one registered."""


@cache
def kind_named(name: str) -> ConnectorKind:
    paths = {**KINDS, **getattr(settings, "COUNTERSIGN_CONNECTOR_KINDS", {})}
    if name not in paths:
        raise UnknownKind(f"no connector kind named {name!r}")
    kind = import_string(paths[name])()
    if not isinstance(kind, ConnectorKind):
        raise UnknownKind(f"{paths[name]} is not a connector kind")
    return kind


def kind_of(connector) -> ConnectorKind:
    """The kind that speaks to ``connector``'s upstream."""
    return kind_named(getattr(connector, "kind", "") or DEFAULT_KIND)
