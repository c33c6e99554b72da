"""Per-process memory of catalog lookups, never older than the last committed change.

Every agent request looks up the same few rows: the agent behind the token, the action
and whether the agent may use it, its allow-lists, the connector's credentials. They
change rarely, and when they change the change must apply at once (a revoked agent is
refused on its very next request). So each lookup first reads the catalog generation
(actions/generation.py: one primary-key read, plain SQL), which database triggers
replace on every write to those tables, and answers from memory only what was read
under that same generation; any other value empties the memory. A change is therefore
seen by the next lookup in every process, exactly as without the cache, and what is
saved is the ORM's work and the rows' decoding, not the freshness.

Cached objects are shared between threads: callers get copies of model instances
(``fresh``) where they might set attributes. With no generation row (a database just
flushed), nothing is cached.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from django.core.signals import setting_changed
from django.db import connection
from django.dispatch import receiver

from .generation import STATE_TABLE

# Distinct keys kept per generation; past this, lookups go to the database uncached.
MAX_ENTRIES = 10_000

_lock = threading.Lock()
_generation: str | None = None
_entries: dict[tuple[str, Any], Any] = {}
_MISSING = object()
# Set by ``snapshot()``: the generation its block reads under.
_pinned: contextvars.ContextVar[str | None] = contextvars.ContextVar("catalog_pin", default=None)


def current_generation() -> str | None:
    pinned = _pinned.get()
    if pinned is not None:
        return pinned
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT generation FROM {STATE_TABLE} WHERE id = 1")
        row = cursor.fetchone()
    return row[0] if row else None


def cached[T](kind: str, key: Any, load: Callable[[], T], *, keep_none: bool = True) -> T:
    """``load()``'s answer for (kind, key) as of the current generation.

    ``keep_none=False`` does not remember a None answer (an unknown token: remembering
    those would let anyone fill the memory with guesses)."""
    global _generation
    generation = current_generation()
    if generation is None:
        return load()
    entry_key = (kind, key)
    with _lock:
        if _generation == generation:
            value = _entries.get(entry_key, _MISSING)
            if value is not _MISSING:
                return value
    # Loaded after the generation was read: at least as new as that generation.
    value = load()
    if value is None and not keep_none:
        return value
    with _lock:
        if _generation != generation:
            _entries.clear()
            _generation = generation
        if len(_entries) < MAX_ENTRIES:
            _entries[entry_key] = value
    return value


@contextlib.contextmanager
def snapshot() -> Iterator[str | None]:
    """Read the generation once for every lookup in the block: one step that looks up
    several things (a submission: action, allow-lists, credential) sees them all as of
    one moment. Only for blocks that change nothing in the catalog. Gives the block the
    generation it reads under (None: nothing is cached)."""
    with pinned(current_generation()) as generation:
        yield generation


@contextlib.contextmanager
def pinned(generation: str | None) -> Iterator[str | None]:
    """A snapshot under a generation this request has already read (what ``snapshot``
    gave an earlier block of the same request: the token lookup's), instead of reading
    it again. A change committed since that read applies from the next request on,
    exactly as if the request had read the generation once at its start; so a
    generation is only ever carried within one request, never kept across requests."""
    token = _pinned.set(generation) if generation is not None else None
    try:
        yield generation
    finally:
        if token is not None:
            _pinned.reset(token)


def clear() -> None:
    global _generation
    with _lock:
        _entries.clear()
        _generation = None


def fresh[T](instance: T) -> T:
    """A copy of a cached model instance that a caller may modify (Django copies the
    instance's state and its cache of related objects too)."""
    return copy.copy(instance)


def _after_fork_in_child() -> None:
    # A lock held by another thread at fork time would stay held in the child.
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


@receiver(setting_changed)
def _settings_changed(**kwargs) -> None:
    # Some cached values depend on settings (an action's approval defaults).
    clear()
