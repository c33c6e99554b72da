"""The web server (``python -m config.web``, config/asgi.py) as a deployment runs it: the
worker processes share the connections between them, one that dies is replaced, a port
in use is one clear line, and a chunked request body reaches Django whole."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from actions.services import agent_create
from config.asgi import SizedBodies
from config.web import APP, config_for, parse
from demo.processes import free_port, start_web
from tests.e2e.support import while_a_slow_submission_runs

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list[int]:
    """The supervisor's web processes (not multiprocessing's resource tracker)."""
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        children = [int(child) for child in handle.read().split()]
    found = []
    for child in children:
        try:
            with open(f"/proc/{child}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except OSError:
            continue
        if b"spawn_main" in cmdline and b"resource_tracker" not in cmdline:
            found.append(child)
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _tcp(port: int, state: str) -> set[str]:
    """Inodes of the TCP sockets in ``state`` whose local port is ``port``."""
    found = set()
    with open("/proc/net/tcp") as handle:
        next(handle)
        for line in handle:
            fields = line.split()
            if int(fields[1].split(":")[1], 16) == port and fields[3] == state:
                found.add(fields[9])
    return found


def _accepted(port: int) -> set[str]:
    return _tcp(port, "01")  # ESTABLISHED


def _listening(port: int) -> set[str]:
    return _tcp(port, "0A")  # LISTEN


def test_connections_opened_at_once_are_spread_over_the_processes(live_env, live_logs):
    """Sixteen kept-alive connections opened together: each web process holds some.
    (Sharing one listening socket, as ``uvicorn --workers`` does, the process that woke
    first took all of them.)"""
    proc, url = start_web(live_env, live_logs, name="web-spread", workers=2)
    try:
        port = int(url.rsplit(":", 1)[1])
        deadline = time.monotonic() + 30
        while len(_children(proc.proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = _children(proc.proc.pid)
        assert len(workers) == 2, workers
        connections = [socket.create_connection(("127.0.0.1", port)) for _ in range(16)]
        try:
            for conn in connections:
                conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            for conn in connections:
                conn.settimeout(10)
                assert conn.recv(4096).startswith(b"HTTP/1.1 200")
            accepted = _accepted(port)
            held = {pid: len(_socket_inodes(pid) & accepted) for pid in workers}
        finally:
            for conn in connections:
                conn.close()
        assert sum(held.values()) == 16, held
        assert all(count > 0 for count in held.values()), held
    finally:
        proc.stop(timeout=15)


def test_a_web_process_that_dies_is_replaced_and_sigterm_stops_them_all(live_env, live_logs):
    proc, url = start_web(live_env, live_logs, name="web-respawn", workers=2)
    try:
        deadline = time.monotonic() + 30
        while len(_children(proc.proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        first, second = _children(proc.proc.pid)
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            now = _children(proc.proc.pid)
            if len(now) == 2 and first not in now:
                break
            time.sleep(0.1)
        assert len(now) == 2 and first not in now and second in now, now
        replacement = next(pid for pid in now if pid != second)
        # The replacement listens on a socket of its own on the same port, and answers.
        port = int(url.rsplit(":", 1)[1])
        deadline = time.monotonic() + 30
        while not _socket_inodes(replacement) & _listening(port):
            assert time.monotonic() < deadline, "the replacement never listened"
            time.sleep(0.1)
        with httpx.Client(base_url=url, timeout=5) as http:
            assert [http.get("/healthz").status_code for _ in range(5)] == [200] * 5
        assert "starting another" in proc.log()

        os.kill(proc.proc.pid, signal.SIGTERM)
        proc.proc.wait(timeout=40)
        assert proc.proc.returncode == 0
        for pid in (second, replacement):
            assert not os.path.exists(f"/proc/{pid}") or _zombie(pid), pid
    finally:
        proc.stop(timeout=15)


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0] == "Z"


def _web_command(env: dict, *argv: str) -> subprocess.CompletedProcess:
    """``python -m config.web`` run to its end (these tests expect it to stop by itself)."""
    return subprocess.run(
        [sys.executable, "-m", "config.web", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_port_in_use_is_one_line_and_exit_status_1(live_env):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        result = _web_command(live_env, "--port", str(port), "--workers", "2")
    finally:
        taken.close()
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize("argv", [["--workers", "0"], ["--port", "70000"]])
def test_bad_options_are_refused_before_anything_starts(argv, live_env):
    result = _web_command(live_env, *argv)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_a_chunked_body_reaches_django_whole(live_web, transactional_db, catalog):
    """A body sent without Content-Length (chunked) is read in full: Django, which runs
    as WSGI, would otherwise read it as empty."""
    _, token = agent_create(
        name="chunked-agent", action_names=["update_contact_email"], active=True
    )
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    body = json.dumps(
        {
            "action": "update_contact_email",
            "input": {"contact_id": "c-1001", "email": "chunked@example.test"},
        }
    ).encode()

    def chunks():
        for start in range(0, len(body), 16):
            yield body[start : start + 16]

    with httpx.Client(base_url=live_web, headers=headers, timeout=30) as http:
        created = http.post("/api/v1/plans", content=chunks())
    assert created.status_code == 201, created.text
    assert created.json()["input"]["email"] == "chunked@example.test"


def test_a_chunked_body_over_the_limit_is_413_and_never_reaches_the_app():
    reached = []

    async def app(scope, receive, send):
        reached.append(scope)

    sent = []

    async def send(message):
        sent.append(message)

    async def run(parts: list[bytes]) -> None:
        messages = [
            {"type": "http.request", "body": part, "more_body": i < len(parts) - 1}
            for i, part in enumerate(parts)
        ]

        async def receive():
            return messages.pop(0)

        scope = {"type": "http", "headers": [(b"transfer-encoding", b"chunked")]}
        await SizedBodies(app, limit=10)(scope, receive, send)

    asyncio.run(run([b"12345", b"678901"]))
    assert reached == []
    assert sent[0]["status"] == 413

    sent.clear()
    asyncio.run(run([b"12345", b"67890"]))
    assert sent == []
    (scope,) = reached
    assert dict(scope["headers"]) == {b"content-length": b"10"}


def test_a_chunked_body_over_the_limit_on_the_api_is_a_problem():
    sent = []

    async def send(message):
        sent.append(message)

    async def run() -> None:
        messages = [{"type": "http.request", "body": b"12345678901", "more_body": False}]

        async def receive():
            return messages.pop(0)

        scope = {
            "type": "http",
            "path": "/api/v1/plans",
            "headers": [(b"transfer-encoding", b"chunked")],
        }
        await SizedBodies(None, limit=10)(scope, receive, send)

    asyncio.run(run())
    start, body = sent
    assert start["status"] == 413
    assert dict(start["headers"])[b"content-type"] == b"application/problem+json"
    problem = json.loads(body["body"])
    assert problem["type"] == "urn:countersign:problem:body-too-large"
    assert problem["detail"] == "at most 10 bytes"


def test_unknown_paths_and_wrong_methods_on_the_api_are_problems(live_web):
    """Through the real server (uvicorn, the ASGI pieces, Django as WSGI), not only
    Django's test client."""
    with httpx.Client(base_url=live_web, timeout=30) as http:
        missing = http.get("/api/v1/nope")
        slashed = http.get("/api/v1/actions/")
        wrong = http.delete("/api/v1/actions")
    for response, status in ((missing, 404), (slashed, 404), (wrong, 405)):
        assert response.status_code == status
        assert response.headers["content-type"] == "application/problem+json"
        assert set(response.json()) >= {"type", "title", "status", "detail", "correlation_id"}
    assert slashed.json()["detail"].endswith("(did you mean /api/v1/actions?)")
    assert wrong.headers["allow"] == "GET"
    assert wrong.json()["type"] == "urn:countersign:problem:method-not-allowed"


def test_the_options_default_as_uvicorns_do():
    """Deployments moved from ``uvicorn config.asgi:application`` keep its behaviour
    (X-Forwarded-* trusted from 127.0.0.1 only, the same keep-alive and backlog)."""
    ours, theirs = config_for(parse([])), uvicorn.Config(APP)
    for name in (
        "host",
        "port",
        "proxy_headers",
        "forwarded_allow_ips",
        "timeout_keep_alive",
        "backlog",
        "access_log",
        "lifespan",
    ):
        assert getattr(ours, name) == getattr(theirs, name), name


def test_processes_that_cannot_start_stop_the_server_with_status_1(live_env):
    """A bad setting makes every web process exit as it starts: the supervisor gives up
    after a few, with one line saying so, instead of starting them again forever."""
    result = _web_command(
        {**live_env, "COUNTERSIGN_WEB_THREADS": "0"},
        *("--port", str(free_port()), "--workers", "2"),
    )
    assert result.returncode == 1
    assert "keep exiting as they start" in result.stderr
    assert "COUNTERSIGN_WEB_THREADS must be at least 1" in result.stderr


def test_a_request_that_finds_every_thread_busy_is_told_to_come_back(
    live_env, live_logs, transactional_db, catalog, canary, upstream
):
    """One thread, held by a submission whose preview read the upstream answers slowly:
    another request waits COUNTERSIGN_WEB_QUEUE_TIMEOUT seconds for it, then gets a 503
    with Retry-After (a problem document on the API, text on a page), not a hang; the
    server serves again once the thread is free."""
    env = {**live_env, "COUNTERSIGN_WEB_THREADS": "1", "COUNTERSIGN_WEB_QUEUE_TIMEOUT": "1"}
    proc, url = start_web(env, live_logs, name="web-one-thread")
    canary.ours.add(url)
    try:
        _, token = agent_create(
            name="one-thread-agent", action_names=["update_contact_email"], active=True
        )
        submitted, (busy_api, busy_page) = while_a_slow_submission_runs(
            url,
            token,
            upstream,
            lambda http: (http.get("/api/v1/actions"), http.get("/accounts/login/")),
        )
        assert busy_api.status_code == 503, busy_api.text
        assert busy_api.headers["Retry-After"] == "1"
        assert busy_api.headers["Content-Type"] == "application/problem+json"
        assert busy_api.json()["type"].endswith("busy")
        assert busy_page.status_code == 503
        assert busy_page.headers["Retry-After"] == "1"
        assert "busy" in busy_page.text
        assert submitted.status_code == 201, submitted.text
        headers = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{url}/api/v1/actions", headers=headers, timeout=30).status_code == 200
    finally:
        proc.stop(timeout=15)
