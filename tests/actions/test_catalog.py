"""Loading catalog files: all of it or nothing, every problem named with a pointer."""

from __future__ import annotations

import copy
import time

import pytest
import yaml
from django.core.management import CommandError, call_command

from actions.catalog import CatalogError, load_catalog
from actions.models import Action, Connector
from tests.conftest import DEMO_CATALOG


def demo_document() -> dict:
    """The demo catalog as a document to change and dump, without its policies: they
    are files beside the catalog, which a dumped text has no directory for (they are
    tested in test_policy_loading.py)."""
    document = yaml.safe_load(DEMO_CATALOG.read_text())
    document.pop("policies")
    return document


def dump(document: dict) -> str:
    return yaml.safe_dump(document, sort_keys=False)


def counts() -> tuple[int, int]:
    return Action.objects.count(), Connector.objects.count()


def snapshot() -> dict[str, tuple[int, str, str]]:
    return {a.name: (a.version, a.digest, a.title) for a in Action.objects.all()}


def load_refused(document_or_text, *, source: str = "bad.yaml") -> CatalogError:
    """Load a bad file on top of the demo catalog; assert nothing at all changed."""
    text = document_or_text if isinstance(document_or_text, str) else dump(document_or_text)
    before_counts, before = counts(), snapshot()
    base_urls = {c.name: c.base_url for c in Connector.objects.all()}
    with pytest.raises(CatalogError) as info:
        load_catalog(text, source=source)
    assert counts() == before_counts
    assert snapshot() == before
    assert {c.name: c.base_url for c in Connector.objects.all()} == base_urls
    assert info.value.source == source
    return info.value


def with_new_action(mutate) -> dict:
    """The demo catalog plus one good new action, a new connector, a changed title, and
    whatever ``mutate`` breaks: a refused file must leave none of the good parts behind."""
    document = demo_document()
    document["connectors"]["other"] = {"base_url": "http://127.0.0.1:9"}
    good = copy.deepcopy(document["actions"]["update_contact_email"])
    document["actions"]["update_contact_phone"] = good
    document["actions"]["replace_note"]["title"] = "A new title that must not be stored"
    mutate(document)
    return document


def problems_by_pointer(error: CatalogError) -> dict[str, str]:
    return {p.pointer: p.message for p in error.problems}


# --- the demo catalog --------------------------------------------------------------------


def test_the_demo_catalog_loads(db):
    report = load_catalog(
        DEMO_CATALOG.read_text(),
        base_urls={"demo": "http://127.0.0.1:1"},
        base_dir=DEMO_CATALOG.parent,
    )
    assert sorted(report.created) == sorted(demo_document()["actions"])
    assert report.connectors == ["demo"]
    assert Connector.objects.get(name="demo").base_url == "http://127.0.0.1:1"
    action = Action.objects.get(name="update_contact_email")
    assert action.version == 1
    assert len(action.digest) == 64
    assert action.spec.kind == "update"
    assert action.spec.write.precondition == "if_match"
    assert Action.objects.get(name="delete_contact").spec.approval.approvers == 2


def test_every_demo_action_builds_a_spec(catalog):
    for action in catalog.values():
        assert action.spec.name == action.name
        assert action.spec.input_schema["additionalProperties"] is False


# --- refused files -------------------------------------------------------------------------


def test_it_refuses_additional_properties_true(catalog):
    def mutate(d):
        d["actions"]["update_contact_email"]["input_schema"]["additionalProperties"] = True

    error = load_refused(with_new_action(mutate))
    problems = problems_by_pointer(error)
    pointer = "/actions/update_contact_email/input_schema/additionalProperties"
    assert "must be false" in problems[pointer]


def test_it_refuses_a_missing_additional_properties(catalog):
    def mutate(d):
        del d["actions"]["create_contact"]["input_schema"]["additionalProperties"]

    error = load_refused(with_new_action(mutate))
    assert "/actions/create_contact/input_schema/additionalProperties" in problems_by_pointer(error)


def test_it_refuses_an_unknown_connector(catalog):
    def mutate(d):
        d["actions"]["send_reminder"]["connector"] = "nowhere"

    error = load_refused(with_new_action(mutate))
    assert problems_by_pointer(error) == {
        "/actions/send_reminder/connector": "unknown connector 'nowhere'"
    }


def test_it_refuses_a_path_field_that_is_not_required(catalog):
    def mutate(d):
        d["actions"]["delete_contact"]["input_schema"]["required"] = []

    error = load_refused(with_new_action(mutate))
    problems = problems_by_pointer(error)
    assert "must be a required input property" in problems["/actions/delete_contact/target"]


def test_it_refuses_a_path_field_that_is_no_input(catalog):
    def mutate(d):
        d["actions"]["delete_contact"]["target"] = "/contacts/{someone_else}"

    error = load_refused(with_new_action(mutate))
    assert "not an input property" in problems_by_pointer(error)["/actions/delete_contact/target"]


def test_it_refuses_invalid_yaml_with_a_line_number(catalog):
    text = DEMO_CATALOG.read_text() + "\nactions: [unclosed\n  - x: {\n"
    error = load_refused(text)
    assert len(error.problems) == 1
    message = error.problems[0].message
    assert "not valid YAML" in message
    assert "line " in message
    lines = text.count("\n")
    reported = int(message.split("line ")[1].split(",")[0])
    assert lines - 3 <= reported <= lines + 1


def test_it_refuses_a_file_that_is_not_a_mapping(catalog):
    error = load_refused("- just\n- a list\n")
    assert "mapping" in error.problems[0].message


@pytest.mark.parametrize(
    "mutate, pointer",
    [
        (lambda d: d["actions"]["update_contact_email"].update(kind="frobnicate"), "/kind"),
        (lambda d: d["actions"]["update_contact_email"]["card"].pop("consent"), "/card"),
        (lambda d: d["actions"]["update_contact_email"].update(surprise=1), ""),
        (
            lambda d: d["actions"]["update_contact_email"]["write"].update(method="TRACE"),
            "/write/method",
        ),
        (
            lambda d: d["actions"]["update_contact_email"].update(target="https://evil/x"),
            "/target",
        ),
        (
            lambda d: d["actions"]["update_contact_email"].update(approval={"approvers": 0}),
            "/approval/approvers",
        ),
        (
            lambda d: d["actions"]["update_contact_email"]["write"].update(
                rejected_when={"pointer": "ok"}
            ),
            "/write/rejected_when",
        ),
    ],
    ids=["kind", "card", "unknown-key", "method", "target", "approvers", "rejected-when"],
)
def test_schema_violations_are_refused_with_a_pointer(catalog, mutate, pointer):
    error = load_refused(with_new_action(mutate))
    assert "/actions/update_contact_email" + pointer in problems_by_pointer(error)
    assert all(p.message for p in error.problems)


def test_a_bad_connector_base_url_is_refused(catalog):
    def mutate(d):
        d["connectors"]["demo"]["base_url"] = "http://user@evil.example/"

    error = load_refused(with_new_action(mutate))
    assert "/connectors/demo/base_url" in problems_by_pointer(error)


def test_an_update_that_reads_nothing_is_refused(catalog):
    def mutate(d):
        d["actions"]["update_contact_email"]["read"] = None

    error = load_refused(with_new_action(mutate))
    assert "/actions/update_contact_email/read" in problems_by_pointer(error)


def test_if_match_without_etag_is_refused(catalog):
    def mutate(d):
        d["actions"]["update_contact_email"]["version"] = {"source": "hash"}

    error = load_refused(with_new_action(mutate))
    assert "/actions/update_contact_email/write/precondition" in problems_by_pointer(error)


def test_every_problem_is_reported_at_once(catalog):
    def mutate(d):
        d["actions"]["send_reminder"]["connector"] = "nowhere"
        d["actions"]["delete_contact"]["input_schema"]["additionalProperties"] = True

    error = load_refused(with_new_action(mutate))
    assert set(problems_by_pointer(error)) == {
        "/actions/send_reminder/connector",
        "/actions/delete_contact/input_schema/additionalProperties",
    }


def test_a_refused_file_on_an_empty_database_creates_nothing(db):
    def mutate(d):
        d["actions"]["send_reminder"]["input_schema"]["additionalProperties"] = True

    with pytest.raises(CatalogError):
        load_catalog(dump(with_new_action(mutate)))
    assert counts() == (0, 0)


# --- versions ---------------------------------------------------------------------------------


def test_an_unchanged_reload_keeps_versions(catalog):
    before = snapshot()
    report = load_catalog(DEMO_CATALOG.read_text(), base_dir=DEMO_CATALOG.parent)
    assert sorted(report.unchanged) == sorted(before)
    assert report.updated == [] and report.created == []
    assert snapshot() == before


def test_reordering_keys_is_not_a_change(catalog):
    document = demo_document()
    action = document["actions"]["update_contact_email"]
    document["actions"]["update_contact_email"] = dict(reversed(list(action.items())))
    before = snapshot()
    load_catalog(dump(document))
    assert snapshot() == before


def test_changing_a_definition_bumps_version_and_digest(catalog):
    before = snapshot()
    document = demo_document()
    document["actions"]["update_contact_email"]["card"]["scope"] = "Exactly one contact."
    report = load_catalog(dump(document))
    assert report.updated == ["update_contact_email"]
    after = snapshot()
    version, digest, _ = after["update_contact_email"]
    assert version == before["update_contact_email"][0] + 1
    assert digest != before["update_contact_email"][1]
    assert {k: v for k, v in after.items() if k != "update_contact_email"} == {
        k: v for k, v in before.items() if k != "update_contact_email"
    }
    # Loading the same changed file again is not another change.
    load_catalog(dump(document))
    assert snapshot() == after


def test_disabling_an_action_is_a_new_version(catalog):
    document = demo_document()
    document["actions"]["replace_note"]["enabled"] = False
    load_catalog(dump(document))
    action = Action.objects.get(name="replace_note")
    assert action.enabled is False
    assert action.version == 2


# --- the management command -------------------------------------------------------------------


def test_the_command_loads_a_good_file(db, tmp_path):
    from io import StringIO

    out = StringIO()
    call_command(
        "load_catalog", str(DEMO_CATALOG), "--base-url", "demo=http://127.0.0.1:2", stdout=out
    )
    assert "catalog loaded" in out.getvalue()
    assert Connector.objects.get(name="demo").base_url == "http://127.0.0.1:2"


def test_the_command_prints_problems_without_a_traceback(catalog, tmp_path):
    document = demo_document()
    document["actions"]["send_reminder"]["connector"] = "nowhere"
    path = tmp_path / "bad.yaml"
    path.write_text(dump(document))
    before = snapshot()
    with pytest.raises(CommandError) as info:
        call_command("load_catalog", str(path))
    message = str(info.value)
    assert "the catalog was not loaded" in message
    assert "/actions/send_reminder/connector: unknown connector 'nowhere'" in message
    assert "Traceback" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert snapshot() == before


def test_the_command_reports_a_missing_file(db, tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        call_command("load_catalog", str(tmp_path / "missing.yaml"))


def test_the_command_refuses_a_bad_base_url_override(db):
    with pytest.raises(CommandError, match="CONNECTOR=URL"):
        call_command("load_catalog", str(DEMO_CATALOG), "--base-url", "nonsense")


# --- patterns: matched in linear time -------------------------------------------------------


def test_a_pattern_without_a_linear_time_match_is_refused(catalog):
    def mutate(d):
        schema = d["actions"]["update_contact_email"]["input_schema"]
        schema["properties"]["contact_id"]["pattern"] = "^(c)-\\1$"  # a backreference
        schema["properties"]["email"]["pattern"] = "^(?!admin@)"  # a lookahead

    problems = problems_by_pointer(load_refused(with_new_action(mutate)))
    base = "/actions/update_contact_email/input_schema/properties"
    assert (
        "cannot be matched in linear time: RE2 refuses it"
        in (problems[f"{base}/contact_id/pattern"])
    )
    assert "cannot be matched in linear time" in problems[f"{base}/email/pattern"]


def test_pattern_properties_are_refused(catalog):
    def mutate(d):
        schema = d["actions"]["update_contact_email"]["input_schema"]
        schema["patternProperties"] = {"^x-": {"type": "string", "maxLength": 5}}

    problems = problems_by_pointer(load_refused(with_new_action(mutate)))
    assert (
        "patternProperties are not allowed"
        in (problems["/actions/update_contact_email/input_schema/patternProperties"])
    )


def test_a_catastrophic_pattern_in_a_catalog_validates_input_in_milliseconds(catalog):
    document = demo_document()
    document["actions"]["update_contact_email"]["input_schema"]["properties"]["email"] = {
        "type": "string",
        "pattern": "^(a+)+$",
        "maxLength": 254,
    }
    load_catalog(dump(document))
    validator = Action.objects.get(name="update_contact_email").spec.input_validator()
    # A backtracking engine needs seconds for this input, four times more per two characters.
    value = {"contact_id": "c-1", "email": "a" * 26 + "!"}
    started = time.monotonic()
    errors = list(validator.iter_errors(value))
    assert time.monotonic() - started < 0.05
    assert len(errors) == 1 and "does not match '^(a+)+$'" in errors[0].message
    assert not list(validator.iter_errors({"contact_id": "c-1", "email": "a" * 250}))


# --- form bodies and fixed headers ----------------------------------------------------------


def form_action(**write) -> dict:
    return {
        "title": "Send one text message",
        "connector": "demo",
        "kind": "invoke",
        "consequence_class": "external",
        "card": dict.fromkeys(["effect", "scope", "result", "consent", "retry"], "Said."),
        "input_schema": {
            "type": "object",
            "additionalProperties": False,
            "required": ["to"],
            "properties": {
                "to": {"type": "string", "maxLength": 20},
                "options": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"flash": {"type": "boolean"}},
                },
            },
        },
        "target": "/messages",
        "write": {
            "method": "POST",
            "content_type": "application/x-www-form-urlencoded",
            "body": {"to": {"$input": "to"}, "options": {"$input": "options"}},
            **write,
        },
    }


def test_a_form_body_that_nests_needs_deep_object(catalog):
    document = demo_document()
    document["actions"]["send_text"] = form_action()
    problems = problems_by_pointer(load_refused(document))
    assert (
        "only form_style deep_object nests" in (problems["/actions/send_text/write/body/options"])
    )

    document["actions"]["send_text"] = form_action(form_style="deep_object")
    load_catalog(dump(document))
    assert Action.objects.get(name="send_text").spec.write.form_style == "deep_object"


def test_form_style_is_only_for_forms(catalog):
    document = demo_document()
    document["actions"]["send_text"] = form_action(
        content_type="application/json", form_style="form"
    )
    problems = problems_by_pointer(load_refused(document))
    assert (
        "form_style is for application/x-www-form-urlencoded"
        in (problems["/actions/send_text/write/form_style"])
    )


@pytest.mark.parametrize(
    "name, message",
    [
        ("authorization", "set by Countersign itself"),
        ("If-Match", "set by Countersign itself"),
        ("Content-Type", "set by Countersign itself"),
        ("X-Api-Key", "looks like a credential"),
    ],
)
def test_fixed_headers_never_replace_what_countersign_sets(catalog, name, message):
    document = demo_document()
    document["actions"]["send_text"] = form_action(form_style="deep_object", headers={name: "x"})
    problems = problems_by_pointer(load_refused(document))
    assert message in problems[f"/actions/send_text/write/headers/{name}"]


def test_a_fixed_header_value_is_printable_ascii(catalog):
    document = demo_document()
    document["actions"]["send_text"] = form_action(
        form_style="deep_object", headers={"From": "ops@example.com\r\nX-Evil: 1"}
    )
    problems = problems_by_pointer(load_refused(document))
    assert "/actions/send_text/write/headers/From" in problems
