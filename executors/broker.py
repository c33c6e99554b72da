"""What the broker can tell the sweeper: how many messages wait for a worker."""

from __future__ import annotations

from actions.lib import dispatch


def queued_messages() -> int | None:
    """How many messages wait in the broker's queue for a worker, or None if unknown.

    The sweeper uses it to tell a backlog (messages still queued) from lost wake-ups."""
    return dispatch.broker_state()[1]
