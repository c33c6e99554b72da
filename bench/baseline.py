"""The baseline endpoint of ``make bench`` (scenario B1), mounted by the bench-only
URLconf (``bench/urls.py``), which the settings use only when ``COUNTERSIGN_BENCH=1``
outside production.

It does the work no plan submission can avoid, and nothing else: read the JSON body,
one GET of the target from the upstream with the read token (over a kept-alive
connection), one INSERT of what was read. ``POST /api/v1/plans`` is measured against
it in the same server, so the ratio shows the gateway's own overhead (validation,
credentials, preview, fingerprint, audit) whatever the machine.

The **skeleton** endpoint (``POST /bench/baseline/skeleton``) adds, in plain SQL and with
no checks, the other round trips a submission makes and no implementation of the
guarantees can skip: the rate-limit count in Redis, the catalog generation read, and one
transaction holding the repeat check and two rows (the plan, its audit event), with a
canonical JSON document hashed in between. What it costs against the baseline is an upper
bound on the ratio any submission can reach on this stack.

The upstream's address and read token come from the environment
(``COUNTERSIGN_BENCH_UPSTREAM``, ``COUNTERSIGN_BENCH_READ_TOKEN``); the tables
``bench_baseline`` and ``bench_skeleton_event`` are created by the harness
(bench/run.py), not by a migration.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid

import httpx
import redis
from django.conf import settings
from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

TABLE = "bench_baseline"
EVENTS = "bench_skeleton_event"
_client: httpx.Client | None = None
_redis: redis.Redis | None = None


def _upstream() -> httpx.Client:
    global _client
    if _client is None:
        _client = httpx.Client(
            base_url=os.environ["COUNTERSIGN_BENCH_UPSTREAM"],
            headers={"Authorization": f"Bearer {os.environ['COUNTERSIGN_BENCH_READ_TOKEN']}"},
            timeout=10,
        )
    return _client


def _read_contact(body: dict) -> httpx.Response:
    """The one upstream read every submission makes: the contact the plan would change."""
    return _upstream().get(f"/contacts/{body['input']['contact_id']}")


@csrf_exempt
@require_POST
def baseline_submit(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    response = _read_contact(body)
    if response.status_code != 200:
        return JsonResponse({"status": response.status_code}, status=502)
    row_id = uuid.uuid4()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (id, input, before) VALUES (%s, %s, %s)",
            [row_id, json.dumps(body["input"]), response.text],
        )
    return JsonResponse({"id": str(row_id), "before": response.json()}, status=201)


def _counter() -> redis.Redis:
    global _redis
    if _redis is None:
        _redis = redis.Redis.from_url(settings.REDIS_URL)
    return _redis


@csrf_exempt
@require_POST
def skeleton_submit(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    pipe = _counter().pipeline()
    pipe.incr("bench:skeleton")
    pipe.expire("bench:skeleton", 61, nx=True)
    pipe.execute()
    with connection.cursor() as cursor:
        cursor.execute("SELECT generation FROM actions_catalogstate WHERE id = 1")
        cursor.fetchone()
    response = _read_contact(body)
    if response.status_code != 200:
        return JsonResponse({"status": response.status_code}, status=502)
    before = response.json()
    document = json.dumps(
        {"input": body["input"], "before": before, "after": {**before, **body["input"]}},
        sort_keys=True,
        separators=(",", ":"),
    )
    fingerprint = hashlib.sha256(document.encode()).hexdigest()
    row_id = uuid.uuid4()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {TABLE} WHERE fingerprint = %s LIMIT 1", [fingerprint])
        cursor.fetchone()
        cursor.execute(
            f"INSERT INTO {TABLE} (id, input, before, fingerprint, canonical) "
            "VALUES (%s, %s, %s, %s, %s)",
            [row_id, json.dumps(body["input"]), response.text, fingerprint, document],
        )
        event = json.dumps({"kind": "plan.proposed", "plan": str(row_id)}, sort_keys=True)
        cursor.execute(
            f"INSERT INTO {EVENTS} (plan, body, hash) VALUES (%s, %s, %s)",
            [row_id, event, hashlib.sha256(event.encode()).digest()],
        )
    return JsonResponse({"id": str(row_id), "before": before}, status=201)


urlpatterns = [
    path("bench/baseline/plans", baseline_submit, name="bench-baseline"),
    path("bench/baseline/skeleton", skeleton_submit, name="bench-skeleton"),
]
