"""Actions imported from an OpenAPI document run as written: a read proposed from a GET
returns only its declared fields, and a 202 linked to its status read returns the id the
check needs, names the read, and is followed to its end. The worker plays in this process
against the demo upstream (a real HTTP server)."""

from __future__ import annotations

import json

import pytest

from actions.catalog import action_define
from actions.models import Action
from actions.openapi import import_openapi
from actions.services import agent_create
from approvals.models import Plan, PlanStatus
from approvals.services import approval_record, plan_submit
from executors.reconciliation import pending_follow

pytestmark = pytest.mark.usefixtures("executor_key")
CANARY = "canary-undocumented-" + "7a2c" * 8
CARD = {key: f"The {key}, in plain words." for key in ("effect", "scope", "consent", "retry")}

CONTACT = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "maxLength": 20},
        "name": {"type": "string", "maxLength": 120},
        "email": {"type": "string", "format": "email", "maxLength": 254},
        "workspace": {"type": "string", "enum": ["ws-blue", "ws-red"]},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
}
DEPLOYMENT = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "maxLength": 40},
        "service": {"type": "string", "maxLength": 40},
        "status": {"type": "string", "enum": ["queued", "running", "succeeded", "failed"]},
    },
}


def json_answer(schema: dict, code: str = "200", **extra) -> dict:
    return {
        code: {"description": "ok", "content": {"application/json": {"schema": schema}}, **extra}
    }


def path_param(name: str, pattern: str) -> dict:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": pattern, "maxLength": 20},
    }


# The demo upstream as its OpenAPI document would describe it (the parts used here).
DEMO_API = json.dumps(
    {
        "openapi": "3.1.0",
        "info": {"title": "Demo", "version": "1"},
        "paths": {
            "/contacts/{contact_id}": {
                "get": {
                    "operationId": "fetchContact",
                    "summary": "Read one contact",
                    "parameters": [path_param("contact_id", "^c-[0-9]{1,10}$")],
                    "responses": json_answer(CONTACT),
                }
            },
            "/deployments": {
                "post": {
                    "operationId": "launchDeployment",
                    "summary": "Deploy one version of one service",
                    "x-countersign": {
                        "status": {
                            "done_when": {"pointer": "/status", "equals": "succeeded"},
                            "failed_when": {"pointer": "/status", "equals": "failed"},
                        }
                    },
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["service", "version"],
                                    "properties": {
                                        "service": {"enum": ["api", "web"]},
                                        "version": {"type": "string", "maxLength": 20},
                                    },
                                }
                            }
                        },
                    },
                    "responses": json_answer(
                        DEPLOYMENT,
                        "202",
                        headers={"Location": {"schema": {"type": "string"}}},
                        links={
                            "Deployment": {
                                "operationId": "fetchDeployment",
                                "parameters": {"deployment_id": "$response.body#/id"},
                            }
                        },
                    ),
                }
            },
            "/deployments/{deployment_id}": {
                "get": {
                    "operationId": "fetchDeployment",
                    "summary": "Read one deployment's state",
                    "parameters": [path_param("deployment_id", "^dep-[0-9]{1,10}$")],
                    "responses": json_answer(DEPLOYMENT),
                }
            },
        },
    }
)


@pytest.fixture
def imported(catalog, reviewer):
    """The document imported into the demo connector, reviewed and enabled by a person;
    an agent allowed to use what was imported, and its token."""
    report = import_openapi(DEMO_API, connector="demo", actor="ada")
    names = [p.name for p in report.proposed]
    assert names == ["fetch_contact", "launch_deployment", "fetch_deployment"]
    for name in names:
        action = Action.objects.get(name=name)
        card = {**action.definition["card"], **CARD}
        action_define(
            name=name,
            definition={**action.definition, "card": card, "enabled": True},
            actor="ada",
            source=Action.Source.ADMIN,
            class_confirmed=True,
        )
    return agent_create(name="imported-agent", action_names=names, active=True)


def approved(agent, reviewer, action: str, input: dict, capture) -> Plan:
    with capture(execute=False):
        plan, _ = plan_submit(agent=agent, action_name=action, input=input)
        approval_record(
            plan_id=plan.id,
            reviewer=reviewer,
            decision="approve",
            fingerprint_seen=plan.fingerprint,
        )
    return Plan.objects.get(pk=plan.pk)


def test_an_imported_read_returns_only_what_it_declares(
    upstream, imported, reviewer, run, django_capture_on_commit_callbacks
):
    # What the upstream has that the document does not describe never reaches the agent.
    upstream.mutate("/contacts/c-1001", {"notes": CANARY})
    plan = approved(
        imported[0],
        reviewer,
        "fetch_contact",
        {"contact_id": "c-1001"},
        django_capture_on_commit_callbacks,
    )
    assert run(plan) == PlanStatus.COMPLETED
    result = Plan.objects.get(pk=plan.pk).result
    assert result == {
        "id": "c-1001",
        "name": "Ada Lovelace",
        "email": "ada@example.test",
        "workspace": "ws-blue",
    }
    assert CANARY not in json.dumps(result)
    assert upstream.writes() == []


def test_an_imported_202_returns_the_id_its_link_needs_and_is_followed(
    upstream, imported, reviewer, run, client, django_capture_on_commit_callbacks
):
    plan = approved(
        imported[0],
        reviewer,
        "launch_deployment",
        {"service": "api", "version": "v2.0.0"},
        django_capture_on_commit_callbacks,
    )
    assert run(plan) == PlanStatus.PENDING
    # The agent is told the id and the read the link names, with the input to propose it.
    headers = {"HTTP_AUTHORIZATION": f"Bearer {imported[1]}"}
    outcome = client.get(f"/api/v1/plans/{plan.id}", **headers).json()["outcome"]
    deployment_id = outcome["result"]["id"]
    assert deployment_id.startswith("dep-") and outcome["result"]["status"] == "queued"
    assert outcome["check_with"] == {
        "action": "fetch_deployment",
        "input": {"deployment_id": deployment_id},
    }
    with django_capture_on_commit_callbacks(execute=False):
        while pending_follow(plan_id=plan.id) == "following":
            pass
    plan = Plan.objects.get(pk=plan.pk)
    assert plan.status == PlanStatus.COMPLETED
    assert plan.result["status"] == "succeeded"

    # The agent checks it with the read the document linked: it runs as proposed.
    check = approved(
        imported[0],
        reviewer,
        "fetch_deployment",
        {"deployment_id": deployment_id},
        django_capture_on_commit_callbacks,
    )
    assert run(check) == PlanStatus.COMPLETED
    assert Plan.objects.get(pk=check.pk).result == {
        "id": deployment_id,
        "status": "succeeded",
        "service": "api",
    }
