"""A form-encoded body with a fixed header, end to end: the preview's exact request is
what a real HTTP server receives from the worker."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

import pytest

from actions.catalog import action_define
from actions.models import Connector, Credential
from actions.services import agent_create, credential_set
from approvals.models import Plan, PlanStatus
from approvals.services import plan_submit
from tests.conftest import WRITE_TOKEN


class _Recorder(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self):  # noqa: N802 - the http.server interface
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        self.received.append(
            {
                "path": self.path,
                "headers": [(k.lower(), v) for k, v in self.headers.items()],
                "body": body,
            }
        )
        answer = json.dumps({"sid": "SM1"}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


@pytest.fixture
def form_upstream():
    _Recorder.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", _Recorder.received
    server.shutdown()
    server.server_close()


def test_a_form_body_and_a_fixed_header_reach_the_upstream(
    db, executor_key, form_upstream, approve, run
):
    url, received = form_upstream
    connector = Connector.objects.create(name="texts", base_url=url)
    credential_set(connector=connector, role=Credential.Role.WRITE, secret={"token": WRITE_TOKEN})
    action_define(
        name="send_text",
        actor="test",
        definition={
            "title": "Send one text message",
            "connector": "texts",
            "kind": "invoke",
            "consequence_class": "external",
            "card": dict.fromkeys(["effect", "scope", "result", "consent", "retry"], "Said."),
            "input_schema": {
                "type": "object",
                "additionalProperties": False,
                "required": ["to", "body"],
                "properties": {
                    "to": {"type": "string", "maxLength": 20},
                    "body": {"type": "string", "maxLength": 100},
                    "tags": {
                        "type": "array",
                        "maxItems": 3,
                        "items": {"type": "string", "maxLength": 10},
                    },
                    "address": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"city": {"type": "string", "maxLength": 20}},
                    },
                },
            },
            "target": "/messages",
            "write": {
                "method": "POST",
                "content_type": "application/x-www-form-urlencoded",
                "form_style": "deep_object",
                "headers": {"From": "ops@example.com"},
                "body": {
                    "To": {"$input": "to"},
                    "Body": {"$input": "body"},
                    "Tags": {"$input": "tags"},
                    "Address": {"$input": "address"},
                    "Channel": "sms",
                },
            },
        },
    )
    agent, _ = agent_create(name="texter", action_names=["send_text"], active=True)

    plan, _ = plan_submit(
        agent=agent,
        action_name="send_text",
        input={
            "to": "+15551234567",
            "body": "Hello & welcome=yes",
            "tags": ["a", "b"],
            "address": {"city": "Paris"},
        },
        reason="",
    )

    # The reviewer sees the exact pairs, the fixed header and the media type.
    expected = [
        ["To", "+15551234567"],
        ["Body", "Hello & welcome=yes"],
        ["Tags[0]", "a"],
        ["Tags[1]", "b"],
        ["Address[city]", "Paris"],
        ["Channel", "sms"],
    ]
    assert plan.write_request["body"] == expected
    assert plan.write_request["content_type"] == "application/x-www-form-urlencoded"
    assert plan.write_request["headers"] == {"From": "ops@example.com"}

    outcome = run(approve(plan))
    assert outcome == PlanStatus.COMPLETED, Plan.objects.get(pk=plan.pk).outcome_detail

    [request] = received
    headers = dict(request["headers"])
    assert request["path"] == "/messages"
    assert headers["content-type"] == "application/x-www-form-urlencoded"
    assert headers["from"] == "ops@example.com"
    assert [v for k, v in request["headers"] if k == "authorization"] == [f"Bearer {WRITE_TOKEN}"]
    assert request["body"] == (
        b"To=%2B15551234567&Body=Hello+%26+welcome%3Dyes&Tags%5B0%5D=a&Tags%5B1%5D=b"
        b"&Address%5Bcity%5D=Paris&Channel=sms"
    )
    assert [list(p) for p in parse_qsl(request["body"].decode())] == expected
    assert Plan.objects.get(pk=plan.pk).status == PlanStatus.COMPLETED
