"""The "everything" reference MCP server (@modelcontextprotocol/server-everything, pinned)
as an upstream over Streamable HTTP: a read (a tool with structured content whose
declared result fields reach the agent) and a harmless write with no preview, sent with
the static header the connector's ``mcp.headers`` names.

One server process for the module (it starts in about half a second, but every test
would pay it); each test's connector opens its own HTTP sessions on it."""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from actions.connectors.mcp.reading import McpReader, ReadRefused
from actions.connectors.mcp.sessions import pool_clear
from actions.models import Connector
from actions.services import agent_create
from approvals.models import Plan, PlanStatus
from approvals.services import plan_submit
from tests.executors.mcp_catalogs import everything_catalog, load_confirmed
from tests.mcp.upstreams.servers import everything_http

pytestmark = pytest.mark.usefixtures("executor_key")

HEADER = ("X-Team", "catalog-e2e")


class Recorder(ThreadingHTTPServer):
    """A pass-through proxy in front of the server that notes each request's headers:
    what the connector sends is seen on the wire, not taken from its configuration."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Pass)
        self.upstream = urlsplit(upstream)
        self.seen: list[dict[str, str]] = []
        self.calls: list[str] = []  # the tools called, in order

    def called(self, tool: str) -> int:
        return self.calls.count(tool)


class _Pass(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the answer ends when the connection closes

    def _relay(self) -> None:
        server: Recorder = self.server  # type: ignore[assignment]
        server.seen.append({k.lower(): v for k, v in self.headers.items()})
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        try:
            message = json.loads(body) if body else {}
        except ValueError:
            message = {}
        if isinstance(message, dict) and message.get("method") == "tools/call":
            server.calls.append(str((message.get("params") or {}).get("name")))
        up = http.client.HTTPConnection(server.upstream.hostname, server.upstream.port, timeout=30)
        skip = {"host", "content-length", "connection"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        up.request(self.command, self.path, body=body, headers=headers)
        answer = up.getresponse()
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("transfer-encoding", "content-length", "connection"):
                self.send_header(name, value)
        self.end_headers()
        try:
            while chunk := answer.read1(65536):
                self.wfile.write(chunk)
                self.wfile.flush()
        except OSError:
            pass
        finally:
            up.close()

    do_GET = do_POST = do_DELETE = _relay

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def recorder():
    with everything_http() as url:
        proxy = Recorder(url)
        thread = threading.Thread(target=proxy.serve_forever, daemon=True)
        thread.start()
        try:
            yield proxy
        finally:
            pool_clear()
            proxy.shutdown()
            proxy.server_close()


@pytest.fixture
def url(recorder):
    return f"http://127.0.0.1:{recorder.server_address[1]}/mcp"


@pytest.fixture
def agent(db, url):
    pool_clear()
    connector, _ = load_confirmed(everything_catalog(url, dict([HEADER])), "everything")
    agent, _ = agent_create(name="caller", action_names=["ev_weather", "ev_logging"], active=True)
    yield agent
    pool_clear()


def submit(agent, action, **input) -> Plan:
    plan, _ = plan_submit(agent=agent, action_name=action, input=input, reason="")
    return plan


def test_the_connector_is_reached_over_http_with_its_header(agent, url, recorder):
    connector = Connector.objects.get(name="everything")
    assert connector.server == {"transport": "http", "url": url, "headers": dict([HEADER])}
    assert connector.base_url == url
    with McpReader(connector) as reader:
        session = reader._session()
        assert reader._spec.transport == "http"
        assert HEADER in reader._spec.headers
        answer = reader.call("get-structured-content", {"location": "New York"})
        assert not answer.is_error
        assert set(answer.structured) == {"temperature", "conditions", "humidity"}
        with pytest.raises(ReadRefused):
            reader.call("echo", {"message": "not declared"})
        assert session.protocol_version == "2025-11-25"
    name, value = HEADER[0].lower(), HEADER[1]
    assert recorder.seen, "the calls went through the recording proxy"
    assert all(request.get(name) == value for request in recorder.seen)


def test_a_read_tool_with_structured_content_gives_its_declared_fields(agent, approve, run):
    plan = submit(agent, "ev_weather", location="Chicago")
    assert plan.target["preview"]["recipe"] == "read"
    assert plan.write_request == {
        "method": "tools/call",
        "path": "get-structured-content",
        "body": {"location": "Chicago"},
    }
    if plan.status == PlanStatus.AWAITING_APPROVAL:
        plan = approve(plan)
    if plan.status == PlanStatus.APPROVED:
        run(plan)
    plan.refresh_from_db()
    assert plan.status == PlanStatus.COMPLETED, plan.outcome_detail
    assert set(plan.result) == {"temperature", "conditions", "humidity"}
    assert isinstance(plan.result["temperature"], int | float)
    assert isinstance(plan.result["conditions"], str) and plan.result["conditions"]


def test_a_write_with_no_preview_is_called_once_after_a_person_approves(
    agent, approve, run, recorder
):
    calls = recorder.called("toggle-simulated-logging")
    plan = submit(agent, "ev_logging")
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert plan.target["preview"] == {
        "recipe": "none",
        "strength": "none",
        "says": "no preview: the exact call is shown",
    }
    assert plan.write_request == {
        "method": "tools/call",
        "path": "toggle-simulated-logging",
        "body": {},
    }
    assert plan.precondition["kind"] == "none"
    assert recorder.called("toggle-simulated-logging") == calls, "proposing called nothing"
    run(approve(plan))
    plan.refresh_from_db()
    assert plan.status == PlanStatus.COMPLETED, plan.outcome_detail
    assert plan.verified is False, "nothing to read back"
    assert plan.upstream_status is None
    assert recorder.called("toggle-simulated-logging") == calls + 1, "called once"
