"""Hostile OpenAPI documents: each is refused quickly, as one clear message, on the
command line and in the admin, and nothing is stored."""

from __future__ import annotations

import html
import io
import json
import logging
import time

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse

from actions import admin as actions_admin
from actions.models import Action, Connector
from actions.openapi import MAX_DOCUMENT_BYTES, OpenAPIImportError, import_openapi

# Far below the import's own deadline (MAX_IMPORT_SECONDS): a refusal inside this bound
# comes from a limit that saw the document for what it is, not from the clock.
FAST = 8.0


def _document(paths: dict, components: dict | None = None) -> dict:
    document = {"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": paths}
    if components:
        document["components"] = components
    return document


def _post(schema_ref: str) -> dict:
    return {
        "post": {
            "operationId": "sendMessage",
            "summary": "Send one message",
            "requestBody": {"content": {"application/json": {"schema": {"$ref": schema_ref}}}},
            "responses": {"200": {"description": "ok"}},
        }
    }


def exponential_all_of(levels: int) -> str:
    """Each level is the allOf of the level below, twice: 2**levels merges when every
    reference is merged afresh (2.3 KB at 30 levels)."""
    schemas = {"L0": {"type": "object", "properties": {"text": {"type": "string", "maxLength": 9}}}}
    for i in range(1, levels + 1):
        ref = {"$ref": f"#/components/schemas/L{i - 1}"}
        schemas[f"L{i}"] = {"allOf": [ref, ref]}
    return json.dumps(
        _document({"/messages": _post(f"#/components/schemas/L{levels}")}, {"schemas": schemas})
    )


def path_item_cycle() -> str:
    return json.dumps(_document({"/a": {"$ref": "#/paths/~1b"}, "/b": {"$ref": "#/paths/~1a"}}))


def deep_arrays(levels: int = 100_000) -> str:
    return '{"openapi": "3.1.0", "paths": {"/a": {}}, "x": ' + "[" * levels + "]" * levels + "}"


def many_values() -> str:
    """Almost 16 MiB of empty lists: five million values before anything is built."""
    count = (MAX_DOCUMENT_BYTES - 100) // 3
    return '{"openapi": "3.1.0", "paths": {"/a": {}}, "x": [' + "[]," * count + "[]]}"


def billion_laughs() -> str:
    lines = ["openapi: 3.1.0", "paths: {/a: {}}", "l0: &l0 [lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):
        refs = ", ".join([f"*l{i - 1}"] * 9)
        lines.append(f"l{i}: &l{i} [{refs}]")
    return "\n".join(lines) + "\n"


def fifty_megabytes() -> str:
    padding = " " * (50 * 1024 * 1024)
    return '{"openapi": "3.1.0", "paths": {"/a": {}}}' + padding


def backtracking_patterns() -> str:
    """The classic catastrophic pattern (harmless to RE2, so kept) beside a required
    backreference, which no linear-time engine can check: that operation is refused."""
    schemas = {
        "Message": {
            "type": "object",
            "required": ["echo"],
            "properties": {
                "code": {"type": "string", "pattern": "^(a+)+$", "maxLength": 100},
                "echo": {"type": "string", "pattern": "^(a+)\\1$", "maxLength": 100},
            },
        }
    }
    return json.dumps(
        _document({"/messages": _post("#/components/schemas/Message")}, {"schemas": schemas})
    )


HOSTILE = {
    "path-item-cycle": (path_item_cycle, "path item '/a': recursive schema"),
    "deep-nesting": (deep_arrays, "nested more than 200 levels deep"),
    "many-values": (many_values, "more than 1000000 values"),
    "billion-laughs": (billion_laughs, "more than 1000000 values (YAML aliases included)"),
    "fifty-megabytes": (fifty_megabytes, "at most 16 MiB"),
}


@pytest.fixture
def api(db):
    return Connector.objects.create(name="api", base_url="https://api.example.com")


def timed(fn):
    started = time.monotonic()
    result = fn()
    return result, time.monotonic() - started


# --- the importer ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_documents_are_refused_quickly(api, name):
    make, message = HOSTILE[name]
    text = make()

    def attempt():
        with pytest.raises(OpenAPIImportError) as info:
            import_openapi(text, connector="api", actor="ada")
        return info.value

    error, seconds = timed(attempt)

    assert message in str(error)
    assert len(str(error)) < 1000  # one readable line, not a pointer 100,000 tokens long
    assert seconds < FAST
    assert Action.objects.count() == 0


def test_nested_all_of_is_merged_once_per_schema(api):
    # 2**20 merges if every reference were merged afresh; once per schema, it is instant.
    report, seconds = timed(
        lambda: import_openapi(exponential_all_of(20), connector="api", actor="ada")
    )
    assert seconds < 2.0
    assert [p.name for p in report.proposed] == ["send_message"]
    properties = report.proposed[0].definition["input_schema"]["properties"]
    assert properties == {"text": {"type": "string", "maxLength": 9}}


def test_all_of_nested_past_the_depth_limit_refuses_its_operation(api):
    report, seconds = timed(
        lambda: import_openapi(exponential_all_of(30), connector="api", actor="ada")
    )
    assert seconds < FAST
    assert report.proposed == []
    assert "allOf nested more than 24 levels deep" in report.refused[0].reason


def test_the_work_budget_refuses_the_document(api, monkeypatch):
    monkeypatch.setattr("actions.openapi.document.MAX_IMPORT_WORK", 50)
    with pytest.raises(OpenAPIImportError, match="more than 50 schema nodes of work"):
        import_openapi(exponential_all_of(20), connector="api", actor="ada")


def test_the_clock_refuses_the_document(api, monkeypatch):
    monkeypatch.setattr("actions.openapi.document.MAX_IMPORT_SECONDS", 0.0)
    with pytest.raises(OpenAPIImportError, match="takes longer than 0 seconds"):
        import_openapi(exponential_all_of(5), connector="api", actor="ada")


def test_a_long_chain_of_references_is_refused(api):
    schemas = {"S0": {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}}}}
    for i in range(1, 200):
        schemas[f"S{i}"] = {"$ref": f"#/components/schemas/S{i - 1}"}
    text = json.dumps(
        _document({"/messages": _post("#/components/schemas/S199")}, {"schemas": schemas})
    )
    report = import_openapi(text, connector="api", actor="ada")
    assert "more than 64 references in a chain" in report.refused[0].reason


def test_the_limits_are_the_same_in_the_admin_and_on_the_command_line():
    assert actions_admin.MAX_OPENAPI_BYTES == MAX_DOCUMENT_BYTES == 16 * 1024 * 1024


# Documents that are read whole, whose hostile operation alone is refused.
OPERATION_REFUSED = {
    "exponential-all-of": (lambda: exponential_all_of(30), "allOf nested more than 24 levels deep"),
    "backtracking-pattern": (backtracking_patterns, "cannot be checked in linear time"),
}


# --- the command line ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(OPERATION_REFUSED))
def test_the_command_refuses_a_hostile_operation_and_says_why(api, tmp_path, name):
    make, message = OPERATION_REFUSED[name]
    path = tmp_path / f"{name}.json"
    path.write_text(make())
    out = io.StringIO()

    _, seconds = timed(
        lambda: call_command("import_openapi", str(path), "--connector", "api", stdout=out)
    )

    output = out.getvalue()
    assert seconds < FAST
    assert "0 actions proposed" in output and "1 operations refused" in output
    assert "POST /messages" in output and message in output
    assert "Traceback" not in output
    assert Action.objects.count() == 0


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_the_command_refuses_hostile_documents_in_one_message(api, tmp_path, name):
    make, message = HOSTILE[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(make())

    def attempt():
        with pytest.raises(CommandError) as info:
            call_command("import_openapi", str(path), "--connector", "api", stdout=io.StringIO())
        return str(info.value)

    output, seconds = timed(attempt)

    assert seconds < FAST
    assert "Traceback" not in output and "import failed" not in output
    assert message in output or "larger than 16 MiB" in output
    assert Action.objects.count() == 0


# --- the admin page --------------------------------------------------------------------------


@pytest.fixture
def admin_client(client, db):
    user = get_user_model().objects.create_superuser(
        username="ada-admin", email="ada@example.test", password="pw-ada-admin"
    )
    client.force_login(user)
    return client


def _admin_import(admin_client, api, caplog, name: str, text: str) -> str:
    """Upload ``text`` on the admin's import page; the page, once checked that it came
    quickly, as a page, with no traceback anywhere and nothing stored."""
    upload = SimpleUploadedFile(f"{name}.json", text.encode(), "application/json")
    with caplog.at_level(logging.WARNING):
        response, seconds = timed(
            lambda: admin_client.post(
                reverse("admin:actions_action_import_openapi"),
                {"connector": api.pk, "file": upload},
            )
        )
    assert response.status_code == 200
    assert seconds < FAST
    page = html.unescape(response.content.decode())
    assert "Traceback" not in page
    assert not [r for r in caplog.records if r.exc_info]
    assert Action.objects.count() == 0
    return page


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_the_admin_refuses_hostile_documents_on_the_page(admin_client, api, caplog, name):
    make, message = HOSTILE[name]
    page = _admin_import(admin_client, api, caplog, name, make())
    assert message in page or "larger than 16 MiB" in page


@pytest.mark.parametrize("name", sorted(OPERATION_REFUSED))
def test_the_admin_refuses_a_hostile_operation_on_the_page(admin_client, api, caplog, name):
    make, message = OPERATION_REFUSED[name]
    page = _admin_import(admin_client, api, caplog, name, make())
    assert "Refused operations (1)" in page and message in page


def test_the_admin_shows_an_unexpected_failure_as_a_refusal(admin_client, api, monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr("actions.admin.actions.import_openapi", broken)
    upload = SimpleUploadedFile("a.json", exponential_all_of(2).encode(), "application/json")
    response = admin_client.post(
        reverse("admin:actions_action_import_openapi"), {"connector": api.pk, "file": upload}
    )
    assert response.status_code == 200
    assert "the import failed (ZeroDivisionError); nothing was stored" in (
        response.content.decode()
    )
