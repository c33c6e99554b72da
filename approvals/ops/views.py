"""For the platform around Countersign, not for people: liveness, readiness and metrics.

None needs a sign-in (probes and scrapers have none); ``/readyz`` is rate-limited per
client address (it reads the database and the broker), ``/metrics`` is guarded by a
token or an address allow-list (approvals.ops.monitoring), ``/healthz`` answers from the
process alone.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4

from ..ratelimit import RateLimited, rate_limit_check
from .health import readiness
from .monitoring import metrics_allowed, metrics_configured, metrics_text


@never_cache
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """The process is alive and answers: no database, no broker."""
    return JsonResponse({"status": "alive"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """200 when this deployment can move plans, 503 with the failing checks otherwise."""
    try:
        rate_limit_check(
            scope="readyz",
            subject=request.META.get("REMOTE_ADDR") or "unknown",
            rate=settings.COUNTERSIGN_HEALTH_RATE_LIMIT,
        )
    except RateLimited as exc:
        response = JsonResponse({"status": "rate limited"}, status=429)
        response["Retry-After"] = str(exc.retry_after)
        return response
    ready, body = readiness()
    return JsonResponse(body, status=200 if ready else 503)


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not metrics_configured():
        return JsonResponse({"status": "metrics are not enabled"}, status=404)
    if not metrics_allowed(
        authorization=request.headers.get("Authorization"),
        remote_addr=request.META.get("REMOTE_ADDR"),
    ):
        response = JsonResponse({"status": "not allowed"}, status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(metrics_text(), content_type=CONTENT_TYPE_PLAIN_0_0_4)
