"""Agent lifecycle: inactive until activated, expiry, revocation, per-agent rate limits."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from actions.lib.models import AuditEvent
from actions.models import Agent

PLANS = "/api/v1/plans"
ACTIONS = "/api/v1/actions"


def bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def token_from(output: str) -> str:
    return output.strip().splitlines()[-1]


def test_a_new_agent_is_inactive_until_activated(catalog, client, capsys):
    call_command("create_agent", "newbie", "--actions", "update_contact_email")
    out = capsys.readouterr().out
    assert "INACTIVE" in out
    token = token_from(out)
    assert Agent.objects.get(name="newbie").is_active is False
    assert client.get(ACTIONS, **bearer(token)).status_code == 401
    Agent.objects.filter(name="newbie").update(is_active=True)  # what the admin does
    assert client.get(ACTIONS, **bearer(token)).status_code == 200


def test_create_agent_activate_flag(catalog, client, capsys):
    call_command("create_agent", "scripted", "--actions", "update_contact_email", "--activate")
    token = token_from(capsys.readouterr().out)
    assert client.get(ACTIONS, **bearer(token)).status_code == 200


def test_an_expired_token_does_not_authenticate(client, agent, agent_token):
    assert client.get(ACTIONS, **bearer(agent_token)).status_code == 200
    Agent.objects.filter(pk=agent.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = client.get(ACTIONS, **bearer(agent_token))
    assert response.status_code == 401
    assert response["Content-Type"] == "application/problem+json"


def test_create_agent_can_set_an_expiry(catalog, capsys):
    call_command("create_agent", "shortlived", "--activate", "--expires-in-days", "7")
    expires_at = Agent.objects.get(name="shortlived").expires_at
    assert timedelta(days=6) < expires_at - timezone.now() <= timedelta(days=7)


def test_revoke_agent(client, agent, agent_token, capsys):
    call_command("revoke_agent", agent.name)
    assert "revoked" in capsys.readouterr().out
    assert client.get(ACTIONS, **bearer(agent_token)).status_code == 401
    # Re-activating in the admin does not bring a revoked token back.
    Agent.objects.filter(pk=agent.pk).update(is_active=True)
    assert client.get(ACTIONS, **bearer(agent_token)).status_code == 401
    event = AuditEvent.objects.get(kind="agent.revoked")
    assert event.actor == "cli" and event.data["agent"] == agent.name


@pytest.mark.parametrize("redis", [True, False], ids=["redis", "local-cache"])
def test_plan_submissions_are_rate_limited_per_agent(
    client, settings, agent_token, other_agent, redis
):
    if not redis:
        settings.REDIS_URL = ""
    elif not settings.REDIS_URL:
        pytest.skip("no REDIS_URL")
    settings.COUNTERSIGN_RATE_LIMIT = "2/hour"
    body = json.dumps({"action": "update_contact_email", "input": {}})
    post = lambda token: client.post(  # noqa: E731
        PLANS, body, content_type="application/json", **bearer(token)
    )
    assert post(agent_token).status_code == 422  # invalid input still counts
    assert post(agent_token).status_code == 422
    response = post(agent_token)
    assert response.status_code == 429
    assert response["Content-Type"] == "application/problem+json"
    assert 1 <= int(response["Retry-After"]) <= 3600
    problem = response.json()
    assert problem["type"] == "urn:countersign:problem:rate-limited"
    assert problem["status"] == 429 and problem["correlation_id"]
    # Another agent has its own budget.
    assert post(other_agent[1]).status_code == 403  # refused by policy, not by the limit


def test_a_malformed_rate_limit_is_a_configuration_error():
    from django.core.exceptions import ImproperlyConfigured

    from approvals.ratelimit import parse_rate

    assert parse_rate("60/minute") == (60, 60)
    assert parse_rate("5/seconds") == (5, 1)
    assert parse_rate("") is None
    with pytest.raises(ImproperlyConfigured):
        parse_rate("lots")
