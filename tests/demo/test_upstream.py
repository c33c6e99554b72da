"""Tests for the demo upstream, talking to it over real sockets on 127.0.0.1.

No Django and no database: the server is standard library only, and these tests only need it
and httpx. One server is started per module and reset before each test, which keeps the file fast.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from demo.upstream import DemoUpstream, merge_patch

READ = {"Authorization": "Bearer demo-read-token"}
WRITE = {"Authorization": "Bearer demo-write-token"}
REPO_ROOT = Path(__file__).resolve().parents[2]


# These fixtures deliberately shadow tests/conftest.py's `upstream`: this module wants its own
# server with the well-known default tokens, and needs nothing from Django.
@pytest.fixture(scope="module")
def server() -> Iterator[DemoUpstream]:
    upstream = DemoUpstream(port=0).start()
    try:
        yield upstream
    finally:
        upstream.stop()


@pytest.fixture
def upstream(server: DemoUpstream) -> DemoUpstream:
    server.reset()
    return server


# Clients are shared per module: building an httpx.Client (its TLS context) costs ~25 ms.
@pytest.fixture(scope="module")
def _reader(server: DemoUpstream) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=READ, timeout=2) as client:
        yield client


@pytest.fixture(scope="module")
def _writer(server: DemoUpstream) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=WRITE, timeout=2) as client:
        yield client


@pytest.fixture
def reader(upstream: DemoUpstream, _reader: httpx.Client) -> httpx.Client:
    return _reader


@pytest.fixture
def writer(upstream: DemoUpstream, _writer: httpx.Client) -> httpx.Client:
    return _writer


def _etag(client: httpx.Client, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200
    return response.headers["etag"]


# ------------------------------------------------------------------------------------ auth


def test_read_token_can_get_a_contact(reader: httpx.Client) -> None:
    response = reader.get("/contacts/c-1001")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["name"] == "Ada Lovelace"
    assert body["email"] == "ada@example.test"
    assert body["tags"] == ["vip"]
    assert response.headers["etag"].startswith(f'"{body["version"]}-')


def test_read_token_cannot_write(upstream: DemoUpstream, reader: httpx.Client) -> None:
    etag = _etag(reader, "/contacts/c-1001")
    response = reader.patch(
        "/contacts/c-1001", json={"email": "x@example.test"}, headers={"If-Match": etag}
    )
    assert response.status_code == 403
    assert response.json() == {"error": "read-only credential"}
    assert upstream.state()["contacts"]["c-1001"]["email"] == "ada@example.test"
    # The refused write is still on the record, with the token that tried it.
    (write,) = upstream.writes()
    assert write["method"] == "PATCH"
    assert write["status"] == 403
    assert write["headers"]["authorization"] == "Bearer demo-read-token"
    assert write["body"] == {"email": "x@example.test"}


def test_missing_or_wrong_token_is_401(upstream: DemoUpstream) -> None:
    with httpx.Client(base_url=upstream.url, timeout=2) as anonymous:
        assert anonymous.get("/contacts/c-1001").status_code == 401
        wrong = anonymous.get("/contacts/c-1001", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert "error" in wrong.json()
        assert anonymous.delete("/contacts/c-1001").status_code == 401
    assert [entry["status"] for entry in upstream.requests_log()] == [401, 401, 401]


def test_tokens_must_differ() -> None:
    with pytest.raises(ValueError):
        DemoUpstream(read_token="same", write_token="same")


# ------------------------------------------------------------------------------------ contacts


def test_patch_changes_version_and_etag(writer: httpx.Client) -> None:
    etag = _etag(writer, "/contacts/c-1001")
    response = writer.patch(
        "/contacts/c-1001",
        json={"email": "ada@new.test", "phone": None},
        headers={"If-Match": etag, "Content-Type": "application/merge-patch+json"},
    )
    assert response.status_code == 200
    body = response.json()
    assert body["email"] == "ada@new.test"
    assert "phone" not in body  # merge patch: null removes the member
    assert body["version"] == 2
    assert response.headers["etag"] != etag
    assert _etag(writer, "/contacts/c-1001") == response.headers["etag"]


def test_patch_preconditions(writer: httpx.Client) -> None:
    missing = writer.patch("/contacts/c-1001", json={"name": "Ada"})
    assert missing.status_code == 428
    stale = writer.patch(
        "/contacts/c-1001", json={"name": "Ada"}, headers={"If-Match": '"9-deadbeef"'}
    )
    assert stale.status_code == 412
    assert writer.get("/contacts/c-1001").json()["version"] == 1


def test_patch_cannot_change_id_or_version(writer: httpx.Client) -> None:
    etag = _etag(writer, "/contacts/c-1002")
    for patch in ({"id": "c-9"}, {"version": 7}):
        response = writer.patch("/contacts/c-1002", json=patch, headers={"If-Match": etag})
        assert response.status_code == 422


def test_put_creates_with_if_none_match_once(writer: httpx.Client) -> None:
    contact = {"id": "c-2000", "name": "Katherine Johnson", "email": "kj@example.test"}
    contact["workspace"] = "ws-red"
    created = writer.put("/contacts/c-2000", json=contact, headers={"If-None-Match": "*"})
    assert created.status_code == 201
    assert created.json() == {**contact, "version": 1}
    assert created.headers["location"] == "/contacts/c-2000"
    assert "etag" in created.headers
    again = writer.put("/contacts/c-2000", json=contact, headers={"If-None-Match": "*"})
    assert again.status_code == 412


def test_put_replaces_with_if_match(writer: httpx.Client) -> None:
    etag = _etag(writer, "/contacts/c-1003")
    body = {"name": "Alan M. Turing", "email": "alan@example.test", "workspace": "ws-red"}
    replaced = writer.put("/contacts/c-1003", json=body, headers={"If-Match": etag})
    assert replaced.status_code == 200
    assert replaced.json() == {**body, "id": "c-1003", "version": 2}
    stale = writer.put("/contacts/c-1003", json=body, headers={"If-Match": etag})
    assert stale.status_code == 412
    absent = writer.put("/contacts/c-404", json=body, headers={"If-Match": etag})
    assert absent.status_code == 404
    assert writer.put("/contacts/c-1003", json=body).status_code == 428


def test_delete_needs_matching_if_match(writer: httpx.Client) -> None:
    etag = _etag(writer, "/contacts/c-1002")
    assert writer.delete("/contacts/c-1002").status_code == 428
    assert writer.delete("/contacts/c-1002", headers={"If-Match": '"1-0"'}).status_code == 412
    deleted = writer.delete("/contacts/c-1002", headers={"If-Match": etag})
    assert deleted.status_code == 204
    assert deleted.content == b""
    assert writer.get("/contacts/c-1002").status_code == 404
    assert writer.delete("/contacts/c-1002", headers={"If-Match": etag}).status_code == 404


def test_list_contacts_by_workspace(reader: httpx.Client) -> None:
    blue = reader.get("/contacts", params={"workspace": "ws-blue"})
    assert blue.status_code == 200
    assert [contact["id"] for contact in blue.json()] == ["c-1001", "c-1002"]
    assert len(reader.get("/contacts").json()) == 3


# ------------------------------------------------------------------------------------ invoices


def test_invoice_revision_conflict_and_missing_revision(writer: httpx.Client) -> None:
    conflict = writer.patch("/invoices/inv-2001", json={"memo": "x", "expected_revision": 2})
    assert conflict.status_code == 409
    assert conflict.json() == {"error": "revision conflict", "current_revision": 3}
    assert "etag" not in conflict.headers
    assert writer.patch("/invoices/inv-2001", json={"memo": "x"}).status_code == 428


def test_invoice_patch_applies_and_bumps_revision(writer: httpx.Client) -> None:
    response = writer.patch("/invoices/inv-2001", json={"memo": "Thanks!", "expected_revision": 3})
    assert response.status_code == 200
    assert response.json() == {
        "id": "inv-2001",
        "customer_id": "cus-77",
        "amount": "120.00",
        "currency": "EUR",
        "status": "draft",
        "memo": "Thanks!",
        "revision": 4,
    }
    assert "etag" not in response.headers


def test_paid_invoice_is_a_domain_failure_inside_200(
    upstream: DemoUpstream, writer: httpx.Client
) -> None:
    before = writer.get("/invoices/inv-2002").json()
    assert before["status"] == "paid"
    response = writer.patch(
        "/invoices/inv-2002", json={"memo": "x", "expected_revision": before["revision"]}
    )
    assert response.status_code == 200
    assert response.json() == {"ok": False, "error": "invoice is paid"}
    assert upstream.state()["invoices"]["inv-2002"] == before


# ------------------------------------------------------------------------------------ notes


def test_notes_have_no_version_and_put_replaces(writer: httpx.Client) -> None:
    note = writer.get("/notes/n-1")
    assert note.json() == {
        "id": "n-1",
        "title": "Runbook",
        "body": "Restart the worker, then check the queue.",
    }
    assert "etag" not in note.headers
    replaced = writer.put("/notes/n-1", json={"id": "n-1", "title": "Runbook", "body": "New."})
    assert replaced.status_code == 200
    assert writer.get("/notes/n-1").json()["body"] == "New."
    assert writer.get("/notes/n-2").status_code == 404


# ------------------------------------------------------------------------------------ deployments


def test_deployment_is_accepted_then_progresses(writer: httpx.Client) -> None:
    accepted = writer.post("/deployments", json={"service": "api", "version": "v1.2.3"})
    assert accepted.status_code == 202
    body = accepted.json()
    assert body["status"] == "queued"
    location = accepted.headers["location"]
    assert location == f"/deployments/{body['id']}"
    assert [writer.get(location).json()["status"] for _ in range(3)] == [
        "running",
        "succeeded",
        "succeeded",
    ]
    assert writer.get("/deployments/dep-999").status_code == 404


# ------------------------------------------------------------------------------------ reminders


def test_reminder_idempotency_replay_and_conflict(
    upstream: DemoUpstream, writer: httpx.Client
) -> None:
    reminder = {
        "customer_id": "cus-77",
        "channel": "email",
        "send_at": "2030-01-01T09:00:00Z",
        "message": "Your invoice is due.",
    }
    key = {"Idempotency-Key": "k-1"}
    first = writer.post("/reminders", json=reminder, headers=key)
    assert first.status_code == 201
    assert first.json()["status"] == "scheduled"
    assert "idempotent-replayed" not in first.headers
    replay = writer.post("/reminders", json=reminder, headers=key)
    assert replay.status_code == 201
    assert replay.json() == first.json()
    assert replay.headers["idempotent-replayed"] == "true"
    different = writer.post("/reminders", json={**reminder, "message": "Other"}, headers=key)
    assert different.status_code == 422
    assert len(upstream.state()["reminders"]) == 1
    assert writer.get(f"/reminders/{first.json()['id']}").json() == first.json()
    # Without a key every POST is a new reminder.
    assert writer.post("/reminders", json=reminder).json()["id"] != first.json()["id"]


# ------------------------------------------------------------------------------------ control API


def test_demo_mutate_changes_etag(upstream: DemoUpstream, reader: httpx.Client) -> None:
    etag = _etag(reader, "/contacts/c-1001")
    with httpx.Client(base_url=upstream.url, timeout=2) as control:
        response = control.post(
            "/_demo/mutate", json={"path": "/contacts/c-1001", "patch": {"name": "Ada L."}}
        )
        assert response.status_code == 200
        assert response.json()["version"] == 2
        missing = control.post("/_demo/mutate", json={"path": "/contacts/c-0", "patch": {}})
        assert missing.status_code == 404
    assert _etag(reader, "/contacts/c-1001") not in (etag, None)
    assert reader.get("/contacts/c-1001").json()["name"] == "Ada L."
    # In-process, for invoices: the revision moves on as a normal write would.
    assert upstream.mutate("/invoices/inv-2001", {"memo": "someone else"})["revision"] == 4


def test_control_endpoints_are_not_logged(upstream: DemoUpstream, reader: httpx.Client) -> None:
    reader.get("/contacts/c-1001")
    with httpx.Client(base_url=upstream.url, timeout=2) as control:
        log = control.get("/_demo/requests").json()
        assert [(entry["method"], entry["path"]) for entry in log] == [("GET", "/contacts/c-1001")]
        assert log[0]["headers"]["authorization"] == "Bearer demo-read-token"
        state = control.get("/_demo/state").json()
        assert set(state) == {"contacts", "invoices", "notes", "deployments", "reminders"}
    assert len(upstream.requests_log()) == 1
    assert upstream.writes() == []


def test_reset_restores_seed_and_clears_log(upstream: DemoUpstream, writer: httpx.Client) -> None:
    etag = _etag(writer, "/contacts/c-1001")
    writer.delete("/contacts/c-1001", headers={"If-Match": etag})
    upstream.add_fault(path_prefix="/notes/", status=500)
    with httpx.Client(base_url=upstream.url, timeout=2) as control:
        assert control.post("/_demo/reset").status_code == 200
    assert upstream.requests_log() == []
    assert upstream.faults() == []
    assert writer.get("/contacts/c-1001").headers["etag"] == etag
    assert writer.get("/notes/n-1").status_code == 200


# ------------------------------------------------------------------------------------ faults


def test_fault_503_after_applying(upstream: DemoUpstream, writer: httpx.Client) -> None:
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", status=503, apply=True)
    etag = _etag(writer, "/contacts/c-1001")
    response = writer.patch(
        "/contacts/c-1001", json={"email": "applied@example.test"}, headers={"If-Match": etag}
    )
    assert response.status_code == 503
    assert "error" in response.json()
    # The 503 lied: the change took effect. This is the "unknown outcome" case.
    assert writer.get("/contacts/c-1001").json()["email"] == "applied@example.test"
    # times=1: the fault is used up.
    assert upstream.faults() == []


def test_fault_503_without_applying_via_http(upstream: DemoUpstream, writer: httpx.Client) -> None:
    with httpx.Client(base_url=upstream.url, timeout=2) as control:
        fault = {"method": "POST", "path_prefix": "/deployments", "status": 503, "retry_after": 1}
        assert control.post("/_demo/faults", json=fault).status_code == 201
        assert control.post("/_demo/faults", json={"bogus": 1}).status_code == 400
    response = writer.post("/deployments", json={"service": "web", "version": "v1.0.0"})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert upstream.state()["deployments"] == {}
    assert upstream.writes()[0]["status"] == 503


def test_fault_delay_causes_client_timeout_after_applying(
    upstream: DemoUpstream, writer: httpx.Client
) -> None:
    upstream.add_fault(method="PUT", path_prefix="/notes/", delay=0.3, apply=True)
    with pytest.raises(httpx.TimeoutException):
        writer.put("/notes/n-1", json={"title": "T", "body": "B"}, timeout=0.1)
    assert upstream.state()["notes"]["n-1"] == {"id": "n-1", "title": "T", "body": "B"}


def test_a_delayed_write_that_outlives_a_reset_is_never_applied(
    upstream: DemoUpstream, reader: httpx.Client, writer: httpx.Client
) -> None:
    """A slow PATCH left by one test must not change the next test's data: the request is
    applied only after its delay, and a reset meanwhile drops it unapplied."""
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", delay=0.5)
    seed = upstream.state()["contacts"]["c-1001"]["email"]
    headers = {"If-Match": _etag(reader, "/contacts/c-1001")}
    with pytest.raises(httpx.TimeoutException):
        writer.patch(
            "/contacts/c-1001", json={"email": "late@example.com"}, headers=headers, timeout=0.1
        )
    upstream.reset()
    time.sleep(0.8)
    assert upstream.state()["contacts"]["c-1001"]["email"] == seed
    assert upstream.writes() == []


def test_fault_close_drops_connection(upstream: DemoUpstream) -> None:
    upstream.add_fault(method="GET", path_prefix="/contacts/", close=True, times=2)
    with httpx.Client(base_url=upstream.url, headers=READ, timeout=2) as client:
        for _ in range(2):
            with pytest.raises(httpx.TransportError):
                client.get("/contacts/c-1001")
        assert client.get("/contacts/c-1001").status_code == 200
    assert [entry["status"] for entry in upstream.requests_log()] == [None, None, 200]


def test_clear_faults_over_http(upstream: DemoUpstream, reader: httpx.Client) -> None:
    upstream.add_fault(path_prefix="/", status=500, times=5)
    with httpx.Client(base_url=upstream.url, timeout=2) as control:
        assert len(control.get("/_demo/faults").json()) == 1
        assert control.delete("/_demo/faults").status_code == 200
    assert reader.get("/contacts/c-1001").status_code == 200


# ------------------------------------------------------------------------------------ robustness


def test_malformed_json_is_400(upstream: DemoUpstream, writer: httpx.Client) -> None:
    response = writer.post(
        "/reminders", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json() == {"error": "malformed JSON"}
    assert upstream.writes()[0]["body"] is None


def test_unknown_path_wrong_method_and_too_large(writer: httpx.Client) -> None:
    assert writer.get("/nothing-here").status_code == 404
    wrong = writer.post("/notes/n-1", json={})
    assert wrong.status_code == 405
    assert "PUT" in wrong.headers["allow"]
    huge = writer.put("/notes/n-1", content=b"x" * (1024 * 1024 + 1))
    assert huge.status_code == 413


def test_head_does_not_advance_deployments(writer: httpx.Client) -> None:
    location = writer.post("/deployments", json={"service": "api", "version": "v1"}).headers[
        "location"
    ]
    head = writer.head(location)
    assert head.status_code == 200
    assert head.content == b""
    assert writer.get(location).json()["status"] == "running"


def test_merge_patch_follows_rfc_7386() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}}
    assert merge_patch(target, {"a": "z", "c": {"f": None}}) == {"a": "z", "c": {"d": "e"}}
    assert merge_patch({"a": [1]}, {"a": [2]}) == {"a": [2]}
    assert target == {"a": "b", "c": {"d": "e", "f": "g"}}  # not modified in place


def test_stop_makes_it_unreachable() -> None:
    upstream = DemoUpstream().start()
    url = upstream.url
    with httpx.Client(base_url=url, headers=READ, timeout=1) as client:
        assert client.get("/notes/n-1").status_code == 200  # leaves a kept-alive connection
        upstream.stop()
        with pytest.raises(httpx.TransportError):
            client.get("/notes/n-1")


# ------------------------------------------------------------------------------------ CLI


def test_cli_prints_url_and_stops_on_sigterm() -> None:
    env = {**os.environ, "DEMO_UPSTREAM_READ_TOKEN": "r-env", "DEMO_UPSTREAM_WRITE_TOKEN": "w-env"}
    process = subprocess.Popen(
        [sys.executable, "-m", "demo.upstream", "--port", "0"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("demo upstream listening on http://127.0.0.1:")
        url = line.rsplit(" ", 1)[1]
        headers = {"Authorization": "Bearer r-env"}
        assert httpx.get(f"{url}/notes/n-1", headers=headers, timeout=2).status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=5) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


# ------------------------------------------------------------------------------------ OAuth2


def _token(upstream: DemoUpstream, **kw) -> httpx.Response:
    data = {"grant_type": "client_credentials", **kw.pop("data", {})}
    return httpx.post(upstream.url + "/oauth/token", data=data, timeout=2, **kw)


CLIENT = ("demo-client", "demo-client-secret")


def test_the_token_endpoint_grants_client_credentials(upstream: DemoUpstream) -> None:
    response = _token(upstream, auth=CLIENT, data={"scope": "write"})
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["token_type"] == "Bearer" and body["expires_in"] == 300
    assert body["scope"] == "write"
    bearer = {"Authorization": f"Bearer {body['access_token']}"}
    etag = httpx.get(upstream.url + "/contacts/c-1001", headers=bearer).headers["etag"]
    patch = httpx.patch(
        upstream.url + "/contacts/c-1001",
        json={"email": "a@b.example"},
        headers={**bearer, "If-Match": etag},
    )
    assert patch.status_code == 200
    # The body method works too; a read-scoped token cannot write.
    read = _token(upstream, data={"client_id": CLIENT[0], "client_secret": CLIENT[1]}).json()
    assert read["scope"] == "read"
    bearer = {"Authorization": f"Bearer {read['access_token']}"}
    assert httpx.get(upstream.url + "/contacts/c-1001", headers=bearer).status_code == 200
    assert httpx.delete(upstream.url + "/contacts/c-1001", headers=bearer).status_code == 403
    assert upstream.token_requests() == 2
    assert [e["path"] for e in upstream.requests_log()] == ["/contacts/c-1001"] * 4


@pytest.mark.parametrize(
    ("kw", "status", "error"),
    [
        ({"auth": ("demo-client", "wrong")}, 401, "invalid_client"),
        ({}, 401, "invalid_client"),
        ({"auth": CLIENT, "data": {"client_id": "demo-client"}}, 400, "invalid_request"),
        ({"auth": CLIENT, "data": {"grant_type": "password"}}, 400, "unsupported_grant_type"),
        ({"auth": CLIENT, "data": {"scope": "admin"}}, 400, "invalid_scope"),
    ],
)
def test_the_token_endpoint_refuses(upstream: DemoUpstream, kw, status, error) -> None:
    response = _token(upstream, **kw)
    assert response.status_code == status
    assert response.json() == {"error": error}
    assert "demo-client-secret" not in response.text


def test_tokens_expire_and_can_be_revoked(upstream: DemoUpstream, monkeypatch) -> None:
    import time

    token = _token(upstream, auth=CLIENT).json()["access_token"]
    bearer = {"Authorization": f"Bearer {token}"}
    assert httpx.get(upstream.url + "/notes/n-1", headers=bearer).status_code == 200
    assert upstream.revoke_tokens() == 1
    assert httpx.get(upstream.url + "/notes/n-1", headers=bearer).status_code == 401
    token = _token(upstream, auth=CLIENT).json()["access_token"]
    bearer = {"Authorization": f"Bearer {token}"}
    later = time.time() + 301
    monkeypatch.setattr("demo.upstream.time.time", lambda: later)
    response = httpx.get(upstream.url + "/notes/n-1", headers=bearer)
    assert response.status_code == 401
    assert response.json() == {"error": "token expired"}
    assert upstream.issued_tokens()[-1] == token
