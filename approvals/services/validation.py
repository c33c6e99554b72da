"""What an agent proposes, checked before anything is read: the action is known, enabled
and allowed to this agent, and the input matches its schema as sent."""

from __future__ import annotations

from typing import Any

from django.db.models import Exists, OuterRef
from jsonschema.exceptions import ValidationError as SchemaValidationError

from actions.cache import cached, fresh
from actions.lib.canonical import CanonicalJSONError, escape_pointer_token, normalize
from actions.lib.exceptions import InvalidInput, NotAllowed, UnknownAction
from actions.models import Action, Agent


def _schema_errors(action: Action, values: dict[str, Any]) -> list[dict[str, str]]:
    errors: list[dict[str, str]] = []
    validator = action.spec.input_validator()
    for error in sorted(validator.iter_errors(values), key=lambda e: list(e.absolute_path)):
        errors.extend(_error_entries(error))
    return errors


def _error_entries(error: SchemaValidationError) -> list[dict[str, str]]:
    base = "/input" + "".join(f"/{escape_pointer_token(p)}" for p in error.absolute_path)
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        return [
            {"pointer": f"{base}/{escape_pointer_token(name)}", "message": "this field is required"}
            for name in error.validator_value
            if name not in instance
        ]
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = set((error.schema or {}).get("properties", {}))
        return [
            {"pointer": f"{base}/{escape_pointer_token(name)}", "message": "unknown field"}
            for name in sorted(set(instance) - known)
        ]
    return [{"pointer": base, "message": error.message}]


def _load_action(agent_id, action_name: str) -> Action | None:
    # One query: the action, its connector, and whether this agent may propose it.
    action = (
        Action.objects.select_related("connector")
        .filter(name=action_name, enabled=True)
        .annotate(
            allowed=Exists(
                Agent.actions.through.objects.filter(agent_id=agent_id, action_id=OuterRef("pk"))
            )
        )
        .first()
    )
    if action is not None:
        action.spec  # noqa: B018 - parsed once, here, and kept with the cached action
    return action


def _resolve_action(agent: Agent, action_name: str) -> Action:
    # Remembered per catalog generation (actions/cache.py): an edit applies at once. An
    # unknown name is not remembered: the name is the caller's, and made-up ones would
    # fill the memory.
    action = cached(
        "action",
        (agent.pk, action_name),
        lambda: _load_action(agent.pk, action_name),
        keep_none=False,
    )
    if action is not None:
        action = fresh(action)
    if action is None:
        raise UnknownAction(
            f"no enabled action named {action_name!r}",
            errors=[{"pointer": "/action", "message": "unknown action"}],
        )
    if not action.allowed:
        raise NotAllowed(f"this agent may not propose {action_name!r}")
    return action


def plan_validate_input(*, agent: Agent, action_name: str, input: Any) -> tuple[Action, dict]:
    action = _resolve_action(agent, action_name)
    if not isinstance(input, dict):
        raise InvalidInput(errors=[{"pointer": "/input", "message": "must be an object"}])
    try:
        values = normalize(input)
    except CanonicalJSONError as exc:
        raise InvalidInput(
            errors=[{"pointer": "/input" + exc.pointer, "message": exc.message}]
        ) from None
    errors = _schema_errors(action, values)
    if not errors and values != input:
        # A string its normal form changed: a format field must already have been in it
        # (a Kelvin sign is refused, never mapped to the K the policies would judge).
        errors = [
            entry
            for error in action.spec.format_errors_as_sent(input)
            for entry in _error_entries(error)
        ]
    if errors:
        raise InvalidInput(errors=errors)
    return action, values
