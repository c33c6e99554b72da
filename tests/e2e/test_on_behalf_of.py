"""On behalf of a person, against the real OpenID provider (panva/oidc-provider under
Node) and the SSO web server of the session: Ada signs in through the provider, and the
ID token it issued her (relayed untouched by the suite's token endpoint,
tests/oidc/support.py) is what the agent sends in Countersign-On-Behalf-Of, or in the
MCP call's ``_meta``. The plan shows her, in the API answer, on its page and in the
queue; she cannot approve it (403, audited); another reviewer can, and it runs.

Tokens Countersign must refuse, each with a problem document and no plan made: the
same token expired, for another audience, from another issuer, re-signed with a key
the provider does not publish or with a fresh key under the provider's own ``kid``,
and text that is no token at all. The agent's own bearer token keeps working."""

from __future__ import annotations

import anyio
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.e2e.support import ReviewerClient, csrf_token, orm
from tests.oidc.support import sign_in_without_a_browser

pytestmark = pytest.mark.e2e

HEADER = "Countersign-On-Behalf-Of"
PERSON = "ada-sso"  # tests/oidc/provider.mjs: groups reviewers and billing


@pytest.fixture
def ada(sso):
    """Ada, signed in to the SSO web server through the provider, and her ID token."""
    http = httpx.Client(base_url=sso["url"], timeout=10)
    answer = sign_in_without_a_browser(http, f"{sso['url']}/accounts/oidc/start/", PERSON)
    assert answer.status_code == 302 and answer.headers["location"].endswith("/plans/")
    (token,) = sso["token_endpoint"].tokens
    yield http, token
    http.close()


def propose(agent, email: str, token: str | None = None) -> httpx.Response:
    return agent.http.post(
        "/plans",
        json={
            "action": "update_contact_email",
            "input": {"contact_id": "c-1001", "email": email},
            "reason": "Ada asked for it",
        },
        headers={HEADER: token} if token is not None else {},
    )


def plans_made() -> int:
    from approvals.models import Plan

    return orm(lambda: Plan.objects.count())


def test_a_plan_for_ada_shows_her_and_she_cannot_approve_it(
    sso, ada, sso_agent_api, reviewer, upstream
):
    from actions.lib.models import AuditEvent
    from approvals.models import Approval

    http, token = ada
    answer = propose(sso_agent_api, "ada@asked.example", token)
    assert answer.status_code == 201, answer.text
    plan = answer.json()
    assert plan["requester"] == {
        "iss": sso["issuer"],
        "sub": PERSON,
        "groups": ["billing", "reviewers"],
    }
    assert sso_agent_api.get(plan["id"])["requester"] == plan["requester"]

    # Another reviewer reads whom it is for, on the plan's page and in the queue.
    rita = ReviewerClient(sso["url"], "rita", "pw-rita")
    who = "ada Example (ada-sso@example.test)"
    assert f"On behalf of <strong>{who}</strong>." in rita.page(plan["id"])
    queue = rita.http.get("/plans/").text
    assert f'data-testid="requester">{who}</td>' in queue

    # Ada's page tells her; her approval is refused with 403, audited, nothing recorded.
    page = http.get(f"/plans/{plan['id']}/")
    assert page.status_code == 200 and 'data-testid="you-requested"' in page.text
    refused = http.post(
        f"/plans/{plan['id']}/decide",
        data={
            "decision": "approve",
            "fingerprint": plan["fingerprint"],
            "comment": "",
            "csrfmiddlewaretoken": csrf_token(page.text),
        },
        headers={"Referer": f"{sso['url']}/plans/{plan['id']}/"},
    )
    assert refused.status_code == 403
    assert "this plan was proposed on your behalf: another reviewer must approve it" in (
        refused.text
    )

    def refusal():
        event = AuditEvent.objects.get(kind="approval.requester_refused", plan_id=plan["id"])
        return event.actor, Approval.objects.filter(plan_id=plan["id"]).count()

    assert orm(refusal) == (f"user:{PERSON}", 0)
    assert sso_agent_api.get(plan["id"])["status"] == "awaiting_approval"

    # Rita approves it, and it runs.
    rita.decide(plan["id"], "approve")
    assert sso_agent_api.wait_for(plan["id"])["status"] == "completed"
    rita.close()


def test_a_plan_without_a_token_is_the_agent_alone(sso, sso_agent_api, reviewer, upstream):
    answer = propose(sso_agent_api, "alone@asked.example")
    assert answer.status_code == 201, answer.text
    plan = answer.json()
    assert plan["requester"] is None
    rita = ReviewerClient(sso["url"], "rita", "pw-rita")
    assert "Proposed by the agent alone, on behalf of nobody." in rita.page(plan["id"])
    assert "the agent alone" in rita.http.get("/plans/").text
    rita.close()


def _stranger_under_the_providers_kid(token: str) -> str:
    """Ada's claims, signed with a fresh RSA key but naming the provider's key id."""
    claims = jwt.decode(token, options={"verify_signature": False})
    kid = jwt.get_unverified_header(token)["kid"]
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


def test_tokens_that_do_not_name_someone_for_us_are_refused_and_no_plan_is_made(
    sso, ada, sso_agent_api, upstream
):
    _, token = ada
    endpoint = sso["token_endpoint"]
    header, payload, signature = token.split(".")
    cases = {
        "expired": (endpoint.resign(token, "expired"), "the ID token has expired"),
        "audience": (endpoint.resign(token, "audience"), "meant for another client"),
        "issuer": (endpoint.resign(token, "issuer"), "issued by another issuer"),
        "unpublished key": (
            endpoint.resign(token, "untrusted_key"),
            "signed with a key the identity provider does not publish",
        ),
        "another key, the provider's kid": (
            _stranger_under_the_providers_kid(token),
            "the ID token's signature is not valid",
        ),
        "tampered signature": (
            f"{header}.{payload}.{signature[:10]}{'A' if signature[10] != 'A' else 'B'}"
            f"{signature[11:]}",
            "the ID token's signature is not valid",
        ),
        "not a token": ("not-a-token", "the ID token is not valid"),
    }
    before = plans_made()
    for case, (sent, reason) in cases.items():
        answer = propose(sso_agent_api, "refused@asked.example", sent)
        assert answer.status_code == 403, (case, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
        problem = answer.json()
        assert problem["type"].endswith("on-behalf-of-refused"), (case, problem)
        assert reason in problem["detail"] and "no plan was made" in problem["detail"], case
        assert token not in answer.text
    assert plans_made() == before

    # The agent's own bearer token was never in question; Ada's real token still works.
    assert propose(sso_agent_api, "refused@asked.example").status_code == 201
    good = propose(sso_agent_api, "refused@asked.example", token)
    assert good.status_code == 201 and good.json()["requester"]["sub"] == PERSON
    assert plans_made() == before + 2


def test_over_mcp_the_token_goes_in_the_calls_meta(sso, ada, agent_token, upstream):
    from tests.mcp.conftest import http_client

    _, token = ada
    expired = sso["token_endpoint"].resign(token, "expired")

    async def main():
        async with http_client(sso["url"], agent_token) as client:
            arguments = {"contact_id": "c-1001", "email": "mcp@asked.example", "reason": "asked"}
            meta = {"countersign/on-behalf-of": token}
            proposed = await client.call_tool("update_contact_email", arguments, meta=meta)
            refused = await client.call_tool(
                "update_contact_email",
                {**arguments, "email": "mcp-refused@asked.example"},
                meta={"countersign/on-behalf-of": expired},
            )
            return proposed, refused

    before = plans_made()
    proposed, refused = anyio.run(main)
    assert not proposed.is_error, proposed.content
    assert proposed.structured_content["requester"]["sub"] == PERSON
    assert refused.is_error
    assert refused.structured_content["type"].endswith("on-behalf-of-refused")
    assert "the ID token has expired" in refused.structured_content["detail"]
    assert "No plan was created." in refused.content[0].text
    assert plans_made() == before + 1


def test_over_mcp_http_the_header_works_too_and_two_different_tokens_are_refused(
    sso, ada, agent_token, upstream
):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    _, token = ada
    expired = sso["token_endpoint"].resign(token, "expired")

    async def main():
        headers = {"Authorization": f"Bearer {agent_token}", HEADER: token}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60)) as http:
            transport = streamable_http_client(sso["url"] + "/mcp", http_client=http)
            async with Client(transport, read_timeout_seconds=60) as client:
                arguments = {"contact_id": "c-1001", "email": "hdr@asked.example"}
                by_header = await client.call_tool("update_contact_email", arguments)
                both = await client.call_tool(
                    "update_contact_email",
                    {**arguments, "email": "both@asked.example"},
                    meta={"countersign/on-behalf-of": expired},
                )
                return by_header, both

    before = plans_made()
    by_header, both = anyio.run(main)
    assert not by_header.is_error, by_header.content
    assert by_header.structured_content["requester"]["sub"] == PERSON
    assert both.is_error
    assert "two different ID tokens were sent" in both.structured_content["detail"]
    assert plans_made() == before + 1


def test_a_task_augmented_call_of_the_handshake_era_carries_the_person_too(
    sso, ada, agent_token, upstream
):
    """A 2025-11-25 client asking for a task (the TypeScript SDK 1.x) sends the same
    ``_meta``: the plan its task stands for is on behalf of the person, and an expired
    token makes no plan. Without the token the task's plan would be the agent's alone,
    and the person could approve their own request."""
    from approvals.models import Plan

    _, token = ada
    expired = sso["token_endpoint"].resign(token, "expired")

    def task_call(email: str, person_token: str) -> httpx.Response:
        return httpx.post(
            sso["url"] + "/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {
                    "name": "update_contact_email",
                    "arguments": {"contact_id": "c-1001", "email": email, "reason": "asked"},
                    "task": {"ttl": 60000},
                    "_meta": {"countersign/on-behalf-of": person_token},
                },
            },
            headers={
                "Accept": "application/json, text/event-stream",
                "Authorization": f"Bearer {agent_token}",
                "MCP-Protocol-Version": "2025-11-25",
            },
            timeout=30,
        )

    before = plans_made()
    answer = task_call("task@asked.example", token)
    assert answer.status_code == 200, answer.text
    task = answer.json()["result"]["task"]
    plan = orm(lambda: Plan.objects.get(pk=task["taskId"]))
    assert plan.requester["sub"] == PERSON

    refused = task_call("task-refused@asked.example", expired)
    assert "error" in refused.json(), refused.text
    assert "the ID token has expired" in refused.json()["error"]["message"]
    assert plans_made() == before + 1
