"""The review queue: the plans the reader may decide now ("mine to decide", the default),
or every plan they may see, filtered; refreshing in place."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import get_language
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from actions.models import Action, Agent, ConsequenceClass
from actions.text import localized

from ..models import PlanStatus
from ..selectors import plans_mine, queue_filters, queue_page, queue_page_size, sees_every_plan
from .pages import reviewer_page


@require_GET
@reviewer_page()
@vary_on_headers("HX-Request")
def queue(request: HttpRequest) -> HttpResponse:
    filters = queue_filters(request.GET)
    size = queue_page_size(request.GET.get("per_page"))
    after = request.GET.get("after", "")
    plans, next_cursor = queue_page(filters, after, size, user=request.user)
    language = get_language()
    for plan in plans:
        plan.title = localized(plan.action.definition.get("title"), language) or plan.action.title
    actions = [
        (name, localized(title, language) or name)
        for name, title in Action.objects.order_by("name").values_list("name", "definition__title")
    ]
    kept = {k: v for k, v in filters.items() if v}
    if "per_page" in request.GET:
        kept["per_page"] = str(size)
    context = {
        "mine_count": plans_mine(request.user).count(),
        "sees_every_plan": sees_every_plan(request.user),
        "plans": plans,
        "filters": filters,
        "paged": bool(after),
        "per_page": kept.get("per_page", ""),
        "first_url": "?" + urlencode(kept),
        "next_url": "?" + urlencode({**kept, "after": next_cursor}) if next_cursor else "",
        "statuses": PlanStatus.choices,
        "classes": ConsequenceClass.choices,
        "agents": Agent.objects.order_by("name").values_list("name", flat=True),
        "actions": actions,
    }
    template = "approvals/queue.html"
    if request.htmx:
        template += "#queue-body"
    return render(request, template, context)
