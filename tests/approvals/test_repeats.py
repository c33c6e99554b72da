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
    from approvals.services import submission as services

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


# --- with policies in force: the moment a plan was judged is no part of what it does ------

REMINDER = {
    "customer_id": "cus-1",
    "channel": "email",
    "send_at": "2026-12-24T09:00:00Z",
    "message": "Your invoice is due.",
}


def post_twice(client, api_headers, action: str, values: dict) -> tuple:
    body = json.dumps({"action": action, "input": values})
    return tuple(
        client.post("/api/v1/plans", data=body, content_type="application/json", **api_headers)
        for _ in range(2)
    )


def test_with_the_demo_policies_in_force_the_same_proposal_is_one_plan(
    client, api_headers, demo_policies, upstream
):
    """The policies' facts (when they judged it, the agent's rate, which the first plan
    itself raised) are fingerprinted, and differ between two identical proposals; the
    repeat key leaves them out."""
    created, repeated = post_twice(client, api_headers, "update_contact_email", EMAIL)
    assert created.status_code == 201, created.content
    assert created.json()["policy"]["outcome"] == "review"  # to a person: ada is a VIP
    assert repeated.status_code == 200 and repeated["Countersign-Repeat"] == "true"
    assert repeated.json()["id"] == created.json()["id"]
    plan = Plan.objects.get()
    assert plan.policy["policies"]["rate"] == [0, 0]  # the facts it was judged on, kept
    assert AuditEvent.objects.filter(plan=plan, kind="plan.repeated").count() == 1


def test_an_invoke_proposed_twice_is_one_plan_with_and_without_policies(
    client, api_headers, catalog, upstream
):
    """Two approvals of two reminder plans would send two messages."""
    created, repeated = post_twice(client, api_headers, "send_reminder", REMINDER)
    assert created.status_code == 201 and repeated.status_code == 200
    assert repeated.json()["id"] == created.json()["id"]
    Plan.objects.update(status=PlanStatus.CANCELLED)
    from tests.conftest import demo_policies_load

    demo_policies_load()
    created, repeated = post_twice(client, api_headers, "send_reminder", REMINDER)
    assert created.status_code == 201 and repeated.status_code == 200
    assert repeated.json()["id"] == created.json()["id"]
    assert "policies" in Plan.objects.get(pk=created.json()["id"]).policy
    assert Plan.objects.filter(status=PlanStatus.AWAITING_APPROVAL).count() == 1


def test_no_repeat_across_a_changed_policy_set_rules_or_action_version(
    agent, demo_policies, catalog, upstream
):
    """What decides a plan changed: a new plan, never the old one given back."""
    import yaml

    from actions.catalog import load_catalog
    from tests.approvals.test_decision_rules import person
    from tests.approvals.test_policies import demo_policy_text, load_policies
    from tests.conftest import demo_catalog_text

    first, _ = submit(agent)
    # Another policy set (the same policies less one): another set hash.
    load_policies(demo_policy_text("routine-email") + "\n" + demo_policy_text("vip-contacts"))
    second, replayed = submit(agent)
    assert replayed is None and second.id != first.id
    # A decision rule now gives the action to a group: another requirement.
    person("bea", "billing-approvers")
    load_catalog(
        json.dumps(
            {
                "version": 1,
                "reviewers": {
                    "groups": ["billing-approvers"],
                    "rules": {
                        "emails": {
                            "match": {"actions": ["update_contact_email"]},
                            "any_of": [{"group": "billing-approvers", "count": 1}],
                        }
                    },
                },
            }
        )
    )
    third, replayed = submit(agent)
    assert replayed is None and third.id not in (first.id, second.id)
    # Another version of the action.
    document = yaml.safe_load(demo_catalog_text())
    card = document["actions"]["update_contact_email"]["card"]
    card["effect"]["en"] = card["effect"]["en"] + " (reworded)"
    load_catalog(
        yaml.safe_dump(
            {
                "version": 1,
                "actions": {"update_contact_email": document["actions"]["update_contact_email"]},
            }
        ),
        base_urls={"demo": upstream.url},
    )
    catalog["update_contact_email"].refresh_from_db()
    fourth, replayed = submit(agent)
    assert replayed is None
    assert fourth.action_version != third.action_version
    assert len({first.id, second.id, third.id, fourth.id}) == 4
    # And the newest, proposed again, is repeated.
    again, replayed = submit(agent)
    assert replayed == Replay.REPEAT and again.id == fourth.id


def test_the_migration_gives_awaiting_plans_the_key_a_submission_would(
    agent, demo_policies, upstream
):
    """0023 fills the key of plans already awaiting from the document they were
    fingerprinted over: a retry after the upgrade finds them."""
    from importlib import import_module

    from django.apps import apps as django_apps

    migration = import_module("approvals.migrations.0023_plan_repeat_key")
    plan, _ = submit(agent)
    assert plan.repeat_key and plan.repeat_key != plan.fingerprint
    assert migration.repeat_key(plan.canonical) == plan.repeat_key
    Plan.objects.filter(pk=plan.pk).update(repeat_key="")
    again, replayed = submit(agent)
    assert replayed is None  # without its key, an old plan is not found
    Plan.objects.filter(pk=again.pk).update(status=PlanStatus.CANCELLED)
    Plan.objects.filter(pk=again.pk).update(repeat_key="")
    migration.backfill(django_apps, None)
    # Only the awaiting plan is given a key: a decided one is never repeated.
    assert Plan.objects.get(pk=plan.pk).repeat_key == plan.repeat_key
    assert Plan.objects.get(pk=again.pk).repeat_key == ""
    third, replayed = submit(agent)
    assert replayed == Replay.REPEAT and third.id == plan.id


def test_without_policies_the_repeat_key_is_the_fingerprint(make_plan):
    """Nothing judged at a moment to leave out: the key is the fingerprint itself (and is
    not computed a second time)."""
    plan = make_plan()
    assert "policies" not in plan.policy
    assert plan.repeat_key == plan.fingerprint
