"""A person's resolution of an unknown outcome names a plan that must exist: the domain's
NotFound, which the pages turn into a 404 (the resolution itself is tested with the
failure paths in test_failures.py)."""

from __future__ import annotations

import uuid

import pytest

from actions.lib.exceptions import NotFound
from actions.lib.models import AuditEvent
from approvals.services import plan_resolve


def test_resolving_an_unknown_plan_is_not_found(reviewer):
    with pytest.raises(NotFound):
        plan_resolve(plan_id=uuid.uuid4(), reviewer=reviewer, state="completed", note="seen")
    assert not AuditEvent.objects.exists()
