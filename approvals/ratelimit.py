"""Per-agent rate limits: a fixed-window counter per agent and window.

With REDIS_URL set the counter lives in Redis (INCR, then EXPIRE on the first hit of a
window), so every web process on every machine shares it. Without Redis (embedded mode)
it lives in Django's default cache, which is local memory: per process, good enough for
one machine. The limit comes from COUNTERSIGN_RATE_LIMIT ("60/minute"; empty disables).
"""

from __future__ import annotations

import logging
import time
from functools import lru_cache

import redis
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured

from actions.lib.exceptions import CountersignError

log = logging.getLogger(__name__)

_PERIODS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


class RateLimited(CountersignError):
    status = 429
    type = "rate-limited"
    title = "Too many requests"

    def __init__(self, detail: str = "", *, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


def parse_rate(value: str) -> tuple[int, int] | None:
    """ "60/minute" -> (60, 60); "" -> None (no limit)."""
    value = (value or "").strip()
    if not value:
        return None
    count, _, period = value.partition("/")
    try:
        limit, seconds = int(count), _PERIODS[period.strip().rstrip("s")]
    except (ValueError, KeyError):
        raise ImproperlyConfigured(
            f"COUNTERSIGN_RATE_LIMIT must look like 60/minute, got {value!r}"
        ) from None
    if limit < 1:
        raise ImproperlyConfigured("COUNTERSIGN_RATE_LIMIT needs a positive count")
    return limit, seconds


@lru_cache(maxsize=4)
def _redis(url: str):
    return redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)


def _hit(key: str, window: int) -> int:
    """Count one request in this window; return the count so far."""
    url = settings.REDIS_URL
    if url:
        client = _redis(url)
        pipe = client.pipeline()
        pipe.incr(key)
        # NX: only the window's first hit sets the expiry (redis >= 7).
        pipe.expire(key, window + 1, nx=True)
        count, _ = pipe.execute()
        return int(count)
    if cache.add(key, 1, timeout=window + 1):
        return 1
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=window + 1)
        return 1


def rate_limit_check(*, scope: str, subject: str, rate: str | None = None) -> None:
    """Raise RateLimited if ``subject`` went over the limit for ``scope`` this window
    (``rate``, by default COUNTERSIGN_RATE_LIMIT).

    A broken Redis does not stop agents: the error is logged and the request allowed
    (the limit protects capacity; approval still guards every effect)."""
    rate = parse_rate(settings.COUNTERSIGN_RATE_LIMIT if rate is None else rate)
    if rate is None:
        return
    limit, window = rate
    now = time.time()
    bucket = int(now // window)
    key = f"countersign:rl:{scope}:{subject}:{window}:{bucket}"
    try:
        count = _hit(key, window)
    except Exception:  # noqa: BLE001 — any Redis failure: fail open, loudly
        log.exception("rate limit counter unavailable; request allowed")
        return
    if count > limit:
        retry_after = max(1, int((bucket + 1) * window - now + 0.999))
        raise RateLimited(
            f"at most {limit} requests per {window} s; try again in {retry_after} s",
            retry_after=retry_after,
        )
