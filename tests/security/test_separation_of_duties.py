"""Separation of duties: agents cannot approve; an agent's registrar cannot be the only
approver of its irreversible plans; two approvers are two different people."""

from __future__ import annotations

import copy

import pytest

from actions.lib.exceptions import AlreadyDecided, NotAllowed
from actions.lib.models import AuditEvent
from actions.models import Agent
from approvals.api.endpoints import api
from approvals.models import Plan, PlanStatus
from approvals.services import approval_record

DELETE = {"action": "delete_contact", "input": {"contact_id": "c-1003"}}


def fresh(plan) -> Plan:
    return Plan.objects.get(pk=plan.pk)


@pytest.fixture
def decide(django_capture_on_commit_callbacks):
    def decide(plan, reviewer, decision="approve"):
        with django_capture_on_commit_callbacks(execute=False):
            return approval_record(
                plan_id=plan.id,
                reviewer=reviewer,
                decision=decision,
                fingerprint_seen=plan.fingerprint,
            )

    return decide


@pytest.fixture
def one_approver_irreversible(settings):
    policy = copy.deepcopy(settings.COUNTERSIGN_APPROVAL_POLICY)
    policy["irreversible"]["approvers"] = 1
    settings.COUNTERSIGN_APPROVAL_POLICY = policy


def test_every_agent_route_is_listed_and_none_approves(db):
    schema = api.get_openapi_schema()
    routes = {
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method in operations
    }
    assert routes == {
        ("GET", "/api/v1/actions"),
        ("POST", "/api/v1/plans"),
        ("GET", "/api/v1/plans/{plan_id}"),
        ("POST", "/api/v1/plans/{plan_id}/cancel"),
    }
    assert not any("approv" in path or "decide" in path for _, path in routes)


def test_the_agents_registrar_cannot_approve_its_irreversible_plan_alone(
    make_plan, agent, reviewer, second_reviewer, decide, one_approver_irreversible
):
    Agent.objects.filter(pk=agent.pk).update(created_by=reviewer)
    plan = make_plan(**DELETE)
    assert plan.required_approvals == 1
    with pytest.raises(NotAllowed, match="registered this agent"):
        decide(plan, reviewer)
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL
    assert AuditEvent.objects.filter(plan=plan, kind="approval.separation_of_duties").exists()
    decide(plan, second_reviewer)
    assert fresh(plan).status == PlanStatus.APPROVED


def test_the_registrar_may_deny(make_plan, agent, reviewer, decide, one_approver_irreversible):
    Agent.objects.filter(pk=agent.pk).update(created_by=reviewer)
    plan = make_plan(**DELETE)
    decide(plan, reviewer, decision="deny")
    assert fresh(plan).status == PlanStatus.DENIED


def test_the_registrar_may_be_one_of_two_approvers(
    make_plan, agent, reviewer, second_reviewer, decide
):
    Agent.objects.filter(pk=agent.pk).update(created_by=reviewer)
    plan = make_plan(**DELETE)
    assert plan.required_approvals == 2
    decide(plan, reviewer)
    decide(plan, second_reviewer)
    assert fresh(plan).status == PlanStatus.APPROVED


def test_the_registrar_may_approve_reversible_plans(make_plan, agent, reviewer, decide):
    Agent.objects.filter(pk=agent.pk).update(created_by=reviewer)
    plan = make_plan()
    decide(plan, reviewer)
    assert fresh(plan).status == PlanStatus.APPROVED


def test_the_setting_allows_the_registrar(
    make_plan, agent, reviewer, decide, settings, one_approver_irreversible
):
    settings.COUNTERSIGN_CREATOR_MAY_APPROVE_IRREVERSIBLE = True
    Agent.objects.filter(pk=agent.pk).update(created_by=reviewer)
    plan = make_plan(**DELETE)
    decide(plan, reviewer)
    assert fresh(plan).status == PlanStatus.APPROVED


def test_two_approvers_are_two_different_people(make_plan, reviewer, decide):
    plan = make_plan(**DELETE)
    decide(plan, reviewer)
    with pytest.raises(AlreadyDecided):
        decide(plan, reviewer)
    assert fresh(plan).status == PlanStatus.AWAITING_APPROVAL


def test_an_agent_registered_with_create_agent_records_its_registrar(
    make_plan, reviewer, second_reviewer, decide, one_approver_irreversible, capsys
):
    from django.core.management import call_command

    call_command(
        "create_agent",
        "ritas-bot",
        "--actions",
        "delete_contact",
        "--activate",
        "--created-by",
        "rita",
    )
    assert "registered by rita" in capsys.readouterr().out
    bot = Agent.objects.get(name="ritas-bot")
    assert bot.created_by == reviewer
    assert AuditEvent.objects.get(kind="agent.created", data__agent="ritas-bot").actor == (
        "cli:rita"
    )
    plan = make_plan(**DELETE, by=bot)
    with pytest.raises(NotAllowed, match="registered this agent"):
        decide(plan, reviewer)
    decide(plan, second_reviewer)
    assert fresh(plan).status == PlanStatus.APPROVED


def test_create_agent_defaults_the_registrar_to_the_running_user(
    catalog, reviewer, monkeypatch, capsys
):
    from django.core.management import call_command

    monkeypatch.setattr("getpass.getuser", lambda: "rita")
    call_command("create_agent", "default-bot", "--actions", "delete_contact")
    assert Agent.objects.get(name="default-bot").created_by == reviewer
    monkeypatch.setattr("getpass.getuser", lambda: "nobody-here")
    call_command("create_agent", "orphan-bot", "--actions", "delete_contact")
    assert "no registrar recorded" in capsys.readouterr().out
    assert Agent.objects.get(name="orphan-bot").created_by is None


def test_create_agent_refuses_an_unknown_registrar(catalog):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="no user named"):
        call_command("create_agent", "x-bot", "--created-by", "ghost")
    assert not Agent.objects.filter(name="x-bot").exists()
