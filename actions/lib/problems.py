"""RFC 9457 problem documents: what every refusal looks like to an agent, over the JSON
API and in MCP tool results and errors alike (one builder, so the two never drift)."""

from __future__ import annotations

import uuid
from typing import Any

from . import logcontext
from .exceptions import CountersignError

PROBLEM_CONTENT_TYPE = "application/problem+json"


def current_correlation_id() -> str:
    """The correlation id bound for this request's log lines, or a new one."""
    return logcontext.current().get("correlation_id") or str(uuid.uuid4())


def problem_body(
    *,
    status: int,
    type: str,
    title: str,
    detail: str,
    errors: list[dict[str, str]] | None = None,
    correlation_id: str | None = None,
) -> dict[str, Any]:
    """A problem document; ``errors`` carry JSON Pointers into what was sent. Its
    correlation id is the one this request's log lines carry, when they carry one (a
    refused submission: the id its lines were written with), else a new one."""
    body: dict[str, Any] = {
        "type": f"urn:countersign:problem:{type}",
        "title": title,
        "status": status,
        "detail": detail,
        "correlation_id": correlation_id or current_correlation_id(),
    }
    if errors:
        body["errors"] = errors
    return body


def problem_body_from(exc: CountersignError, *, correlation_id: str | None = None) -> dict:
    """The problem document of a domain error."""
    return problem_body(
        status=exc.status,
        type=exc.type,
        title=exc.title,
        detail=exc.detail,
        errors=exc.errors or None,
        correlation_id=correlation_id,
    )


def problem_line(problem: dict[str, Any]) -> str:
    """One line naming the problem: what the API would say, and its type."""
    slug = problem["type"].rsplit(":", 1)[-1]
    text = problem["title"]
    if problem["detail"] and problem["detail"] != problem["title"]:
        text = f"{text}: {problem['detail']}"
    return f"{text} [{slug}]"
