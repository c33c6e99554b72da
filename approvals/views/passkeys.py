"""A reviewer's passkeys (register, list, revoke) and the signing request of a signed
approval: the JSON the page's script hands to navigator.credentials (static/js/passkeys.js).
The decision itself is still the plan's form (plan.plan_decide), carrying the assertion."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext
from django.views.decorators.http import require_GET, require_POST

from actions.lib.exceptions import CountersignError

from ..identity.passkeys import (
    approval_signing_options,
    passkey_register,
    passkey_registration_options,
    passkey_revoke,
)
from ..models import Passkey
from ..selectors import plan_for_review
from .pages import page_error, reviewer_page

passkeys_page = reviewer_page(back=lambda **_: reverse("approvals:passkeys"))
json_page = reviewer_page()


def _json_error(exc: CountersignError) -> JsonResponse:
    return JsonResponse({"error": page_error(exc)}, status=exc.status)


@require_GET
@passkeys_page
def passkeys(request: HttpRequest) -> HttpResponse:
    mine = Passkey.objects.filter(user=request.user).order_by("-created_at")
    return render(request, "approvals/passkeys.html", {"passkeys": mine})


@require_POST
@json_page
def passkey_options(request: HttpRequest) -> HttpResponse:
    return HttpResponse(
        passkey_registration_options(user=request.user), content_type="application/json"
    )


@require_POST
@json_page
def passkey_register_view(request: HttpRequest) -> HttpResponse:
    try:
        body = json.loads(request.body or b"{}")
        if not isinstance(body, dict):
            raise ValueError
    except ValueError:
        return JsonResponse({"error": gettext("The request cannot be processed")}, status=400)
    try:
        passkey_register(
            user=request.user, credential=body.get("credential"), name=str(body.get("name", ""))
        )
    except CountersignError as exc:
        return _json_error(exc)
    messages.success(request, gettext("Passkey registered."))
    return JsonResponse({"ok": True})


@require_POST
@passkeys_page
def passkey_revoke_view(request: HttpRequest, passkey_id) -> HttpResponse:
    passkey_revoke(passkey_id=passkey_id, actor_user=request.user)
    messages.success(request, gettext("Passkey revoked."))
    return redirect("approvals:passkeys")


@require_POST
@json_page
def plan_sign_options(request: HttpRequest, plan_id) -> HttpResponse:
    plan = plan_for_review(plan_id)
    if request.POST.get("fingerprint") != plan.fingerprint:
        return JsonResponse(
            {"error": gettext("The plan you saw is not the plan on record")}, status=409
        )
    try:
        return JsonResponse(approval_signing_options(plan=plan, user=request.user))
    except CountersignError as exc:
        return _json_error(exc)
