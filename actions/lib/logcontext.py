"""What a log line is about: the plan, its correlation id, the agent and the action, kept in
a context variable and written on every line while it is set, in web and worker alike.

A web request binds them as soon as it knows them (the submission before its plan is
stored: its correlation id is chosen first and the plan is stored with it); the one
module that changes a plan's status binds the plan it moves; a task published while they
are bound carries them in its message headers (actions.lib.dispatch) and the worker binds
them again before the task runs (config/celery.py). So ``grep <correlation id>`` over
every process's log follows a plan from its submission to its effect.

In production each line is one JSON object (:class:`JsonFormatter`); in embedded mode
and tests, plain text with the same fields at the end (:class:`PlainFormatter`). Only
identifiers go in: never inputs, targets, reasons or anything an upstream sent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime

from asgiref.sync import iscoroutinefunction
from django.utils.decorators import sync_and_async_middleware

FIELDS = ("plan_id", "correlation_id", "agent", "action")
# The message header a published task carries them in.
HEADER = "countersign_log"

_context: ContextVar[dict[str, str]] = ContextVar("countersign_log_context", default={})  # noqa: B039 - never mutated


def current() -> dict[str, str]:
    return _context.get()


def bind(**values) -> Token:
    """Add (or replace) fields; None values are left out. Returns the token to reset."""
    merged = {**_context.get()}
    for key, value in values.items():
        if key in FIELDS and value is not None and value != "":
            merged[key] = str(value)
    return _context.set(merged)


def reset(token: Token) -> None:
    try:
        _context.reset(token)
    except ValueError:
        # Set in another context (a task's signals on different threads): start afresh.
        _context.set({})


def replace(values: dict | None) -> Token:
    """Bind exactly ``values`` (a task's headers), dropping anything bound before."""
    clean = {k: str(v) for k, v in (values or {}).items() if k in FIELDS and v}
    return _context.set(clean)


def plan_fields(plan) -> dict[str, str | None]:
    """The fields of a plan (duck-typed: this layer knows no app), read without a query:
    the action's name only if the plan's action is already loaded."""
    fields_cache = getattr(getattr(plan, "_state", None), "fields_cache", {})
    action = fields_cache.get("action")
    return {
        "plan_id": str(plan.id),
        "correlation_id": str(plan.correlation_id) if plan.correlation_id else None,
        "agent": str(plan.agent_id) if getattr(plan, "agent_id", None) else None,
        "action": getattr(action, "name", None),
    }


def bind_plan(plan) -> Token:
    return bind(**plan_fields(plan))


@contextmanager
def scope(**values) -> Iterator[None]:
    """Bind ``values`` for the block only (a sweep looks at many plans in turn)."""
    token = bind(**values)
    try:
        yield
    finally:
        reset(token)


class ContextFilter(logging.Filter):
    """Copies the bound fields onto each record (a field passed in ``extra`` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _context.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def _record_fields(record: logging.LogRecord) -> dict[str, str]:
    return {key: getattr(record, key) for key in FIELDS if getattr(record, key, None)}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, process
    id, the bound fields, and the exception when there is one (as one string)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
            **_record_fields(record),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class PlainFormatter(logging.Formatter):
    """The embedded mode's text lines, with the bound fields as ``[key=value ...]`` before
    the message (which stays last on its line: tools read what a line ends with)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(context)s%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        fields = _record_fields(record)
        record.context = (
            "[" + " ".join(f"{key}={value}" for key, value in fields.items()) + "] "
            if fields
            else ""
        )
        return super().format(record)


@sync_and_async_middleware
def RequestContextMiddleware(get_response):  # noqa: N802 - Django's middleware convention
    """Each request starts with nothing bound and leaves nothing bound behind (a WSGI
    thread serves many requests in turn)."""
    if iscoroutinefunction(get_response):

        async def middleware(request):
            token = _context.set({})
            try:
                return await get_response(request)
            finally:
                reset(token)

    else:

        def middleware(request):
            token = _context.set({})
            try:
                return get_response(request)
            finally:
                reset(token)

    return middleware
