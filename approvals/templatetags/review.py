"""Template filters of the reviewer pages."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.timesince import timesince
from django.utils.translation import gettext, pgettext

from ..decisions.requester import requester_label

register = template.Library()

register.filter("requester_label", requester_label)

JUST_NOW = timedelta(minutes=1)


@register.filter
def ago(value: datetime | None) -> str:
    """How long ago, as a sentence fragment: "just now" under a minute (never "0
    minutes ago"), else "12 minutes ago" ("há 12 minutos"), to the largest unit."""
    if not value:
        return ""
    elapsed = timezone.now() - value
    if elapsed < JUST_NOW:
        return pgettext("time", "just now")
    return gettext("%(time)s ago") % {"time": timesince(value, depth=1)}
