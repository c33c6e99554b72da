"""The report: what an import proposed, refused and listed, as the command, the admin
page and the tests read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ProposedAction:
    name: str
    operation: str  # "PATCH /contacts/{contact_id}"
    kind: str
    consequence_class: str
    warnings: list[dict[str, str]] = field(default_factory=list)
    # "created" | "updated" | "unchanged"; None for a dry run or when not stored.
    stored: str | None = None
    class_source: str = "method"  # "method" | "x-countersign"
    # The class the method implies, when the document declared a lower one.
    class_lowered_from: str = ""
    status_operation: str = ""  # "getDeployment: GET /deployments/{id}"
    definition: dict[str, Any] = field(default_factory=dict)
    pointer: str = ""

    @property
    def result_fields(self) -> list[str]:
        """What the agent would receive: "id (string)", "state (string: queued, ...)"."""
        out = []
        for name, spec in (self.definition.get("result") or {}).items():
            text = f"{name} ({spec.get('type', '?')}"
            if spec.get("enum"):
                values = ", ".join(str(v) for v in spec["enum"][:6])
                text += f": {values}" + (", ..." if len(spec["enum"]) > 6 else "")
            out.append(text + ")")
        return out

    @property
    def check_with(self) -> str:
        """The read action that checks this action's work, if one was wired."""
        return str((self.definition.get("check_with") or {}).get("action", ""))

    @property
    def status_follow(self) -> str:
        """How accepted work is followed: "the 202's Location" or a path, if wired."""
        status = self.definition.get("status") or {}
        if status.get("from_location"):
            return "Location"
        return str(status.get("path", ""))


@dataclass
class RefusedOperation:
    operation: str
    name: str
    reasons: list[dict[str, str]]

    @property
    def reason(self) -> str:
        return "; ".join(r["message"] for r in self.reasons)


@dataclass
class ListedRead:
    """A GET or HEAD that is not proposed as a read action, and why (a list, a search)."""

    operation: str  # "listContacts: GET /contacts"
    reason: str

    def __str__(self) -> str:
        return f"{self.operation} ({self.reason})"


@dataclass
class ImportReport:
    proposed: list[ProposedAction] = field(default_factory=list)
    refused: list[RefusedOperation] = field(default_factory=list)
    # GETs and HEADs not proposed (lists, searches, no JSON answer); proposed reads are
    # in ``proposed`` with kind "read".
    reads: list[ListedRead] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)
    connector: str = ""
    source_name: str = ""
    dry_run: bool = False
    connector_created: bool = False

    def action(self, name: str) -> ProposedAction:
        return next(p for p in self.proposed if p.name == name)
