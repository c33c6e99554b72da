"""A repeated proposal: the same agent proposing the same fingerprint while an earlier plan
with it still awaits a decision gets that plan back (services.plan_submit), through the
JSON API and, in tests/mcp, through the MCP tools."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

from django.db import connections
from django.utils import timezone

from actions.lib.models import AuditEvent
from approvals.models import Plan, PlanStatus
from approvals.services import Replay, plan_submit

EMAIL = {"contact_id": "c-1001", "email": "ada@new.example"}


def submit(agent, input=EMAIL, **kw):
    return plan_submit(agent=agent, action_name="update_contact_email", input=input, **kw)


def test_the_same_proposal_while_it_awaits_gives_the_same_plan(agent, upstream):
    first, replayed = submit(agent, reason="asked by phone")
    assert replayed is None
    again, replayed = submit(agent, reason="asked again")
    assert replayed == Replay.REPEAT
    assert again.id == first.id
    assert Plan.objects.count() == 1
    # The plan keeps the reason it was proposed with; the repeat is on record.
    assert Plan.objects.get().reason == "asked by phone"
    kinds = list(AuditEvent.objects.filter(plan=first).values_list("kind", flat=True))
    assert kinds == ["plan.proposed", "plan.repeated"]


def test_a_different_input_or_another_agent_makes_a_new_plan(agent, other_agent, catalog, upstream):
    first, _ = submit(agent)
    other, replayed = submit(agent, input={**EMAIL, "email": "ada@other.example"})
    assert replayed is None and other.id != first.id
    catalog["update_contact_email"].agents.add(other_agent[0])
    theirs, replayed = submit(other_agent[0])
    assert replayed is None and theirs.id != first.id


def test_once_decided_the_same_proposal_is_a_new_plan(agent, upstream):
    first, _ = submit(agent)
    Plan.objects.filter(pk=first.pk).update(status=PlanStatus.DENIED)
    second, replayed = submit(agent)
    assert replayed is None and second.id != first.id


def test_an_expired_plan_is_expired_and_not_repeated(agent, upstream):
    first, _ = submit(agent)
    Plan.objects.filter(pk=first.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    second, replayed = submit(agent)
    assert replayed is None and second.id != first.id
    assert Plan.objects.get(pk=first.pk).status == PlanStatus.EXPIRED
    assert AuditEvent.objects.filter(plan=first, kind="plan.expired").exists()


def test_the_api_answers_a_repeat_with_200_and_says_so(client, api_headers, agent, upstream):
    body = json.dumps({"action": "update_contact_email", "input": EMAIL})

    def post(**headers):
        return client.post(
            "/api/v1/plans", data=body, content_type="application/json", **api_headers, **headers
        )

    created, repeated = post(), post()
    assert created.status_code == 201 and not created.has_header("Countersign-Repeat")
    assert repeated.status_code == 200 and repeated["Countersign-Repeat"] == "true"
    assert repeated.json()["id"] == created.json()["id"]
    assert repeated["Location"] == f"/api/v1/plans/{created.json()['id']}"
    # With a key the repeat is still the same plan, and the key now names it.
    keyed = post(HTTP_IDEMPOTENCY_KEY="retry-1")
    assert keyed.status_code == 200 and keyed.json()["id"] == created.json()["id"]
    replay = post(HTTP_IDEMPOTENCY_KEY="retry-1")
    assert replay.status_code == 201 and replay["Idempotent-Replayed"] == "true"
    assert Plan.objects.count() == 1


def test_two_identical_proposals_racing_store_one_plan(
    transactional_db, agent, upstream, monkeypatch
):
    """Both read the upstream at the same time (a client retrying while its first call is
    still previewing); they take turns from the fingerprint to commit. Each holds its
    transaction open a moment after storing its plan, so without the turns both would
    find nothing and store one each."""
    from approvals import services

    record = services.audit_record

    def slow_record(**kw):
        event = record(**kw)
        if kw["kind"] == "plan.proposed":
            time.sleep(0.5)
        return event

    monkeypatch.setattr(services, "audit_record", slow_record)
    barrier = threading.Barrier(2)
    results: list = []
    errors: list = []

    def propose() -> None:
        try:
            barrier.wait(timeout=10)
            results.append(submit(agent))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=propose) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert len({plan.id for plan, _ in results}) == 1
    assert sorted(str(replayed) for _, replayed in results) == ["None", "repeat"]
    assert Plan.objects.count() == 1
