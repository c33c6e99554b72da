"""A policy that fails to evaluate is recorded by its id and the kind of failure, never by
Cedar's message: that message quotes the values it evaluated, which are the plan's (an
overflow names both numbers), and docs/policy.md promises logs, records and pages
without them."""

from __future__ import annotations

import json
import logging

import yaml
from django.urls import reverse

from actions.catalog import load_catalog
from actions.lib.models import AuditEvent
from approvals.models import Plan, PlanStatus

# What the upstream says the contact's version is: the policy below overflows adding to it.
HOSTILE_VERSION = 9007199254740123  # within JSON's safe integers
OVERFLOWS = (
    '@id("version-arithmetic") @approve\n'
    'permit (principal, action == Action::"update_contact_email", resource)\n'
    "when {\n"
    "  context.before has version &&\n"
    "  context.before.version + 9223372036854775000 > 0\n"
    "};\n"
)


def test_an_overflow_on_a_plans_value_is_recorded_without_the_value(
    catalog, upstream, client, api_headers, reviewer, caplog
):
    section = {
        "enforce": [{"text": OVERFLOWS}],
        "shadow": [{"text": OVERFLOWS.replace("version-arithmetic", "shadow-arithmetic")}],
    }
    load_catalog(yaml.safe_dump({"version": 1, "policies": section}))
    # The upstream holds an odd value (no write of ours can set a version).
    with upstream._lock:
        upstream._data["contacts"]["c-1002"]["version"] = HOSTILE_VERSION
    caplog.set_level(logging.DEBUG)
    answer = client.post(
        "/api/v1/plans",
        data={
            "action": "update_contact_email",
            "input": {"contact_id": "c-1002", "email": "g.hopper@example.test"},
        },
        content_type="application/json",
        **api_headers,
    )
    assert answer.status_code == 201, answer.content
    plan = Plan.objects.get()
    # The preview did read the value, and the failure sent the plan to a person.
    assert plan.before["version"] == HOSTILE_VERSION
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert plan.policy["policies"]["errors"] == ["version-arithmetic"]
    assert plan.shadow["errors"] == [{"policy": "shadow-arithmetic", "message": "integer overflow"}]
    logged = [r for r in caplog.records if "failed to evaluate" in r.getMessage()]
    assert {r.getMessage() for r in logged} == {
        "policy version-arithmetic failed to evaluate on a plan of update_contact_email "
        "(enforce set): integer overflow",
        "policy shadow-arithmetic failed to evaluate on a plan of update_contact_email "
        "(shadow set): integer overflow",
    }
    value = str(HOSTILE_VERSION)
    assert not [r for r in caplog.records if value in r.getMessage()]
    # The plan's own before/after hold it, as they must; nothing said about the policies does.
    said = json.dumps([plan.policy, plan.shadow])
    assert value not in said
    events = list(AuditEvent.objects.values_list("kind", "data"))
    assert events and not [kind for kind, data in events if value in json.dumps(data)]
    # The agent's answer: what the policies said, with no value (the precondition's ETag
    # quotes the version, as it must).
    assert answer.json()["policy"]["errors"] == ["version-arithmetic"]
    assert value not in json.dumps(answer.json()["policy"])
    client.force_login(reviewer)
    page = client.get(reverse("approvals:plan-detail", args=[plan.id])).content.decode()
    assert 'data-testid="policy-errors"' in page and "version-arithmetic" in page
