"""The pages' answer to a request that failed: a database outage is "temporarily
unavailable" (503, Retry-After, in the product's own page), anything else Django's 500.

Rendered without a query: the page is shown to a signed-in reviewer as to anyone (their
session is in the database that cannot be reached), with no messages (they may be kept
in the session too).
"""

from __future__ import annotations

import sys

from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.defaults import server_error as django_server_error

from actions.lib.outage import RETRY_AFTER_SECONDS, database_unavailable


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: Django calls it while the request's exception is being handled."""
    if not database_unavailable(sys.exc_info()[1]):
        return django_server_error(request)
    response = render(
        request,
        "503.html",
        {"user": AnonymousUser(), "messages": (), "retry_after": RETRY_AFTER_SECONDS},
        status=503,
    )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response
