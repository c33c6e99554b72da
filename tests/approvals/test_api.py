"""The agent API (v1): shapes, problems, idempotency, long-poll, cancel, ownership."""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from actions.lib.canonical import digest
from actions.lib.models import AuditEvent
from actions.models import Agent, Connector
from approvals.models import TRANSITIONS, IdempotencyRecord, Plan, PlanStatus
from demo.processes import ROOT
from tests.conftest import READ_TOKEN, WRITE_TOKEN

UPDATE_EMAIL = {
    "action": "update_contact_email",
    "input": {"contact_id": "c-1001", "email": "ada@new.example"},
    "reason": "customer asked",
}
MEMO = {"action": "update_invoice_memo", "input": {"invoice_id": "inv-2001", "memo": "hello"}}
PROBLEM_KEYS = {"type", "title", "status", "detail", "correlation_id"}


@pytest.fixture
def post(client, api_headers):
    def post(path: str, body=None, *, raw: bytes | str | None = None, headers=None, **extra):
        data = raw if raw is not None else json.dumps(body)
        return client.post(
            "/api/v1" + path,
            data=data,
            content_type="application/json",
            **{**api_headers, **(headers or {})},
            **extra,
        )

    return post


@pytest.fixture
def get(client, api_headers):
    def get(path: str, headers=None, **params):
        return client.get("/api/v1" + path, params, **{**api_headers, **(headers or {})})

    return get


def assert_problem(response, status: int, type_suffix: str | None = None) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert PROBLEM_KEYS <= set(body)
    assert body["status"] == status
    uuid.UUID(body["correlation_id"])
    if type_suffix is not None:
        assert body["type"] == f"urn:countersign:problem:{type_suffix}"
    # Nothing internal or secret leaks into a problem.
    text = response.content.decode()
    assert "Traceback" not in text
    assert READ_TOKEN not in text and WRITE_TOKEN not in text
    return body


def pointers(body: dict) -> list[str]:
    return [e["pointer"] for e in body.get("errors", [])]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- GET /actions -----------------------------------------------------------------------------


def test_it_lists_the_agents_actions(get, catalog):
    response = get("/actions")
    assert response.status_code == 200
    actions = {a["name"]: a for a in response.json()}
    assert set(actions) == set(catalog)
    email = actions["update_contact_email"]
    assert set(email["card"]) == {"effect", "scope", "result", "consent", "retry"}
    assert email["input_schema"]["additionalProperties"] is False
    assert email["consequence_class"] == "reversible"
    assert email["approval"]["approvers_required"] == 1
    assert set(email["annotations"]) == {
        "readOnlyHint",
        "destructiveHint",
        "idempotentHint",
        "openWorldHint",
    }
    assert actions["delete_contact"]["annotations"]["destructiveHint"] is True
    assert actions["delete_contact"]["approval"]["approvers_required"] == 2
    assert actions["send_reminder"]["annotations"]["openWorldHint"] is True


def test_it_lists_only_this_agents_actions(client, other_agent):
    _, token = other_agent
    response = client.get("/api/v1/actions", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert [a["name"] for a in response.json()] == ["update_invoice_memo"]


def test_disabled_actions_are_not_listed(get, catalog):
    catalog["replace_note"].__class__.objects.filter(name="replace_note").update(enabled=False)
    assert "replace_note" not in {a["name"] for a in get("/actions").json()}


# --- POST /plans: success -----------------------------------------------------------------------


def test_it_creates_a_plan(post, upstream, agent):
    response = post("/plans", UPDATE_EMAIL)
    assert response.status_code == 201, response.content
    body = response.json()
    assert {
        "id",
        "action",
        "status",
        "fingerprint",
        "consequence_class",
        "target",
        "input",
        "reason",
        "preview",
        "precondition",
        "review_url",
        "created_at",
        "expires_at",
        "outcome",
    } <= set(body)
    assert body["action"] == "update_contact_email"
    assert body["status"] == "awaiting_approval"
    assert len(body["fingerprint"]) == 64
    assert body["consequence_class"] == "reversible"
    assert body["target"] == {"connector": "demo", "path": "/contacts/c-1001"}
    assert body["input"] == UPDATE_EMAIL["input"]
    assert body["reason"] == "customer asked"
    assert {"before", "after", "changes", "summary_markdown"} <= set(body["preview"])
    assert body["preview"]["after"]["email"] == "ada@new.example"
    assert body["precondition"]["kind"] == "version"
    assert body["precondition"]["expected"]
    assert body["review_url"].endswith(f"/plans/{body['id']}/")
    assert body["outcome"] is None
    assert response["Location"] == f"/api/v1/plans/{body['id']}"
    plan = Plan.objects.get(id=body["id"])
    assert plan.agent == agent and plan.fingerprint == body["fingerprint"]
    # The connector's internal address is not the agent's business.
    assert upstream.url not in response.content.decode()
    assert upstream.writes() == []


def test_creating_a_plan_is_audited(post, upstream):
    body = post("/plans", UPDATE_EMAIL).json()
    event = AuditEvent.objects.get(kind="plan.proposed")
    assert str(event.plan_id) == body["id"]
    assert event.actor == "agent:test-agent"
    assert event.fingerprint == body["fingerprint"]


def test_the_input_is_stored_nfc_normalized(post, upstream):
    nfd_memo = "cafe\u0301"
    response = post("/plans", {**MEMO, "input": {**MEMO["input"], "memo": nfd_memo}})
    assert response.status_code == 201
    assert response.json()["input"]["memo"] == "caf\u00e9"


# --- POST /plans: problems ------------------------------------------------------------------------


def test_an_unknown_input_field_is_422_with_a_pointer(post, upstream):
    body = {**UPDATE_EMAIL, "input": {**UPDATE_EMAIL["input"], "x": 1}}
    problem = assert_problem(post("/plans", body), 422, "invalid-input")
    assert problem["errors"] == [{"pointer": "/input/x", "message": "unknown field"}]
    assert Plan.objects.count() == 0


def test_an_unknown_top_level_field_is_422(post, upstream):
    problem = assert_problem(post("/plans", {**UPDATE_EMAIL, "approve": True}), 422)
    assert pointers(problem) == ["/approve"]


def test_a_wrong_type_is_422_with_a_pointer(post, upstream):
    body = {**UPDATE_EMAIL, "input": {"contact_id": "c-1001", "email": 5}}
    problem = assert_problem(post("/plans", body), 422, "invalid-input")
    assert pointers(problem) == ["/input/email"]


def test_an_input_that_is_not_an_object_is_422(post, upstream):
    problem = assert_problem(post("/plans", {**UPDATE_EMAIL, "input": "c-1001"}), 422)
    assert pointers(problem) == ["/input"]


def test_a_pattern_violation_is_422(post, upstream):
    body = {**UPDATE_EMAIL, "input": {"contact_id": "../admin", "email": "a@b.example"}}
    problem = assert_problem(post("/plans", body), 422, "invalid-input")
    assert pointers(problem) == ["/input/contact_id"]
    assert upstream.requests_log() == []


def test_a_missing_input_field_points_at_it(post, upstream):
    body = {**UPDATE_EMAIL, "input": {"contact_id": "c-1001"}}
    problem = assert_problem(post("/plans", body), 422, "invalid-input")
    assert problem["errors"] == [{"pointer": "/input/email", "message": "this field is required"}]


def test_a_missing_action_points_at_it(post, upstream):
    problem = assert_problem(post("/plans", {"input": {}}), 422)
    assert problem["errors"] == [{"pointer": "/action", "message": "this field is required"}]


def test_a_big_integer_in_the_input_is_refused(post, upstream):
    body = {**MEMO, "input": {**MEMO["input"], "memo": 2**60}}
    problem = assert_problem(post("/plans", body), 400, "malformed-json")
    assert "2^53" in problem["detail"]
    assert pointers(problem) == ["/input/memo"]


def test_an_oversized_body_is_413(post, upstream, settings):
    body = {**MEMO, "reason": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)}
    assert_problem(post("/plans", body), 413, "body-too-large")
    assert Plan.objects.count() == 0


@pytest.mark.parametrize("raw", ['{"action": ', "not json", "", "[1, 2]", '"x"'])
def test_malformed_json_is_400_or_422(post, upstream, raw):
    response = post("/plans", raw=raw)
    assert response.status_code in (400, 422)
    assert_problem(response, response.status_code)
    if raw in ('{"action": ', "not json"):
        assert response.status_code == 400


def test_duplicate_json_keys_are_400(post, upstream):
    raw = '{"action": "update_invoice_memo", "action": "delete_contact", "input": {}}'
    problem = assert_problem(post("/plans", raw=raw), 400, "malformed-json")
    assert "duplicate" in problem["detail"]


def test_nan_is_400(post, upstream):
    raw = '{"action": "update_invoice_memo", "input": {"invoice_id": "inv-2001", "memo": NaN}}'
    assert_problem(post("/plans", raw=raw), 400, "malformed-json")


def test_an_unknown_action_is_422(post, upstream):
    problem = assert_problem(post("/plans", {"action": "drop_tables", "input": {}}), 422)
    assert problem["type"].endswith("unknown-action")
    assert pointers(problem) == ["/action"]


def test_an_action_this_agent_may_not_use_is_403(client, other_agent, upstream):
    _, token = other_agent
    response = client.post(
        "/api/v1/plans",
        data=json.dumps(UPDATE_EMAIL),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert_problem(response, 403, "not-allowed")
    assert upstream.requests_log() == []
    assert Plan.objects.count() == 0


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer cs_nope", "Basic dTpw", "bearer  ", "Token abc"],
)
def test_a_bad_or_missing_token_is_401(client, db, authorization):
    headers = {} if authorization is None else {"HTTP_AUTHORIZATION": authorization}
    response = client.post(
        "/api/v1/plans", data=json.dumps(MEMO), content_type="application/json", **headers
    )
    assert_problem(response, 401, "unauthenticated")
    assert response["WWW-Authenticate"] == "Bearer"
    assert client.get("/api/v1/actions", **headers).status_code == 401


def test_an_inactive_agent_is_401(post, agent, upstream):
    Agent.objects.filter(pk=agent.pk).update(is_active=False)
    response = post("/plans", UPDATE_EMAIL)
    assert_problem(response, 401)
    assert response["WWW-Authenticate"] == "Bearer"


def test_a_missing_target_is_404(post, upstream):
    body = {**UPDATE_EMAIL, "input": {"contact_id": "c-9999", "email": "a@b.example"}}
    assert_problem(post("/plans", body), 404, "target-not-found")
    assert Plan.objects.count() == 0


def test_creating_what_exists_is_409(post, upstream):
    body = {
        "action": "create_contact",
        "input": {
            "contact_id": "c-1001",
            "name": "Ada",
            "email": "ada@example.test",
            "workspace": "ws-blue",
        },
    }
    assert_problem(post("/plans", body), 409, "target-exists")


def test_an_unreachable_upstream_is_502(post, upstream):
    Connector.objects.filter(name="demo").update(base_url=f"http://127.0.0.1:{free_port()}")
    problem = assert_problem(post("/plans", UPDATE_EMAIL), 502, "upstream-read-failed")
    assert "127.0.0.1" not in problem["detail"]
    assert Plan.objects.count() == 0


def test_an_upstream_error_is_502_without_the_raw_body(post, upstream):
    upstream.add_fault(method="GET", status=500)
    problem = assert_problem(post("/plans", UPDATE_EMAIL), 502)
    assert "injected fault" not in json.dumps(problem)


def test_a_slow_upstream_is_504(post, upstream):
    Connector.objects.filter(name="demo").update(read_timeout=0.2)
    upstream.add_fault(method="GET", delay=0.6)
    assert_problem(post("/plans", UPDATE_EMAIL), 504, "upstream-timeout")


# --- idempotency -------------------------------------------------------------------------------


def test_the_same_key_and_body_replays_the_same_plan(post, upstream):
    first = post("/plans", UPDATE_EMAIL, HTTP_IDEMPOTENCY_KEY="k-1")
    second = post("/plans", UPDATE_EMAIL, HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == second.status_code == 201
    assert second.json()["id"] == first.json()["id"]
    assert second["Idempotent-Replayed"] == "true"
    assert not first.has_header("Idempotent-Replayed")
    assert Plan.objects.count() == 1
    # The replay did not even read the upstream again.
    assert len(upstream.requests_log()) == 1


def test_the_same_key_with_another_body_is_422(post, upstream):
    post("/plans", UPDATE_EMAIL, HTTP_IDEMPOTENCY_KEY="k-1")
    other = {**UPDATE_EMAIL, "input": {"contact_id": "c-1001", "email": "x@other.example"}}
    assert_problem(post("/plans", other, HTTP_IDEMPOTENCY_KEY="k-1"), 422, "idempotency-key-reused")
    assert Plan.objects.count() == 1


def test_keys_are_scoped_per_agent(post, client, other_agent, upstream):
    mine = post("/plans", MEMO, HTTP_IDEMPOTENCY_KEY="shared").json()
    _, token = other_agent
    theirs = client.post(
        "/api/v1/plans",
        data=json.dumps(MEMO),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        HTTP_IDEMPOTENCY_KEY="shared",
    )
    assert theirs.status_code == 201
    assert theirs.json()["id"] != mine["id"]
    assert not theirs.has_header("Idempotent-Replayed")


def _reserve(agent, key: str, body: dict) -> IdempotencyRecord:
    request_hash = digest(
        {"action": body["action"], "input": body["input"], "reason": body.get("reason") or ""}
    )
    return IdempotencyRecord.objects.create(agent=agent, key=key, request_hash=request_hash)


def test_a_key_still_in_flight_is_409(post, agent, upstream):
    _reserve(agent, "busy", UPDATE_EMAIL)
    assert_problem(post("/plans", UPDATE_EMAIL, HTTP_IDEMPOTENCY_KEY="busy"), 409)
    assert upstream.requests_log() == []
    assert Plan.objects.count() == 0


def test_an_abandoned_reservation_is_taken_over(post, agent, upstream):
    record = _reserve(agent, "old", UPDATE_EMAIL)
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        created_at=timezone.now() - timedelta(minutes=5)
    )
    response = post("/plans", UPDATE_EMAIL, HTTP_IDEMPOTENCY_KEY="old")
    assert response.status_code == 201
    assert IdempotencyRecord.objects.get(agent=agent, key="old").plan_id is not None


def test_a_failed_preview_frees_the_key(post, agent, upstream):
    upstream.add_fault(method="GET", status=500)
    assert_problem(post("/plans", UPDATE_EMAIL, HTTP_IDEMPOTENCY_KEY="retry-me"), 502)
    assert not IdempotencyRecord.objects.filter(key="retry-me").exists()
    assert post("/plans", UPDATE_EMAIL, HTTP_IDEMPOTENCY_KEY="retry-me").status_code == 201


@pytest.mark.parametrize("key", ["", "x" * 256, "bad\x01key"])
def test_an_invalid_idempotency_key_is_422(post, upstream, key):
    assert_problem(post("/plans", UPDATE_EMAIL, HTTP_IDEMPOTENCY_KEY=key), 422)


# --- GET /plans/{id} ---------------------------------------------------------------------------


def test_it_reads_a_plan(post, get, upstream):
    created = post("/plans", UPDATE_EMAIL).json()
    response = get(f"/plans/{created['id']}")
    assert response.status_code == 200
    assert response.json() == created


def test_another_agents_plan_is_404(post, client, other_agent, upstream):
    created = post("/plans", UPDATE_EMAIL).json()
    _, token = other_agent
    for method, path in (
        ("get", f"/api/v1/plans/{created['id']}"),
        ("post", f"/api/v1/plans/{created['id']}/cancel"),
    ):
        response = getattr(client, method)(path, HTTP_AUTHORIZATION=f"Bearer {token}")
        assert_problem(response, 404, "not-found")
    assert Plan.objects.get(id=created["id"]).status == "awaiting_approval"


def test_an_unknown_plan_is_404(get, catalog):
    assert_problem(get(f"/plans/{uuid.uuid4()}"), 404)


def test_a_malformed_plan_id_is_a_problem(get, catalog):
    response = get("/plans/not-a-uuid")
    assert response.status_code in (404, 422)


def test_wait_zero_returns_at_once(post, get, upstream):
    created = post("/plans", UPDATE_EMAIL).json()
    started = time.monotonic()
    response = get(f"/plans/{created['id']}", wait=0)
    assert response.status_code == 200
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("wait", ["31", "-1", "soon"])
def test_a_wait_out_of_range_is_422(post, get, upstream, wait):
    created = post("/plans", UPDATE_EMAIL).json()
    problem = assert_problem(get(f"/plans/{created['id']}", wait=wait), 422)
    assert pointers(problem) == ["/wait"]


def test_wait_long_polls_until_the_deadline(post, get, upstream):
    created = post("/plans", UPDATE_EMAIL).json()
    started = time.monotonic()
    response = get(f"/plans/{created['id']}", wait=1)
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    assert response.json()["status"] == "awaiting_approval"
    assert 0.9 <= elapsed < 2.5


def test_wait_returns_at_once_for_a_finished_plan(post, get, upstream):
    created = post("/plans", UPDATE_EMAIL).json()
    post(f"/plans/{created['id']}/cancel")
    started = time.monotonic()
    assert get(f"/plans/{created['id']}", wait=5).json()["status"] == "cancelled"
    assert time.monotonic() - started < 0.5


# --- cancel ------------------------------------------------------------------------------------


def test_cancel_withdraws_an_awaiting_plan(post, upstream):
    created = post("/plans", UPDATE_EMAIL).json()
    response = post(f"/plans/{created['id']}/cancel")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "cancelled"
    assert body["outcome"]["state"] == "cancelled"
    assert body["outcome"]["finished_at"]
    assert AuditEvent.objects.filter(kind="plan.cancelled", plan_id=created["id"]).exists()
    assert upstream.writes() == []


def test_cancel_twice_is_409(post, upstream):
    created = post("/plans", UPDATE_EMAIL).json()
    post(f"/plans/{created['id']}/cancel")
    assert_problem(post(f"/plans/{created['id']}/cancel"), 409, "invalid-state")


def test_agents_cannot_approve(post, client, api_headers, upstream):
    created = post("/plans", UPDATE_EMAIL).json()
    for path in (
        f"/api/v1/plans/{created['id']}/approve",
        f"/api/v1/plans/{created['id']}/decide",
        "/api/v1/approvals",
    ):
        response = client.post(
            path,
            data=json.dumps({"fingerprint": created["fingerprint"]}),
            content_type="application/json",
            **api_headers,
        )
        assert response.status_code in (404, 405)
    # And the reviewer page refuses a bearer token (it needs a logged-in reviewer).
    response = client.post(
        f"/plans/{created['id']}/decide",
        {"decision": "approve", "fingerprint": created["fingerprint"]},
        **api_headers,
    )
    assert response.status_code in (302, 403)
    assert Plan.objects.get(id=created["id"]).status == "awaiting_approval"


# --- errors outside the endpoints ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "suggested"),
    [
        ("get", "/api/v1/nope", None),
        ("get", "/api/v1/", None),
        ("get", "/api/v1/actions/", "/api/v1/actions"),  # a trailing slash too many
        ("post", "/api/v1/plans/", "/api/v1/plans"),
        ("get", f"/api/v1/plans/{uuid.uuid4()}/nope", None),
        ("get", "/api/v2/actions", None),
    ],
)
def test_an_unknown_path_is_a_404_problem(client, api_headers, method, path, suggested):
    response = getattr(client, method)(path, **api_headers)
    body = assert_problem(response, 404, "not-found")
    assert body["detail"].startswith(f"no such endpoint: {method.upper()} {path}")
    if suggested:
        assert body["detail"].endswith(f"(did you mean {suggested}?)")
    else:
        assert "did you mean" not in body["detail"]


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("delete", "/api/v1/actions", "GET"),
        ("put", "/api/v1/plans", "POST"),
        ("patch", "/api/v1/plans", "POST"),
        ("get", f"/api/v1/plans/{uuid.uuid4()}/cancel", "POST"),
        ("post", f"/api/v1/plans/{uuid.uuid4()}", "GET"),
    ],
)
def test_a_method_the_path_does_not_take_is_a_405_problem(
    client, api_headers, method, path, allowed
):
    response = getattr(client, method)(path, **api_headers)
    body = assert_problem(response, 405, "method-not-allowed")
    assert response["Allow"] == allowed
    assert body["detail"] == f"{method.upper()} is not allowed on {path}; allowed: {allowed}"


def test_a_request_django_refuses_before_any_view_is_a_400_problem(client, api_headers):
    response = client.get("/api/v1/actions", HTTP_HOST="elsewhere.example", **api_headers)
    body = assert_problem(response, 400, "bad-request")
    assert body["detail"] == "the Host header names a host this server does not answer for"


def test_an_error_page_from_outside_the_api_handler_becomes_a_problem(rf):
    """A 500 (or any error) rendered by Django's own handlers, not the API's."""
    from django.http import HttpResponseServerError

    from approvals.api.errors import ApiProblemsMiddleware

    def failing(request):
        return HttpResponseServerError("<h1>Server Error (500)</h1>")

    response = ApiProblemsMiddleware(failing)(rf.get("/api/v1/actions"))
    assert response.status_code == 500
    assert response["Content-Type"] == "application/problem+json"
    body = json.loads(response.content)
    assert PROBLEM_KEYS <= set(body)
    assert body["type"] == "urn:countersign:problem:internal-error"
    assert body["detail"] == "quote the correlation id to an administrator"
    # Outside /api/ the page stays as it is.
    page = ApiProblemsMiddleware(failing)(rf.get("/plans/"))
    assert page["Content-Type"].startswith("text/html")


def test_pages_outside_the_api_keep_their_html_errors(client, db):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


# --- OpenAPI -----------------------------------------------------------------------------------


def test_the_openapi_document(client, db):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    document = json.loads(response.content)
    assert document["openapi"].startswith("3.1.")
    paths = document["paths"]
    assert {"/api/v1/actions", "/api/v1/plans", "/api/v1/plans/{plan_id}"} <= set(paths)
    assert "/api/v1/plans/{plan_id}/cancel" in paths
    assert not any("approve" in path for path in paths)


def test_the_state_table_in_the_api_docs_is_the_transition_table():
    text = (ROOT / "docs" / "api.md").read_text()
    table = text[text.index("### States") : text.index("## Reads")]
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| ([^|]+) \|$", table, re.MULTILINE)
    documented = {state: set(re.findall(r"`(\w+)`", moves)) for state, moves in rows}
    assert set(documented) == set(PlanStatus)
    for state in PlanStatus:
        assert documented[state] == set(TRANSITIONS.get(state, ())), state
