"""The sweeper publishes again only what the broker queue can be missing: a backlog of
approved plans whose messages are still queued is not republished every sweep."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import Plan, PlanStatus
from executors import broker, sweeper


@pytest.fixture
def overdue(approved, settings):
    """n approved plans, idle past the requeue delay (clones: no preview needed)."""

    def overdue(n: int) -> list[Plan]:
        plan = approved()
        copies = []
        for _ in range(n - 1):
            copy = Plan.objects.get(pk=plan.pk)
            copy.pk = uuid.uuid4()
            copies.append(copy)
        Plan.objects.bulk_create(copies)
        past = timezone.now() - timedelta(seconds=settings.COUNTERSIGN_REQUEUE_AFTER_SECONDS + 5)
        Plan.objects.filter(status=PlanStatus.APPROVED).update(enqueued_at=past)
        return list(Plan.objects.filter(status=PlanStatus.APPROVED).order_by("enqueued_at"))

    return overdue


@pytest.fixture
def published(monkeypatch):
    sent: list[str] = []
    monkeypatch.setattr(
        "actions.lib.dispatch.publish",
        lambda name, plan_id, countdown=None: sent.append(plan_id),
    )
    return sent


def sweep_now(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        return sweeper.sweep()


def test_a_backlog_whose_messages_are_queued_is_not_republished(
    overdue, published, monkeypatch, django_capture_on_commit_callbacks
):
    overdue(6)
    monkeypatch.setattr(broker, "queued_messages", lambda: 6)
    report = sweep_now(django_capture_on_commit_callbacks)
    assert report["requeued"] == 0 and report["still_queued"] == 6
    assert published == []


def test_only_as_many_as_the_queue_can_be_missing_are_republished(
    overdue, published, monkeypatch, django_capture_on_commit_callbacks
):
    plans = overdue(6)
    monkeypatch.setattr(broker, "queued_messages", lambda: 4)
    report = sweep_now(django_capture_on_commit_callbacks)
    assert report["requeued"] == 2 and report["still_queued"] == 4
    assert len(published) == 2
    # The others keep their time and are looked at again next sweep.
    untouched = Plan.objects.exclude(id__in=published).filter(id__in=[p.id for p in plans])
    assert {p.enqueued_at for p in untouched} == {plans[0].enqueued_at}

    # The queue drained and they are still approved: their messages were lost too.
    monkeypatch.setattr(broker, "queued_messages", lambda: 0)
    report = sweep_now(django_capture_on_commit_callbacks)
    assert report["requeued"] == 4  # the two republished a moment ago are not overdue
    assert len(set(published)) == 6


def test_an_unreadable_queue_republishes_at_most_a_batch(
    overdue, published, monkeypatch, settings, django_capture_on_commit_callbacks
):
    overdue(5)
    settings.COUNTERSIGN_REQUEUE_BATCH = 3
    monkeypatch.setattr(broker, "queued_messages", lambda: None)
    assert sweep_now(django_capture_on_commit_callbacks)["requeued"] == 3
    assert sweep_now(django_capture_on_commit_callbacks)["requeued"] == 2
    assert sweep_now(django_capture_on_commit_callbacks)["requeued"] == 0
    assert len(set(published)) == 5


def test_the_queue_depth_is_read_from_the_broker(monkeypatch):
    """Against the test broker (Redis), on a queue of this test's own: the number of
    messages waiting in it. Unknown (None) here would mean the sweeper never sees a
    backlog, so it is a failure, not an acceptable answer."""
    from celery import current_app

    name = f"countersign-depth-{uuid.uuid4().hex}"
    monkeypatch.setitem(current_app.conf, "task_default_queue", name)
    with current_app.connection_for_write() as conn:
        queue = conn.SimpleQueue(name)
        try:
            for n in range(3):
                queue.put({"n": n})
            assert broker.queued_messages() == 3
            queue.get(timeout=5).ack()
            assert broker.queued_messages() == 2
        finally:
            queue.close()
            conn.default_channel.queue_delete(name)
