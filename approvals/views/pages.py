"""What every reviewer page shares: who may open it, and how a domain error becomes a
response. Services raise domain errors (``actions.lib.exceptions``) and never HTTP responses;
this module is the one place the pages translate them, so every page answers alike:

* not signed in: the login page;
* signed in without the ``approvals.review_plan`` permission: 403;
* an id that names nothing: 404, whether the service said so (``NotFound``), a lookup
  escaped it (``DoesNotExist``), or it refused the request before looking the row up
  (invalid input for a plan that does not exist is still a plan that does not exist);
* a reviewer outside the groups that decide the plan (``NotEligibleToDecide``): 403;
* any other refusal (wrong state, invalid input, not allowed, fingerprint mismatch):
  back to the page the form was posted from, with the error as a message in the
  reader's language. A redirect rather than a 4xx page, so that reloading the page
  shows the plan as it is now instead of posting the form again.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Model
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import get_language, gettext, gettext_lazy, gettext_noop

from actions.lib.exceptions import CountersignError, NotEligibleToDecide, NotFound

from ..models import Plan
from ..permissions import can_review

# Domain errors are worded in English for agents (the API is machine-facing and stays
# English). Pages show a reviewer the same error in their language: the messages below
# are in the catalog; anything else falls back to its type's title, with the English
# detail kept alongside (it may name a field or quote an upstream).
PAGE_ERROR_MESSAGES = [
    gettext_noop("no such plan"),
    gettext_noop("you are not a reviewer"),
    gettext_noop("you have already decided on this plan"),
    gettext_noop("this plan expired before a decision"),
    gettext_noop("the fingerprint you saw does not match this plan; reload and review again"),
    gettext_noop("the action changed since this preview; the agent must propose again"),
    gettext_noop("you registered this agent: another reviewer must approve its irreversible plans"),
    gettext_noop("this plan was proposed on your behalf: another reviewer must approve it"),
    gettext_noop("this plan was already previewed again"),
    gettext_noop("nothing was changed"),
    gettext_noop("approve or deny"),
    gettext_noop("type the target's id or name to approve an irreversible change"),
    gettext_noop("the target has not changed since this preview"),
    gettext_noop(
        "this approval must be signed with a passkey, which needs JavaScript in the browser"
    ),
    gettext_noop("the signing request is unknown, expired, used, or for another plan"),
    gettext_noop("this passkey is not registered to you"),
    gettext_noop("register a passkey first: this approval must be signed with one"),
    gettext_noop("the registration expired; start again"),
    gettext_noop("the passkey's registration does not verify"),
    gettext_noop("this passkey is already registered"),
    gettext_noop("no such passkey"),
    gettext_noop("only a superuser may decide by break-glass"),
    gettext_noop("give the reason for breaking glass"),
    gettext_noop("decide it the ordinary way"),
]
PAGE_ERROR_TITLES = {
    "bad-request": gettext_lazy("The request cannot be processed"),
    "invalid-input": gettext_lazy("The input does not match the action's schema"),
    "unknown-action": gettext_lazy("No such action is available to this agent"),
    "not-allowed": gettext_lazy("This is not allowed"),
    "out-of-scope": gettext_lazy("This is outside the agent's scope"),
    "not-found": gettext_lazy("Not found"),
    "invalid-state": gettext_lazy("The plan is not in a state that allows this"),
    "fingerprint-mismatch": gettext_lazy("The plan you saw is not the plan on record"),
    "already-decided": gettext_lazy("You have already decided on this plan"),
    "action-changed": gettext_lazy("The action's definition changed since this preview"),
    "decision-rules-changed": gettext_lazy(
        "The decision rules changed since this plan was proposed"
    ),
}


def page_error(exc: CountersignError, text: str | None = None) -> str:
    """A domain error (or one of its messages, ``text``) as a reviewer should read it."""
    if text is None:
        text = exc.errors[0]["message"] if exc.errors else exc.detail
    if not text:
        return gettext("The request cannot be processed")
    translated = gettext(text)
    if translated != text or (get_language() or "en").startswith("en"):
        return translated
    title = PAGE_ERROR_TITLES.get(exc.type, PAGE_ERROR_TITLES["bad-request"])
    return f"{title} ({text})"


View = Callable[..., HttpResponse]


def reviewer_page(
    *,
    subject: tuple[type[Model], str] | None = None,
    back: Callable[..., str] | None = None,
    describe: Callable[[CountersignError], str] = page_error,
) -> Callable[[View], View]:
    """Reviewers only, and domain errors turned into responses (see the module's text).

    ``subject``: the model and URL keyword naming the row the page is about; an error
    about a row that does not exist is a 404. ``back``: given the URL's keywords, where a
    refused POST returns, with ``describe(error)`` as a message. A refusal on any other
    method is left to propagate: no reviewer page raises one on GET, so it is a bug.
    """

    def decorate(view: View) -> View:
        missing = subject[0].DoesNotExist if subject else ()

        @wraps(view)
        def page(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if not can_review(request.user):
                raise PermissionDenied("reviewers only")
            try:
                return view(request, *args, **kwargs)
            except missing:
                raise Http404("no such object") from None
            except CountersignError as exc:
                if isinstance(exc, NotFound) or not _exists(subject, kwargs):
                    raise Http404(exc.detail) from None
                if isinstance(exc, NotEligibleToDecide):
                    # Outside the groups that decide this plan: refused as a page (the
                    # refusal is audited by the service), not as a message to retry.
                    raise PermissionDenied(exc.detail) from None
                if back is None or request.method != "POST":
                    raise
                messages.error(request, describe(exc))
                return redirect(back(**kwargs))

        return login_required(page)

    return decorate


def _exists(subject: tuple[type[Model], str] | None, kwargs: dict) -> bool:
    if subject is None:
        return True
    model, keyword = subject
    return model._default_manager.filter(pk=kwargs[keyword]).exists()


def _to_plan(*, plan_id, **_) -> str:
    return reverse("approvals:plan-detail", args=[plan_id])


# Every page about one plan: a refused form goes back to the plan's page.
plan_page = reviewer_page(subject=(Plan, "plan_id"), back=_to_plan)
