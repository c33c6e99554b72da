"""Every error under ``/api/`` is a problem document, including the ones the API's views
never see: an unknown path (Django's URL resolver answers 404), a method the path does
not take (ninja answers 405), a malformed request Django refuses before any view (400),
and a failure outside the API's own error handler (500). Those arrive here as Django's
HTML or plain-text pages and leave as RFC 9457 problems with the same status and
headers (``Allow`` for a 405), so an agent parses one kind of error body whatever went
wrong. What the API renders itself is already a problem and goes through untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus

from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve

from actions.lib.problems import PROBLEM_CONTENT_TYPE, problem_body

API_PREFIX = "/api/"
# Response headers a problem keeps from the page it replaces.
KEPT_HEADERS = ("Allow", "Retry-After", "WWW-Authenticate")

# status: (type, title, what happened)
KNOWN: dict[int, tuple[str, str, str]] = {
    400: ("bad-request", "The request is malformed", "the request could not be understood"),
    403: ("forbidden", "Forbidden", "this request is not allowed"),
    404: ("not-found", "Not found", "no such endpoint"),
    405: ("method-not-allowed", "Method not allowed", "the endpoint does not take this method"),
    413: ("body-too-large", "The body is too large", "the request body is too large"),
    500: (
        "internal-error",
        "Something went wrong on our side",
        "quote the correlation id to an administrator",
    ),
    # The pages' answer to a database outage met outside the API's handler
    # (approvals/views/unavailable.py): the API's own problem for it.
    503: (
        "database-unavailable",
        "The service is temporarily unavailable",
        "its database cannot be reached; try again as Retry-After says",
    ),
}


def _is_problem(response: HttpResponse) -> bool:
    return response.get("Content-Type", "").split(";")[0].strip() == PROBLEM_CONTENT_TYPE


def _detail(request: HttpRequest, response: HttpResponse, default: str) -> str:
    path = request.path
    if response.status_code == 404:
        detail = f"no such endpoint: {request.method} {path}"
        other = path[:-1] if path.endswith("/") else path + "/"
        try:
            resolve(other)
        except Resolver404:
            return detail
        return f"{detail} (did you mean {other}?)"
    if response.status_code == 400:
        try:
            request.get_host()
        except DisallowedHost:
            return "the Host header names a host this server does not answer for"
        return default
    if response.status_code == 405:
        allowed = response.get("Allow", "")
        return f"{request.method} is not allowed on {path}" + (
            f"; allowed: {allowed}" if allowed else ""
        )
    return default


def as_problem(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    status = response.status_code
    type_, title, default = KNOWN.get(
        status,
        ("http-error", HTTPStatus(status).phrase if status in HTTPStatus else "Error", ""),
    )
    body = problem_body(
        status=status, type=type_, title=title, detail=_detail(request, response, default or title)
    )
    replaced = JsonResponse(body, status=status, content_type=PROBLEM_CONTENT_TYPE)
    for name in KEPT_HEADERS:
        if response.has_header(name):
            replaced[name] = response[name]
    return replaced


class ApiProblemsMiddleware:
    """Turns an error page under ``/api/`` into a problem document (see the module)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code >= 400
            and request.path.startswith(API_PREFIX)
            and not response.streaming
            and not _is_problem(response)
        ):
            return as_problem(request, response)
        return response
