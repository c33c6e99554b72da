"""Execution attempts: the record of what the worker sent upstream and what came back."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from approvals.models import Plan


class Attempt(models.Model):
    """One try at the upstream write for one approved plan.

    The idempotency key is generated here and committed *before* the request leaves
    (state ``sending``), so a crash at any point leaves a row that says whether the
    request may have left. One plan has at most one attempt: the unique plan column is
    the database's promise that a plan is written at most once.
    """

    class State(models.TextChoices):
        PREPARED = "prepared"  # claimed; nothing sent yet
        SENDING = "sending"  # committed just before the request leaves: it may have left
        ANSWERED = "answered"  # the upstream answered; see response_status
        NOT_SENT = "not_sent"  # stopped before sending (stale, refused, unreachable)
        LOST = "lost"  # sent, but no answer (timeout, broken connection, worker died)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    plan = models.OneToOneField(Plan, on_delete=models.PROTECT, related_name="attempt")
    idempotency_key = models.CharField(max_length=64, unique=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PREPARED)
    # Tries before anything was sent (upstream unreachable while re-reading).
    tries = models.PositiveSmallIntegerField(default=0)
    request = models.JSONField(default=dict)  # exactly what was sent, secrets redacted
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_headers = models.JSONField(default=dict)
    response_body = models.TextField(blank=True)  # filtered and bounded
    error = models.TextField(blank=True)
    # How many times the request was sent: more than once only with the same
    # idempotency key, and only where the action declares the upstream honours it.
    sends = models.PositiveSmallIntegerField(default=0)
    # Following accepted work (202) and reconciling unknown outcomes.
    status_path = models.CharField(max_length=500, blank=True)
    status_checks = models.PositiveSmallIntegerField(default=0)
    # Reconciliations of an unknown outcome tried so far (automatic and "check now").
    reconcile_checks = models.PositiveSmallIntegerField(default=0)
    reconciliation = models.JSONField(default=dict, blank=True)
    revalidation = models.JSONField(default=dict)  # what the re-read found
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=["prepared", "sending", "answered", "not_sent", "lost"]),
                name="attempt_state_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.id} ({self.state})"
