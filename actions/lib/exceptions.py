"""Domain errors. Services raise these; the API turns them into RFC 9457 problems and
the pages into messages. Each carries a stable ``type`` slug and an HTTP status."""

from __future__ import annotations


class CountersignError(Exception):
    status = 400
    type = "bad-request"
    title = "The request cannot be processed"

    def __init__(self, detail: str = "", *, errors: list[dict[str, str]] | None = None) -> None:
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.errors = errors or []


class InvalidInput(CountersignError):
    status = 422
    type = "invalid-input"
    title = "The input does not match the action's schema"


class UnknownAction(CountersignError):
    status = 422
    type = "unknown-action"
    title = "No such action is available to this agent"


class NotAllowed(CountersignError):
    status = 403
    type = "not-allowed"
    title = "This agent may not do that"


class NotFound(CountersignError):
    status = 404
    type = "not-found"
    title = "Not found"


class IdempotencyKeyReused(CountersignError):
    status = 422
    type = "idempotency-key-reused"
    title = "This Idempotency-Key was used with a different request"


class IdempotencyInFlight(CountersignError):
    status = 409
    type = "idempotency-in-flight"
    title = "A request with this Idempotency-Key is still being processed"


class InvalidTransition(CountersignError):
    status = 409
    type = "invalid-state"
    title = "The plan is not in a state that allows this"


class FingerprintMismatch(CountersignError):
    status = 409
    type = "fingerprint-mismatch"
    title = "The plan you saw is not the plan on record"


class AlreadyDecided(CountersignError):
    status = 409
    type = "already-decided"
    title = "You have already decided on this plan"


class ActionChanged(CountersignError):
    status = 409
    type = "action-changed"
    title = "The action's definition changed since this preview"


class OutOfScope(NotAllowed):
    status = 403
    type = "out-of-scope"
    title = "The target is outside this agent's scope"


class NotEligible(CountersignError):
    status = 409
    type = "not-eligible"
    title = "The target is not in a state this action applies to"


class NoOneCanDecide(CountersignError):
    """The plan's decision rules name a threshold no active person can fill: refused at
    submission rather than left to expire in a queue nobody can act on."""

    status = 409
    type = "no-one-can-decide"
    title = "No one can approve this plan"


class NotEligibleToDecide(NotAllowed):
    """A reviewer outside every group the plan's requirement names."""

    status = 403
    type = "not-eligible-to-decide"
    title = "You cannot decide this plan"


class DecisionRulesChanged(CountersignError):
    """The decision rules in force give the plan another requirement than the one it
    was proposed (and fingerprinted) under."""

    status = 409
    type = "decision-rules-changed"
    title = "The decision rules changed since this plan was proposed"


class PolicyRefused(NotAllowed):
    """A ``forbid`` of the catalog's policies holds for the plan: refused at submission,
    with the policy's reason, before anything is stored (approvals/decisions/policies.py).
    ``policies``: the ids of the forbids that held; ``version``, ``at`` and ``rate``: the
    set's version, and the time and the agent's rate (hour, day) the policies saw, when
    the raiser gives them (the refused submission is recorded with them)."""

    status = 403
    type = "policy-refused"
    title = "A policy refuses this plan"

    def __init__(
        self,
        reason: str,
        *,
        policies: list[str],
        set_hash: str = "",
        shadow: dict | None = None,
        version: int | None = None,
        at=None,
        rate: tuple[int, int] | None = None,
    ) -> None:
        names = ", ".join(policies)
        super().__init__(f"refused by policy {names}: {reason}" if names else reason)
        self.reason = reason
        self.policies = policies
        self.set_hash = set_hash
        self.shadow = shadow
        self.version = version
        self.at = at
        self.rate = rate


class UpstreamError(Exception):
    """A request to an upstream failed; ``sent`` says whether it may have reached the
    upstream (every connector kind raises this, whatever it speaks)."""

    def __init__(self, message: str, *, sent: bool, timeout: bool = False) -> None:
        super().__init__(message)
        self.sent = sent
        self.timeout = timeout
