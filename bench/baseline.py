"""The baseline endpoint of ``make bench`` (scenario B1), mounted by the bench-only
URLconf (``bench/urls.py``), which the settings use only when ``COUNTERSIGN_BENCH=1``
outside production.

It does the work no plan submission can avoid, and nothing else: read the JSON body,
one GET of the target from the upstream with the read token (over a kept-alive
connection), one INSERT of what was read. ``POST /api/v1/plans`` is measured against
it in the same server, so the ratio shows the gateway's own overhead (validation,
credentials, preview, fingerprint, audit) whatever the machine.

The upstream's address and read token come from the environment
(``COUNTERSIGN_BENCH_UPSTREAM``, ``COUNTERSIGN_BENCH_READ_TOKEN``); the table
``bench_baseline`` is created by the harness (bench/run.py), not by a migration.
"""

from __future__ import annotations

import json
import os
import uuid

import httpx
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

TABLE = "bench_baseline"
_client: httpx.Client | None = None


def _upstream() -> httpx.Client:
    global _client
    if _client is None:
        _client = httpx.Client(
            base_url=os.environ["COUNTERSIGN_BENCH_UPSTREAM"],
            headers={"Authorization": f"Bearer {os.environ['COUNTERSIGN_BENCH_READ_TOKEN']}"},
            timeout=10,
        )
    return _client


@csrf_exempt
@require_POST
def baseline_submit(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    contact_id = str(body["input"]["contact_id"])
    response = _upstream().get(f"/contacts/{contact_id}")
    if response.status_code != 200:
        return JsonResponse({"status": response.status_code}, status=502)
    row_id = uuid.uuid4()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (id, input, before) VALUES (%s, %s, %s)",
            [row_id, json.dumps(body["input"]), response.text],
        )
    return JsonResponse({"id": str(row_id), "before": response.json()}, status=201)


urlpatterns = [path("bench/baseline/plans", baseline_submit, name="bench-baseline")]
