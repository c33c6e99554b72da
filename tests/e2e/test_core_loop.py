"""The whole loop with real processes: web server, Celery worker, PostgreSQL, Redis and
the demo upstream."""

from __future__ import annotations

import re

import httpx
import pytest

pytestmark = pytest.mark.e2e


def login(client: httpx.Client, username: str, password: str) -> None:
    page = client.get("/accounts/login/")
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    response = client.post(
        "/accounts/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": csrf},
        headers={"Referer": str(client.base_url) + "/accounts/login/"},
    )
    assert response.status_code == 302, response.text


def test_agent_proposes_reviewer_approves_worker_applies_once(
    live, upstream, agent_token, reviewer
):
    api = httpx.Client(
        base_url=live["url"] + "/api/v1",
        headers={"Authorization": f"Bearer {agent_token}"},
        timeout=40,
    )
    created = api.post(
        "/plans",
        json={
            "action": "update_contact_email",
            "input": {"contact_id": "c-1001", "email": "ada@new.example"},
            "reason": "customer asked",
        },
    )
    assert created.status_code == 201, created.text
    plan = created.json()
    assert plan["status"] == "awaiting_approval"
    assert upstream.writes() == [], "the preview wrote upstream"

    web = httpx.Client(base_url=live["url"], timeout=10)
    login(web, "rita", "pw-rita")
    page = web.get(f"/plans/{plan['id']}/")
    assert plan["short_code"] in page.text
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    fingerprint = re.search(r'name="fingerprint" value="([0-9a-f]{64})"', page.text).group(1)
    decided = web.post(
        f"/plans/{plan['id']}/decide",
        data={"decision": "approve", "fingerprint": fingerprint, "csrfmiddlewaretoken": csrf},
        headers={"Referer": live["url"]},
    )
    assert decided.status_code == 302

    status = plan["status"]
    for _ in range(3):
        result = api.get(f"/plans/{plan['id']}", params={"wait": 10}).json()
        status = result["status"]
        if status not in ("approved", "executing"):
            break
    assert status == "completed", result
    assert result["outcome"]["state"] == "completed"
    writes = upstream.writes()
    assert len(writes) == 1
    assert writes[0]["method"] == "PATCH"
    assert upstream.state()["contacts"]["c-1001"]["email"] == "ada@new.example"
