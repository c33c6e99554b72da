"""The 403 page (config/urls.py, handler403): who is signed in, what they lack, and a way
to sign out and come back as someone else.

Every reviewer page refuses a signed-in person without the review permission with 403
(approvals/views/pages.py). A person who signed in with the wrong account, or whose identity
provider did not name them in a reviewers group, needs to read which account this is,
what it lacks and how to get it; and the page must let them sign out. 404, 500 and a
failed CSRF check are templates only (templates/404.html, 500.html, 403_csrf.html):
Django renders them itself, the last two with no request context at all.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponseForbidden
from django.template import loader

from ..models import OidcIdentity
from ..permissions import can_review
from ..services import REVIEWERS_GROUP

logger = logging.getLogger(__name__)

REVIEW_PERMISSION = "approvals.review_plan"


def permission_denied(request: HttpRequest, exception=None) -> HttpResponseForbidden:
    try:
        context = _who(request)
    except DatabaseError:
        # The page still renders, without what it could not look up.
        logger.warning("the 403 page could not look up who is signed in")
        context = {"signed_in": False}
    body = loader.render_to_string("403.html", context, request)
    return HttpResponseForbidden(body)


def _who(request: HttpRequest) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"signed_in": False}
    context = {
        "signed_in": True,
        "username": user.get_username(),
        "full_name": user.get_full_name(),
        # A 403 for a person who may review came from somewhere else: say nothing more.
        "lacks_review": not can_review(user),
        "permission": REVIEW_PERMISSION,
        "group": REVIEWERS_GROUP,
        "sso": False,
    }
    if context["lacks_review"] and settings.COUNTERSIGN_OIDC:
        context |= {
            "sso": OidcIdentity.objects.filter(user=user).exists(),
            "sso_name": settings.COUNTERSIGN_OIDC_NAME,
            "groups_claim": settings.COUNTERSIGN_OIDC_GROUPS_CLAIM,
            "reviewer_groups": settings.COUNTERSIGN_OIDC_REVIEWER_GROUPS,
        }
    return context
