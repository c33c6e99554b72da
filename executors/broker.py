"""What the broker can tell the sweeper: how many messages wait for a worker."""

from __future__ import annotations

from celery import current_app


def queued_messages() -> int | None:
    """How many messages wait in the broker's queue for a worker, or None if unknown.

    The sweeper uses it to tell a backlog (messages still queued) from lost wake-ups."""
    queue = current_app.conf.task_default_queue
    try:
        with current_app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            _, count, _ = conn.default_channel.queue_declare(queue=queue, passive=True)
            return int(count)
    except Exception:  # noqa: BLE001 - no such queue yet, broker down: unknown
        return None
