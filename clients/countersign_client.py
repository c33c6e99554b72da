"""A small typed client for the Countersign agent API (v1), for agent developers.

It depends on httpx and the standard library only, and imports nothing from
Countersign, so it can be copied into an agent's project as a single file::

    from countersign_client import Countersign, CountersignProblem

    with Countersign("https://countersign.example.com", token) as cs:
        plan = cs.propose(
            "update_contact_email",
            {"contact_id": "c-1001", "email": "ada@new.example"},
            reason="the customer asked by phone",
        )
        print(plan.short_code, plan.review_url)   # a person approves it there
        plan = cs.wait(plan.id, timeout=600)       # long-polls; returns the plan as it stands
        print(plan.status, plan.outcome)

Every refusal raises ``CountersignProblem`` carrying the API's RFC 9457 problem: its
``type`` (``invalid-input``, ``out-of-scope``, …), ``detail`` and ``errors`` with JSON
Pointers into what was sent, and ``retry_after`` when the server asked to be called
again later (``503`` while its database cannot be reached: ``wait`` rides that out).
Proposing writes nothing upstream; a person approves.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

__all__ = [
    "SETTLED",
    "Action",
    "Countersign",
    "CountersignProblem",
    "Outcome",
    "Plan",
]

# Statuses after which a plan changes no more by itself (pending and unknown may still be
# settled later by a status check or a person, but nothing more is sent).
SETTLED = frozenset(
    {
        "completed",
        "pending",
        "already_in_desired_state",
        "rejected",
        "not_applied",
        "stale",
        "refused",
        "unknown",
        "denied",
        "expired",
        "cancelled",
    }
)
MAX_WAIT_SECONDS = 30.0


class CountersignProblem(Exception):
    """A refusal from Countersign: the API's problem document, typed."""

    def __init__(
        self,
        problem: Mapping[str, Any],
        *,
        http_status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.problem = dict(problem)
        # Seconds the server asked to wait before trying again (a 503 while its database
        # cannot be reached, a busy server, a 429), or None.
        self.retry_after = retry_after
        self.status: int = int(problem.get("status") or http_status or 0)
        # "urn:countersign:problem:invalid-input" -> "invalid-input"
        self.type: str = str(problem.get("type", "")).rsplit(":", 1)[-1]
        self.title: str = str(problem.get("title", ""))
        self.detail: str = str(problem.get("detail", ""))
        self.correlation_id: str | None = problem.get("correlation_id")
        self.errors: list[dict[str, str]] = list(problem.get("errors") or [])
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.title} [{self.type}, {self.status}]"
        if self.detail and self.detail != self.title:
            text += f": {self.detail}"
        for error in self.errors:
            text += f"\n  {error.get('pointer') or '/'}: {error.get('message')}"
        return text


@dataclass(frozen=True)
class Action:
    """An action this agent may propose, with the card a person reviews it by."""

    name: str
    title: str
    description: str
    consequence_class: str
    kind: str
    input_schema: dict[str, Any]
    card: dict[str, str]
    approvers_required: int
    raw: dict[str, Any] = field(repr=False)
    # The names of the fields outcome.result carries.
    result_fields: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Action:
        return cls(
            name=data["name"],
            title=data["title"],
            description=data.get("description", ""),
            consequence_class=data["consequence_class"],
            kind=data["kind"],
            input_schema=data["input_schema"],
            card=data["card"],
            approvers_required=data["approval"]["approvers_required"],
            raw=dict(data),
            result_fields=tuple(f["name"] for f in data.get("result") or ()),
        )


@dataclass(frozen=True)
class Outcome:
    state: str
    detail: str
    upstream_status: int | None
    correlation_id: str
    finished_at: datetime | None
    # True: the upstream answered the write; False: it never left; None: nobody can know.
    request_sent: bool | None
    # The fields the action declares it returns (None where a field could not be read).
    result: dict[str, Any] | None = None
    # True when reading the target back showed the effect.
    verified: bool = False
    # For pending or unknown outcomes: {"action": read action, "input": {...}} to check it.
    check_with: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Outcome:
        return cls(
            state=data["state"],
            detail=data.get("detail", ""),
            upstream_status=data.get("upstream_status"),
            correlation_id=data["correlation_id"],
            finished_at=_moment(data.get("finished_at")),
            request_sent=data.get("request_sent"),
            result=data.get("result"),
            verified=bool(data.get("verified", False)),
            check_with=data.get("check_with"),
        )


@dataclass(frozen=True)
class Plan:
    """A proposal as Countersign holds it: the preview, who must approve, the outcome."""

    id: str
    action: str
    status: str
    fingerprint: str
    short_code: str
    consequence_class: str
    target: dict[str, str]
    input: dict[str, Any]
    reason: str
    summary_markdown: str
    approvals_required: int
    review_url: str
    created_at: datetime
    expires_at: datetime
    outcome: Outcome | None
    raw: dict[str, Any] = field(repr=False)

    @property
    def settled(self) -> bool:
        return self.status in SETTLED

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Plan:
        outcome = data.get("outcome")
        return cls(
            id=str(data["id"]),
            action=data["action"],
            status=data["status"],
            fingerprint=data["fingerprint"],
            short_code=data["short_code"],
            consequence_class=data["consequence_class"],
            target=data["target"],
            input=data["input"],
            reason=data.get("reason", ""),
            summary_markdown=data["preview"]["summary_markdown"],
            approvals_required=data["approvals_required"],
            review_url=data["review_url"],
            created_at=_moment(data["created_at"]),
            expires_at=_moment(data["expires_at"]),
            outcome=Outcome.from_json(outcome) if outcome else None,
            raw=dict(data),
        )


def _seconds(value: str | None) -> float | None:
    """Retry-After in delta-seconds (what Countersign sends), or None."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _moment(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


class Countersign:
    """The agent's side of Countersign: list actions, propose, wait, cancel.

    ``base_url`` is the server's root (``https://countersign.example.com``); ``token`` is
    the agent's bearer token. Pass ``http`` to bring your own ``httpx.Client`` (its base
    URL and auth are then yours to set).
    """

    def __init__(
        self,
        base_url: str = "",
        token: str = "",
        *,
        timeout: float = MAX_WAIT_SECONDS + 10,
        http: httpx.Client | None = None,
    ) -> None:
        self._owned = http is None
        self.http = http or httpx.Client(
            base_url=base_url.rstrip("/") + "/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
        )

    def __enter__(self) -> Countersign:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self.http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, path, **kwargs)
        if response.is_error:
            try:
                problem = response.json()
            except ValueError:
                problem = {"title": response.reason_phrase, "detail": response.text[:200]}
            if not isinstance(problem, dict):
                problem = {"title": response.reason_phrase}
            raise CountersignProblem(
                problem,
                http_status=response.status_code,
                retry_after=_seconds(response.headers.get("Retry-After")),
            )
        return response.json()

    def actions(self) -> list[Action]:
        """The actions this agent may propose."""
        return [Action.from_json(a) for a in self._call("GET", "/actions")]

    def propose(
        self,
        action: str,
        input: Mapping[str, Any],
        *,
        reason: str | None = None,
        idempotency_key: str | None = None,
    ) -> Plan:
        """Propose a plan. Countersign previews it read-only; nothing is written upstream
        until a person approves it. With ``idempotency_key``, a retry returns the same plan."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        body: dict[str, Any] = {"action": action, "input": dict(input)}
        if reason is not None:
            body["reason"] = reason
        return Plan.from_json(self._call("POST", "/plans", json=body, headers=headers))

    def get(self, plan_id: str, *, wait: float = 0) -> Plan:
        """Read a plan; with ``wait`` (up to 30 s) return as soon as its status changes."""
        params = {"wait": min(max(wait, 0.0), MAX_WAIT_SECONDS)} if wait else None
        return Plan.from_json(self._call("GET", f"/plans/{plan_id}", params=params))

    def wait(self, plan_id: str, *, until: Iterable[str] = SETTLED, timeout: float = 300) -> Plan:
        """Long-poll until the plan reaches one of ``until`` or ``timeout`` seconds pass;
        returns the plan as it stands then (check ``plan.status``)."""
        wanted = frozenset(until)
        deadline = time.monotonic() + timeout
        plan: Plan | None = None
        while True:
            remaining = deadline - time.monotonic()
            wait = 0.0 if plan is None else min(MAX_WAIT_SECONDS, max(remaining, 0.0))
            try:
                plan = self.get(plan_id, wait=wait)
            except CountersignProblem as problem:
                # 503 with Retry-After (the server's database restarting, say): wait as
                # it asks, while the deadline allows, and ask again.
                if problem.status != 503 or problem.retry_after is None or remaining <= 0:
                    raise
                time.sleep(min(problem.retry_after, remaining))
                continue
            if plan.status in wanted or deadline - time.monotonic() <= 0:
                return plan

    def cancel(self, plan_id: str) -> Plan:
        """Withdraw a plan before the worker sends it; nothing is sent upstream."""
        return Plan.from_json(self._call("POST", f"/plans/{plan_id}/cancel"))
