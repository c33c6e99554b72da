"""The MCP server in process (the official client, no transport): tools and their schemas,
annotations, previews, refusals worded as the JSON API words them, resources, get_plan
and cancel_plan. The web and stdio transports are in test_http.py and test_stdio.py."""

from __future__ import annotations

import json
import threading

import anyio
import pytest
from django.db import connections
from mcp.shared.exceptions import MCPError

from actions.lib.models import AuditEvent
from actions.models import Action, Agent, AgentScope
from approvals.mcp.boundary import pointer_for_call as _pointer_for_call
from approvals.mcp.protocol import UNAUTHENTICATED
from approvals.mcp.tools import reason_field_of as _reason_field
from approvals.models import Plan
from tests.mcp.conftest import same_reasons, tool_input

EMAIL_ARGS = {"contact_id": "c-1001", "email": "ada@new.example", "reason": "customer asked"}
PLAN_TOOLS = ["get_plan", "cancel_plan"]


def run(connect, token, fn):
    """Connect as ``token`` and run ``fn(client)``."""

    async def main():
        async with connect(token) as client:
            return await fn(client)

    return anyio.run(main)


def api_post(client, headers, body):
    return client.post(
        "/api/v1/plans", data=json.dumps(body), content_type="application/json", **headers
    )


# --- tools -------------------------------------------------------------------------------


def test_it_lists_one_tool_per_action_the_agent_may_propose(in_process, catalog, agent_token):
    tools = run(in_process, agent_token, lambda c: c.list_tools()).tools
    assert [t.name for t in tools] == sorted(catalog) + PLAN_TOOLS


def test_an_agent_sees_only_its_own_actions(in_process, other_agent):
    _, token = other_agent
    tools = run(in_process, token, lambda c: c.list_tools()).tools
    assert [t.name for t in tools] == ["update_invoice_memo", *PLAN_TOOLS]


def test_disabled_actions_are_not_offered(in_process, catalog, agent_token):
    Action.objects.filter(name="send_invoice").update(enabled=False)
    tools = run(in_process, agent_token, lambda c: c.list_tools()).tools
    assert "send_invoice" not in [t.name for t in tools]


def test_tool_schemas_are_the_catalogs_plus_reason(in_process, catalog, agent_token, client):
    tools = {t.name: t for t in run(in_process, agent_token, lambda c: c.list_tools()).tools}
    api = client.get("/api/v1/actions", HTTP_AUTHORIZATION=f"Bearer {agent_token}").json()
    assert len(api) == len(catalog)
    for action in api:
        tool = tools[action["name"]]
        assert tool_input(tool) == action["input_schema"]
        assert tool.input_schema["properties"]["reason"]["type"] == "string"
        assert "reason" not in tool.input_schema.get("required", [])
        assert tool.title == action["title"]


def test_descriptions_state_the_class_and_that_the_call_only_proposes(
    in_process, catalog, agent_token
):
    tools = {t.name: t for t in run(in_process, agent_token, lambda c: c.list_tools()).tools}
    delete = tools["delete_contact"]
    assert "Consequence class: irreversible" in delete.description
    assert "only PROPOSES" in delete.description
    assert "until 2 different people approve" in delete.description
    assert "Deletes one contact record; it cannot be restored." in delete.description
    assert "Consequence class: external" in tools["send_reminder"].description


# What each action's tool hints, by its eventual effect once approved: (readOnly,
# destructive, idempotent, openWorld). No proposal is idempotent: a repeat gives the same
# plan only while it awaits a decision.
HINTS = {
    # observation reads: nothing changes
    "get_contact": (True, False, False, False),
    "get_contact_phone": (True, False, False, False),  # sensitive: a reviewer every time
    "get_deployment": (True, False, False, False),
    "get_reminder": (True, False, False, False),
    # reversible changes: not destructive
    "update_contact_email": (False, False, False, False),
    "update_contact_phone": (False, False, False, False),
    "update_invoice_memo": (False, False, False, False),
    "create_contact": (False, False, False, False),
    "replace_note": (False, False, False, False),
    # external commitments: a message sent, an invoice issued, a deployment started
    "send_invoice": (False, True, False, True),
    "send_reminder": (False, True, False, True),
    "start_deployment": (False, True, False, True),
    # an irreversible delete
    "delete_contact": (False, True, False, True),
}


def hint_tuple(annotations) -> tuple[bool, bool, bool, bool]:
    a = annotations
    return (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint)


def test_annotations_say_what_the_call_eventually_does_per_class(
    in_process, catalog, agent_token, client
):
    tools = {t.name: t for t in run(in_process, agent_token, lambda c: c.list_tools()).tools}
    api = client.get("/api/v1/actions", HTTP_AUTHORIZATION=f"Bearer {agent_token}").json()
    classes = {a["name"]: (a["consequence_class"], a["kind"]) for a in api}
    for name in catalog:
        assert hint_tuple(tools[name].annotations) == HINTS[name], (name, classes[name])
    # The JSON API gives the same hints.
    for action in api:
        hints = action["annotations"]
        assert (
            hints["readOnlyHint"],
            hints["destructiveHint"],
            hints["idempotentHint"],
            hints["openWorldHint"],
        ) == HINTS[action["name"]]
    # Every class is covered.
    assert {c for c, _ in classes.values()} == {
        "observation",
        "reversible",
        "external",
        "irreversible",
    }
    get_plan, cancel_plan = tools["get_plan"].annotations, tools["cancel_plan"].annotations
    assert hint_tuple(get_plan) == (True, False, True, False)
    assert hint_tuple(cancel_plan) == (False, False, True, False)


# --- proposing ------------------------------------------------------------------------------


def test_proposing_returns_a_preview_the_plan_and_its_review_url(
    in_process, catalog, agent_token, upstream, client
):
    result = run(in_process, agent_token, lambda c: c.call_tool("update_contact_email", EMAIL_ARGS))

    assert not result.is_error
    plan = Plan.objects.get()
    assert plan.status == "awaiting_approval"
    assert plan.reason == "customer asked"
    assert upstream.writes() == [], "proposing wrote upstream"
    text = result.content[0].text
    assert "nothing has been written" in text
    assert f"`{plan.id}`" in text
    assert f"`{plan.short_code}`" in text
    assert plan.review_url in text
    assert "`c-1001`" in text and "`ada@new.example`" in text
    # The structured content is the plan exactly as GET /api/v1/plans/{id} renders it.
    api = client.get(f"/api/v1/plans/{plan.id}", HTTP_AUTHORIZATION=f"Bearer {agent_token}")
    assert result.structured_content == api.json()
    plan_link, card_link = result.content[1], result.content[2]
    assert plan_link.uri == f"countersign://plans/{plan.id}"
    assert card_link.uri == "countersign://actions/update_contact_email/card"


def test_the_preview_shows_messages_as_blocks_and_dates_in_the_configured_locale(
    in_process, catalog, agent_token, settings
):
    settings.LANGUAGE_CODE = "pt-br"
    settings.TIME_ZONE = "America/Sao_Paulo"
    arguments = {
        "customer_id": "cus-3001",
        "channel": "sms",
        "send_at": "2026-05-01T12:00:00Z",
        "message": "Olá!\nSua fatura vence amanhã.",
    }
    result = run(in_process, agent_token, lambda c: c.call_tool("send_reminder", arguments))

    text = result.content[0].text
    assert "`2026-05-01T12:00:00Z` — 1 de Maio de 2026 às 09:00 (-03)" in text
    assert "  ```\n  Olá!\n  Sua fatura vence amanhã.\n  ```" in text
    assert "`cus-3001`" in text


def test_invalid_input_is_refused_with_the_apis_reasons(
    in_process, catalog, agent_token, client, api_headers
):
    bad = {"contact_id": "c-1001", "emial": "ada@new.example"}
    result = run(in_process, agent_token, lambda c: c.call_tool("update_contact_email", bad))

    assert result.is_error
    problem = result.structured_content
    api = api_post(client, api_headers, {"action": "update_contact_email", "input": bad})
    assert api.status_code == 422
    same_reasons(problem, api.json())
    assert {"pointer": "/arguments/emial", "message": "unknown field"} in problem["errors"]
    text = result.content[0].text
    assert "`/arguments/emial`: unknown field" in text
    assert "No plan was created." in text
    assert not Plan.objects.exists()


def test_a_reason_that_is_not_text_is_refused(in_process, catalog, agent_token):
    arguments = {**EMAIL_ARGS, "reason": 42}
    result = run(in_process, agent_token, lambda c: c.call_tool("update_contact_email", arguments))
    assert result.is_error
    assert result.structured_content["type"] == "urn:countersign:problem:invalid-request"
    assert result.structured_content["errors"][0]["pointer"] == "/arguments/reason"
    assert not Plan.objects.exists()


def test_an_out_of_scope_target_is_refused_before_review(
    in_process, catalog, agent, agent_token, client, api_headers
):
    AgentScope.objects.create(
        agent=agent, action=catalog["update_contact_email"], field="contact_id", values=["c-1002"]
    )
    result = run(in_process, agent_token, lambda c: c.call_tool("update_contact_email", EMAIL_ARGS))

    assert result.is_error
    # The API refuses the same input for the same reason.
    api = api_post(
        client,
        api_headers,
        {
            "action": "update_contact_email",
            "input": {"contact_id": "c-1001", "email": "ada@new.example"},
        },
    )
    assert api.status_code == 403
    same_reasons(result.structured_content, api.json())
    assert result.structured_content["type"].endswith(":out-of-scope")
    assert not Plan.objects.exists()
    assert AuditEvent.objects.filter(kind="plan.refused").count() == 2


def test_a_tool_the_agent_was_not_given_cannot_be_called_by_name(in_process, other_agent):
    _, token = other_agent

    async def call(client):
        with pytest.raises(MCPError) as refused:
            await client.call_tool("update_contact_email", EMAIL_ARGS)
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("no_such_action", {})
        return refused.value, unknown.value

    refused, unknown = run(in_process, token, call)
    assert refused.data["type"] == "urn:countersign:problem:not-allowed"
    assert refused.message == (
        "This agent may not do that: this agent may not propose 'update_contact_email' "
        "[not-allowed]"
    )
    assert unknown.data["type"] == "urn:countersign:problem:unknown-action"
    assert unknown.data["errors"] == [{"pointer": "/name", "message": "unknown action"}]
    assert not Plan.objects.exists()


@pytest.mark.parametrize("call", ["list_tools", "list_resources", "call_tool"])
def test_a_wrong_token_is_refused_on_every_request(in_process, catalog, call):
    async def attempt(client):
        with pytest.raises(MCPError) as refused:
            if call == "call_tool":
                await client.call_tool("update_contact_email", EMAIL_ARGS)
            else:
                await getattr(client, call)()
        return refused.value

    error = run(in_process, "cs_wrong", attempt)
    assert error.code == UNAUTHENTICATED
    assert error.data["type"] == "urn:countersign:problem:unauthenticated"
    assert error.data["title"] == "A valid agent token is required"
    assert not Plan.objects.exists()


def test_an_agent_deactivated_mid_session_is_refused_at_once(in_process, agent, agent_token):
    async def session(client):
        await client.list_tools()
        Agent.objects.filter(pk=agent.pk).update(is_active=False)
        with pytest.raises(MCPError) as refused:
            await client.call_tool("update_contact_email", EMAIL_ARGS)
        return refused.value

    error = run(in_process, agent_token, session)
    assert error.code == UNAUTHENTICATED
    assert not Plan.objects.exists()


# --- get_plan and cancel_plan ----------------------------------------------------------------


def test_get_plan_reads_the_agents_plan(in_process, agent_token, make_plan):
    plan = make_plan()
    result = run(
        in_process, agent_token, lambda c: c.call_tool("get_plan", {"plan_id": str(plan.id)})
    )
    assert not result.is_error
    assert result.structured_content["id"] == str(plan.id)
    assert result.content[0].text.startswith("**Plan `awaiting_approval`**")


def test_get_plan_waits_for_a_decision(in_process_threads, agent_token, make_plan, reviewer):
    """With the server's worker threads: the decision is committed by another thread."""
    plan = make_plan()
    timer = threading.Timer(0.5, _deny, args=(plan, reviewer))
    timer.start()
    try:
        result = run(
            in_process_threads,
            agent_token,
            lambda c: c.call_tool("get_plan", {"plan_id": str(plan.id), "wait": 10}),
        )
    finally:
        timer.join()
    assert result.structured_content["status"] == "denied"
    text = result.content[0].text
    assert "a reviewer denied it" in text
    assert "**Outcome** `denied`" in text


def _deny(plan, reviewer) -> None:
    from approvals.services import approval_record

    try:
        approval_record(
            plan_id=plan.id,
            reviewer=reviewer,
            decision="deny",
            fingerprint_seen=plan.fingerprint,
        )
    finally:
        connections.close_all()


def test_get_plan_hides_other_agents_plans(in_process, other_agent, make_plan):
    plan = make_plan()
    _, token = other_agent
    result = run(in_process, token, lambda c: c.call_tool("get_plan", {"plan_id": str(plan.id)}))
    assert result.is_error
    assert result.structured_content["type"] == "urn:countersign:problem:not-found"


@pytest.mark.parametrize(
    ("arguments", "pointer"),
    [
        ({"plan_id": "nope"}, "/arguments/plan_id"),
        ({"plan_id": "6b8f4f7e-0000-4000-8000-000000000000", "wait": 31}, "/arguments/wait"),
        ({"plan_id": "6b8f4f7e-0000-4000-8000-000000000000", "extra": 1}, "/arguments/extra"),
        ({}, "/arguments/plan_id"),
    ],
)
def test_get_plan_refuses_bad_arguments(in_process, agent_token, catalog, arguments, pointer):
    result = run(in_process, agent_token, lambda c: c.call_tool("get_plan", arguments))
    assert result.is_error
    assert result.structured_content["type"] == "urn:countersign:problem:invalid-request"
    assert [e["pointer"] for e in result.structured_content["errors"]] == [pointer]


def test_cancel_plan_withdraws_it_once(in_process, agent_token, make_plan):
    plan = make_plan()

    async def cancel_twice(client):
        args = {"plan_id": str(plan.id)}
        return await client.call_tool("cancel_plan", args), await client.call_tool(
            "cancel_plan", args
        )

    first, second = run(in_process, agent_token, cancel_twice)
    assert not first.is_error
    assert first.structured_content["status"] == "cancelled"
    assert second.is_error
    assert second.structured_content["type"] == "urn:countersign:problem:invalid-state"
    assert "Nothing changed." in second.content[0].text
    plan.refresh_from_db()
    assert plan.status == "cancelled"


# --- resources ---------------------------------------------------------------------------------


def test_action_cards_are_resources(in_process, catalog, agent_token):
    async def read(client):
        listed = await client.list_resources()
        card = await client.read_resource("countersign://actions/delete_contact/card")
        return listed, card

    listed, card = run(in_process, agent_token, read)
    assert [r.uri for r in listed.resources] == [
        f"countersign://actions/{name}/card" for name in sorted(catalog)
    ]
    assert all(r.mime_type == "text/markdown" for r in listed.resources)
    text = card.contents[0].text
    assert text.startswith("# Delete one contact permanently")
    assert "consequence class **irreversible**" in text
    assert "**Consent.** Two different reviewers must approve." in text


def test_an_agent_reads_only_its_own_cards(in_process, other_agent):
    _, token = other_agent

    async def read(client):
        listed = await client.list_resources()
        with pytest.raises(MCPError) as refused:
            await client.read_resource("countersign://actions/delete_contact/card")
        return listed, refused.value

    listed, refused = run(in_process, token, read)
    assert [r.uri for r in listed.resources] == ["countersign://actions/update_invoice_memo/card"]
    assert refused.data["type"] == "urn:countersign:problem:not-found"


# --- helpers ------------------------------------------------------------------------------------


def test_pointers_are_aimed_at_the_tool_call():
    assert _pointer_for_call("/input/email", "reason") == "/arguments/email"
    assert _pointer_for_call("/input", "reason") == "/arguments"
    assert _pointer_for_call("/reason", "reason") == "/arguments/reason"
    assert _pointer_for_call("/action", "reason") == "/name"


def test_an_input_named_reason_keeps_its_name():
    assert _reason_field({"properties": {"email": {}}}) == "reason"
    assert _reason_field({"properties": {"reason": {}}}) == "countersign_reason"


def test_a_plan_a_session_grant_covers_says_so_and_the_tool_mentions_grants(
    in_process, catalog, agent, agent_token, reviewer, upstream
):
    from approvals.grants import grant_create

    tools = {t.name: t for t in run(in_process, agent_token, lambda c: c.list_tools()).tools}
    assert "session grant" in tools["update_invoice_memo"].description
    assert "session grant" not in tools["delete_contact"].description

    grant_create(
        creator=reviewer, agent=agent, action_names=["update_invoice_memo"], duration_seconds=600
    )
    args = {"invoice_id": "inv-2001", "memo": "net 30", "reason": "asked"}
    result = run(in_process, agent_token, lambda c: c.call_tool("update_invoice_memo", args))

    assert not result.is_error
    plan = Plan.objects.get()
    assert plan.status == "approved"
    text = result.content[0].text
    assert "approved by a session grant" in text
    assert "A person must approve" not in text
    assert upstream.writes() == [], "proposing wrote upstream"


def test_an_upstream_echoing_the_credential_is_refused_and_nothing_shows_it(
    in_process, catalog, agent_token, upstream
):
    """The MCP tool result is the API's problem: the read repeated the credential, so no
    plan was made, and the token is nowhere in what the client receives."""
    from tests.conftest import READ_TOKEN

    upstream.add_fault(method="GET", path_prefix="/notes/", echo_auth="body")
    arguments = {"note_id": "n-1", "title": "Runbook v2", "body": "Restart.", "reason": "tidy"}
    result = run(in_process, agent_token, lambda c: c.call_tool("replace_note", arguments))
    assert result.is_error
    assert result.structured_content["type"].endswith(":upstream-echoes-secrets")
    assert READ_TOKEN not in json.dumps(result.model_dump(mode="json"))
    assert upstream.requests_log()[-1]["headers"]["authorization"] == f"Bearer {READ_TOKEN}"
    assert not Plan.objects.exists()
