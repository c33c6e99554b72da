"""Exporting the catalog: load(export(x)) == x, and the text is stable."""

from __future__ import annotations

import io

import pytest
import yaml
from django.core.management import CommandError, call_command

from actions.catalog import CatalogError, action_define, load_catalog
from actions.export import ExportError, definition_text, export_catalog
from actions.models import Action, ActionVersion, Connector, Credential


def state() -> dict[str, tuple[str, dict, bool]]:
    return {a.name: (a.digest, a.definition, a.enabled) for a in Action.objects.all()}


def connectors() -> dict[str, tuple[str, float, float]]:
    return {
        c.name: (c.base_url, c.connect_timeout, c.read_timeout) for c in Connector.objects.all()
    }


def wipe() -> None:
    Credential.objects.all().delete()
    Action.objects.all().delete()
    Connector.objects.all().delete()


def test_it_round_trips_into_an_empty_catalog(catalog):
    before, before_connectors = state(), connectors()
    text = export_catalog()
    wipe()
    assert Action.objects.count() == 0

    report = load_catalog(text, source="export.yaml")

    assert sorted(report.created) == sorted(before)
    assert state() == before
    assert connectors() == before_connectors


def test_loading_the_export_over_itself_changes_nothing(catalog):
    versions = {a.name: a.version for a in Action.objects.all()}
    history = ActionVersion.objects.count()

    report = load_catalog(export_catalog(), source="export.yaml")

    assert report.created == [] and report.updated == []
    assert sorted(report.unchanged) == sorted(catalog)
    assert {a.name: a.version for a in Action.objects.all()} == versions
    assert ActionVersion.objects.count() == history


def test_the_text_is_stable(catalog):
    text = export_catalog()
    assert export_catalog() == text
    wipe()
    load_catalog(text, source="export.yaml")
    assert export_catalog() == text


def test_it_writes_definitions_exactly(catalog):
    document = yaml.safe_load(export_catalog())
    assert document["version"] == 1
    assert list(document["actions"]) == sorted(catalog)
    for name, action in catalog.items():
        assert document["actions"][name] == action.definition
    demo = Connector.objects.get(name="demo")
    assert document["connectors"]["demo"] == {
        "base_url": demo.base_url,
        "timeouts": {"connect": 2, "read": 5},
    }


def test_it_keeps_the_catalog_key_order(catalog):
    document = yaml.safe_load(export_catalog())  # mappings keep the file's order
    entry = document["actions"]["update_contact_email"]
    assert list(entry)[:5] == ["title", "description", "connector", "kind", "consequence_class"]
    assert list(entry["card"]) == ["effect", "scope", "result", "consent", "retry"]
    assert list(entry["input_schema"])[:3] == ["type", "additionalProperties", "required"]


def test_multiline_and_unicode_text_round_trips(catalog):
    definition = {
        **catalog["update_contact_email"].definition,
        "description": "Zeile eins — “quoted”\nline two: {braces} & 'ticks'\n\n  indented\n",
        "title": "Ünïcode title: yes",
        "summary": "no",
    }
    action_define(name="update_contact_email", definition=definition, actor="test")
    before = state()
    text = export_catalog()
    wipe()
    load_catalog(text, source="export.yaml")
    assert state() == before
    assert export_catalog() == text


def test_definition_text_parses_back_to_the_definition(catalog):
    definition = catalog["create_contact"].definition
    assert yaml.safe_load(definition_text(definition)) == definition


def test_it_exports_one_connector(catalog):
    Connector.objects.create(name="other", base_url="https://other.example")
    document = yaml.safe_load(export_catalog(connectors=["other"]))
    assert document["connectors"] == {
        "other": {"base_url": "https://other.example", "timeouts": {"connect": 3, "read": 10}}
    }
    assert document["actions"] == {}


def test_it_refuses_unknown_connectors(catalog):
    with pytest.raises(ExportError, match="nope"):
        export_catalog(connectors=["demo", "nope"])


def test_it_never_exports_credentials(catalog):
    from tests.conftest import READ_TOKEN, WRITE_TOKEN

    text = export_catalog()
    assert READ_TOKEN not in text and WRITE_TOKEN not in text
    assert "credential" not in yaml.safe_load(text)


def test_unconfirmed_classes_are_called_out(catalog):
    definition = {**catalog["send_reminder"].definition, "enabled": False}
    action_define(name="send_reminder", definition=definition, actor="test", class_confirmed=False)
    assert "not yet confirmed in Countersign (review before enabling): send_reminder" in (
        export_catalog()
    )


def test_the_review_state_survives_export_and_reload(catalog):
    definition = {**catalog["send_reminder"].definition, "enabled": False}
    action_define(name="send_reminder", definition=definition, actor="test", class_confirmed=False)
    before = {a.name: (a.digest, a.class_confirmed, a.enabled) for a in Action.objects.all()}
    text = export_catalog()
    assert yaml.safe_load(text)["unconfirmed_classes"] == ["send_reminder"]

    wipe()
    load_catalog(text, source="export.yaml")

    after = {a.name: (a.digest, a.class_confirmed, a.enabled) for a in Action.objects.all()}
    assert after == before
    assert after["send_reminder"][1:] == (False, False)
    assert after["update_contact_email"][1] is True
    assert export_catalog() == text


def test_an_unconfirmed_class_cannot_load_enabled(catalog):
    document = yaml.safe_load(export_catalog())
    document["unconfirmed_classes"] = ["send_reminder", "nope"]
    with pytest.raises(CatalogError) as info:
        load_catalog(yaml.safe_dump(document))
    problems = {p.pointer: p.message for p in info.value.problems}
    assert problems["/unconfirmed_classes/1"] == "'nope' is no action of this file"
    assert "cannot be enabled" in problems["/actions/send_reminder/enabled"]


def test_the_command_writes_a_file(catalog, tmp_path):
    out = tmp_path / "catalog.yaml"
    call_command("export_catalog", "--output", str(out))
    assert out.read_text() == export_catalog()


def test_the_command_writes_to_stdout(catalog):
    out = io.StringIO()
    call_command("export_catalog", "--connector", "demo", stdout=out)
    assert out.getvalue() == export_catalog(connectors=["demo"])


def test_the_command_reports_unknown_connectors(catalog):
    with pytest.raises(CommandError, match="unknown connectors: nope"):
        call_command("export_catalog", "--connector", "nope")
