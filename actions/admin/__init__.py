"""The Django admin for the catalog: connectors, credentials, actions and agents.

Every change made here passes the same checks as the catalog file loader, and actions
are stored through the same service (``action_define``): an edited action gets a new
version, and a plan previewed under the old one can no longer be approved or executed.
Changes to connectors, credentials and agents are audited like everything else.

One module an area: connectors, vault (credentials and the vault lock), actions (with the
OpenAPI import and the versions kept), policy (decision rules and policy versions, read
only) and agents; base holds what they share. Django's autodiscovery imports this
package, and importing the areas here registers them.
"""

from __future__ import annotations

from . import agents, connectors, pins, policy, vault
from .actions import CARD_FIELDS, MAX_OPENAPI_BYTES, definition_problems, enable_problems
from .base import ReadOnlyAdmin

__all__ = [
    "CARD_FIELDS",
    "MAX_OPENAPI_BYTES",
    "ReadOnlyAdmin",
    "agents",
    "connectors",
    "definition_problems",
    "pins",
    "enable_problems",
    "policy",
    "vault",
]
