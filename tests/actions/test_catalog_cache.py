"""The per-process catalog cache (actions/cache.py) and the pooled read clients
(actions/clients.py): a change applies on the very next lookup, however it was made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from actions import cache
from actions.clients import read_client
from actions.lib.exceptions import UnknownAction
from actions.models import Action, Agent, AgentScope, CatalogState, Connector, Credential
from actions.services import credential_set
from approvals.models import NotificationTarget
from approvals.services.validation import _resolve_action

ROOT = Path(__file__).resolve().parents[2]
ACTION = "update_contact_email"


def generation() -> str:
    return CatalogState.objects.get(pk=1).generation


def submit(client, api_headers, n: int = 0):
    body = {"action": ACTION, "input": {"contact_id": "c-1001", "email": f"a{n}@new.example"}}
    return client.post("/api/v1/plans", body, content_type="application/json", **api_headers)


def _new_target(agent):
    NotificationTarget.objects.create(group=Group.objects.create(name="ops"), kind="email")


# Every kind of write to every cached table, made behind the services' back.
CHANGES = {
    "connector updated": lambda agent: Connector.objects.update(read_timeout=9.0),
    "credential revoked": lambda agent: Credential.objects.filter(role="read").update(
        revoked_at=timezone.now()
    ),
    "credential deleted": lambda agent: Credential.objects.filter(role="read").delete(),
    "action disabled": lambda agent: Action.objects.filter(name=ACTION).update(enabled=False),
    "agent revoked": lambda agent: Agent.objects.filter(pk=agent.pk).update(
        revoked_at=timezone.now()
    ),
    "agent saved": lambda agent: agent.save(),
    "agent's actions cleared": lambda agent: agent.actions.clear(),
    "allow-list added": lambda agent: AgentScope.objects.create(
        agent=agent, action=Action.objects.get(name=ACTION), field="contact_id", values=["c-9"]
    ),
    "notification target added": _new_target,
}


@pytest.mark.parametrize("change", CHANGES)
def test_every_write_to_a_cached_table_changes_the_generation(agent, change):
    before = generation()
    CHANGES[change](agent)
    assert generation() != before


def test_recording_an_agents_last_use_keeps_the_generation(agent):
    before = generation()
    Agent.objects.filter(pk=agent.pk).update(last_used_at=timezone.now())
    assert generation() == before


# (change, status of the next submission, error type) with this process's cache warm.
NEXT_REQUEST = [
    ("agent revoked", 401, None),
    ("action disabled", 422, "unknown-action"),
    ("agent's actions cleared", 403, "not-allowed"),
    ("allow-list added", 403, "out-of-scope"),
]


@pytest.mark.parametrize(("change", "status", "kind"), NEXT_REQUEST)
def test_a_change_applies_to_the_very_next_request(
    client, api_headers, agent, upstream, settings, change, status, kind
):
    settings.COUNTERSIGN_RATE_LIMIT = ""
    assert submit(client, api_headers, 1).status_code == 201
    assert submit(client, api_headers, 2).status_code == 201  # served from memory
    CHANGES[change](agent)
    response = submit(client, api_headers, 3)
    assert response.status_code == status, response.content
    if kind:
        assert kind in response.content.decode()


def test_a_submission_reads_the_generation_once(client, api_headers, demo_policies, settings):
    """The token's check and everything the submission looks up (action, allow-lists,
    credential, decision rules, policies) are under one read of the generation, made at
    the start of the request."""
    settings.COUNTERSIGN_RATE_LIMIT = ""
    assert submit(client, api_headers, 1).status_code == 201
    with CaptureQueriesContext(connection) as ctx:
        assert submit(client, api_headers, 2).status_code == 201
    reads = [q for q in ctx.captured_queries if "actions_catalogstate" in q["sql"]]
    assert len(reads) == 1, reads


def test_an_mcp_proposal_reads_the_generation_once(agent_token, demo_policies, settings):
    """The same for the MCP tool that proposes a plan."""
    from approvals.mcp.tools import propose

    settings.COUNTERSIGN_RATE_LIMIT = ""
    args = {"contact_id": "c-1001", "email": "mcp@new.example"}
    with CaptureQueriesContext(connection) as ctx:
        result, plan = propose(agent_token, "a bearer token", ACTION, args)
    assert plan is not None, result
    reads = [q for q in ctx.captured_queries if "actions_catalogstate" in q["sql"]]
    assert len(reads) == 1, reads


def test_a_revoked_read_credential_is_not_presented_again(client, api_headers, upstream, settings):
    settings.COUNTERSIGN_RATE_LIMIT = ""
    assert submit(client, api_headers, 1).status_code == 201
    Credential.objects.filter(role="read").update(revoked_at=timezone.now())
    upstream.reset()
    submit(client, api_headers, 2)
    assert [e["headers"].get("authorization") for e in upstream.requests_log()] == [None]


def test_the_read_client_is_pooled_per_connector_until_its_credential_changes(catalog):
    connector = Connector.objects.get(name="demo")
    with read_client(connector) as first:
        pass
    with read_client(connector) as again:
        # Leaving ``with`` did not close it: the next caller reuses its connections.
        assert again.get("/contacts/c-1001").status == 200
    assert again is first
    credential_set(
        connector=connector, role=Credential.Role.READ, secret={"token": "rotated-read-token"}
    )
    with read_client(connector) as rotated:
        assert rotated is not first
        assert rotated.get("/contacts/c-1001").status == 401


def test_a_rolled_back_change_is_never_served(transactional_db, catalog, agent):
    """Generations are random, not counted: a value seen inside a transaction that rolled
    back is not the value of the next committed change."""
    original = Action.objects.get(name=ACTION).title
    with transaction.atomic():
        Action.objects.filter(name=ACTION).update(title="never committed")
        # Remembered under the uncommitted generation.
        assert _resolve_action(agent, ACTION).title == "never committed"
        transaction.set_rollback(True)
    Connector.objects.update(read_timeout=9.0)  # a committed change, one write later
    assert _resolve_action(agent, ACTION).title == original


def test_made_up_action_names_are_not_remembered(agent):
    for n in range(5):
        with pytest.raises(UnknownAction):
            _resolve_action(agent, f"no-such-action-{n}")
    assert not [key for key in cache._entries if key[0] == "action"]


def test_a_changed_setting_empties_the_cache(agent, settings):
    action = _resolve_action(agent, ACTION)
    assert action.spec.approval.plan_ttl == settings.COUNTERSIGN_PLAN_TTL_SECONDS
    settings.COUNTERSIGN_PLAN_TTL_SECONDS = 77
    assert _resolve_action(agent, ACTION).spec.approval.plan_ttl == 77


PROBE = """
import json, django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.utils import timezone
from actions.models import Agent, CatalogState, Connector
gen = lambda: CatalogState.objects.get(pk=1).generation
seen = [gen()]
connector = Connector.objects.create(name="c", base_url="http://127.0.0.1:9")
seen.append(gen())
agent = Agent.objects.create(name="a", token_prefix="p", token_hash="h" * 64)
seen.append(gen())
Agent.objects.filter(pk=agent.pk).update(last_used_at=timezone.now())
kept = gen() == seen[-1]
Agent.objects.filter(pk=agent.pk).update(revoked_at=timezone.now())
seen.append(gen())
connector.delete()
seen.append(gen())
print(json.dumps({"distinct": len(set(seen)), "kept": kept}))
"""


def test_the_embedded_database_has_the_same_triggers(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        COUNTERSIGN_ENV="test",
        COUNTERSIGN_SECRET_KEY="probe-" + "x" * 50,
        COUNTERSIGN_FERNET_KEYS=",".join(settings.COUNTERSIGN_FERNET_KEYS),
    )
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"distinct": 5, "kept": True}


class _CookieSetter(BaseHTTPRequestHandler):
    """Answers every GET with a Set-Cookie and remembers the Cookie headers it got."""

    protocol_version = "HTTP/1.1"
    seen: list[str | None] = []

    def do_GET(self):  # noqa: N802 - http.server's naming
        type(self).seen.append(self.headers.get("Cookie"))
        body = b'{"id": "x"}'
        self.send_response(200)
        self.send_header("Set-Cookie", "session=upstream-session; Path=/")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_cookie_set_by_an_upstream_is_never_sent_back(db):
    _CookieSetter.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CookieSetter)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        connector = Connector.objects.create(
            name="cookies", base_url=f"http://127.0.0.1:{server.server_port}"
        )
        credential_set(
            connector=connector, role=Credential.Role.READ, secret={"token": "read-token-r"}
        )
        for _ in range(3):
            with read_client(connector) as client:  # the same pooled client each time
                assert client.get("/things/x").status == 200
    finally:
        server.shutdown()
        server.server_close()
    assert _CookieSetter.seen == [None, None, None]
