"""An MCP server fronted as a new user would, with real processes: the filesystem server
(@modelcontextprotocol/server-filesystem, pinned) imported with ``manage.py import_mcp``,
one proposal confirmed by a person (who also lowers its class and gives it a paired
read), proposed over the API, approved on the review page, carried out once by the
Celery worker (which starts its own server process) and verified by the read-back.

The web process previews through its own session with the server; the worker, a prefork
child, through another: the test sees the file change once, and only after the approval."""

from __future__ import annotations

import json
import re
from io import StringIO

import httpx
import pytest
from django.core.management import call_command

from actions.catalog import action_confirm_class, action_define, load_catalog
from actions.models import Action, ToolPin
from actions.services import agent_create
from tests.e2e.test_core_loop import login
from tests.mcp.upstreams.servers import filesystem_server

pytestmark = pytest.mark.e2e


@pytest.fixture
def notes(live, tmp_path):
    root = tmp_path / "notes"
    root.mkdir()
    (root / "todo.txt").write_text("milk\neggs\n")
    server = filesystem_server(root)
    load_catalog(
        json.dumps(
            {
                "version": 1,
                "connectors": {
                    "notes": {
                        "mcp": {"command": server.command, "args": server.args},
                        "timeouts": {"connect": 20, "read": 20},
                    }
                },
            }
        )
    )
    return root


def test_imported_confirmed_proposed_approved_and_verified_with_real_processes(
    live, notes, reviewer
):
    out = StringIO()
    call_command("import_mcp", "notes", "--actor", "ada", stdout=out)
    assert "notes_write_file" in out.getvalue()
    proposal = Action.objects.get(name="notes_write_file")
    assert (proposal.enabled, proposal.class_confirmed) == (False, False)
    assert proposal.consequence_class == "irreversible"  # destructiveHint, as served

    # A person reviews it: confirms (which pins what the import saw), says the change is
    # reversible, and pairs it with read_text_file so the reviewer sees the file's text.
    action_confirm_class(name="notes_write_file", actor="ada")
    assert ToolPin.objects.get(connector__name="notes", tool="write_file").digest
    definition = dict(proposal.definition)
    definition.update(
        kind="replace",
        consequence_class="reversible",
        enabled=True,
        target="{path}",
        preview={
            "recipe": "paired_read",
            "read": {
                "tool": "read_text_file",
                "arguments": {"path": {"$input": "path"}},
                "result": "text",
            },
            "document": {"$input": "content"},
        },
    )
    action_define(name="notes_write_file", definition=definition, actor="ada", source="mcp")
    call_command("confirm_tools", "notes", "--tool", "read_text_file", "--yes", stdout=out)
    _, token = agent_create(name="scribe", action_names=["notes_write_file"], active=True)

    api = httpx.Client(
        base_url=live["url"] + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
    )
    path = str(notes / "todo.txt")
    created = api.post(
        "/plans", json={"action": "notes_write_file", "input": {"path": path, "content": "milk\n"}}
    )
    assert created.status_code == 201, created.text
    plan = created.json()
    assert plan["preview"]["before"] == "milk\neggs\n"
    assert plan["preview"]["after"] == "milk\n"
    assert plan["preview"]["recipe"] == "paired_read"
    assert plan["preview"]["text"]["lines_removed"] == 1
    assert (notes / "todo.txt").read_text() == "milk\neggs\n", "the preview wrote nothing"

    web = httpx.Client(base_url=live["url"], timeout=30)
    login(web, "rita", "pw-rita")
    page = web.get(f"/plans/{plan['id']}/")
    assert 'data-recipe="paired_read"' in page.text
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    fingerprint = re.search(r'name="fingerprint" value="([0-9a-f]{64})"', page.text).group(1)
    decided = web.post(
        f"/plans/{plan['id']}/decide",
        data={"decision": "approve", "fingerprint": fingerprint, "csrfmiddlewaretoken": csrf},
        headers={"Referer": live["url"]},
    )
    assert decided.status_code == 302

    result = plan
    for _ in range(6):
        result = api.get(f"/plans/{plan['id']}", params={"wait": 10}).json()
        if result["status"] not in ("approved", "executing"):
            break
    assert result["status"] == "completed", result
    assert result["outcome"]["verified"] is True
    assert (notes / "todo.txt").read_text() == "milk\n"
