"""The audit log: every event, filtered and paged, and its CSV and JSON-lines export."""

from __future__ import annotations

import csv
import json
from typing import Any
from urllib.parse import urlencode

from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from actions.lib.audit import audit_kinds
from actions.lib.models import AuditEvent
from actions.models import Agent

from ..selectors import audit_events, audit_page
from .pages import reviewer_page

AUDIT_PAGE_SIZE = 50
AUDIT_EXPORT_FIELDS = ["id", "at", "kind", "actor", "plan", "fingerprint", "data", "hash"]


@require_GET
@reviewer_page()
def audit_log(request: HttpRequest) -> HttpResponse:
    """Every event, newest first, keyset-paginated on the (monotonic) id."""
    filters, events = audit_events(request.GET)
    try:
        after = int(request.GET.get("after", "") or 0)
    except ValueError:
        after = 0
    rows, more = audit_page(events, after=after, size=AUDIT_PAGE_SIZE)
    for event in rows:
        event.pairs = _pairs(event.data)
    kept = {k: v for k, v in filters.items() if v}
    next_url = "?" + urlencode({**kept, "after": rows[-1].id}) if more else ""
    query = urlencode(kept)
    context = {
        "events": rows,
        "filters": filters,
        "paged": bool(after),
        "first_url": "?" + query,
        "next_url": next_url,
        "query": query,
        "kinds": audit_kinds(),
        "agents": Agent.objects.order_by("name").values_list("name", flat=True),
    }
    return render(request, "approvals/audit.html", context)


def _pairs(data: Any) -> list[tuple[str, str]]:
    """An event's data as key/value pairs a person reads: text as it is, anything else as
    compact JSON (the exports keep the exact JSON)."""
    if not isinstance(data, dict):
        return [("", json.dumps(data, ensure_ascii=False))] if data not in (None, "") else []
    return [
        (str(key), value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
        for key, value in sorted(data.items())
    ]


def _export_row(event: AuditEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "at": event.at.isoformat(),
        "kind": event.kind,
        "actor": event.actor,
        "plan": str(event.plan_id) if event.plan_id else "",
        "fingerprint": event.fingerprint,
        "data": event.data,
        "hash": event.hash,
    }


def _csv_cell(value: Any) -> str:
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = value
    # A spreadsheet would run a cell starting like a formula; agents write some of this text.
    if text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        text = "'" + text
    return text


@require_GET
@reviewer_page()
def audit_export(request: HttpRequest, fmt: str) -> HttpResponse:
    """The filtered events, oldest first, streamed: CSV or JSON lines."""
    if fmt not in ("csv", "jsonl"):
        raise Http404("csv or jsonl")
    _, events = audit_events(request.GET)
    events = events.order_by("id").iterator(chunk_size=1000)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    if fmt == "csv":

        class Echo:
            def write(self, value: str) -> str:
                return value

        writer = csv.writer(Echo())

        def rows():
            yield writer.writerow(AUDIT_EXPORT_FIELDS)
            for event in events:
                row = _export_row(event)
                yield writer.writerow([_csv_cell(row[f]) for f in AUDIT_EXPORT_FIELDS])

        response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
        extension = "csv"
    else:

        def lines():
            for event in events:
                yield json.dumps(_export_row(event), ensure_ascii=False, sort_keys=True) + "\n"

        response = StreamingHttpResponse(lines(), content_type="application/x-ndjson")
        extension = "jsonl"
    filename = f"countersign-audit-{stamp}.{extension}"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response
