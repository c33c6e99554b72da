"""The catalog refuses what would turn a narrow action back into a generic one, with the
line and pointer of every mistake, and loads nothing from a refused file."""

from __future__ import annotations

import pytest

from actions.catalog import CatalogError, load_catalog
from actions.spec import ActionSpec
from tests.actions.test_catalog import demo_document, dump, load_refused, problems_by_pointer

ACTION = "/actions/update_contact_email"


def refused_with(catalog, mutate) -> dict[str, str]:
    document = demo_document()
    mutate(document["actions"]["update_contact_email"])
    return problems_by_pointer(load_refused(document))


def test_unbounded_strings_are_refused(catalog):
    def mutate(action):
        del action["input_schema"]["properties"]["email"]["maxLength"]

    problems = refused_with(catalog, mutate)
    assert problems == {
        f"{ACTION}/input_schema/properties/email": "strings need a maxLength (or an enum)"
    }


def test_identifiers_need_a_pattern_or_enum(catalog):
    def mutate(action):
        del action["input_schema"]["properties"]["contact_id"]["pattern"]

    problems = refused_with(catalog, mutate)
    assert problems[f"{ACTION}/input_schema/properties/contact_id"] == (
        "identifier 'contact_id' needs a pattern or an enum"
    )


def test_nested_objects_must_be_closed_and_arrays_bounded(catalog):
    def mutate(action):
        props = action["input_schema"]["properties"]
        props["labels"] = {"type": "array", "items": {"type": "string", "maxLength": 10}}
        props["meta"] = {
            "type": "object",
            "properties": {"note": {"type": "string", "maxLength": 5}},
        }

    problems = refused_with(catalog, mutate)
    assert problems[f"{ACTION}/input_schema/properties/labels"] == "arrays need a maxItems"
    assert problems[f"{ACTION}/input_schema/properties/meta/additionalProperties"] == (
        "nested objects must also set additionalProperties: false"
    )


def test_an_enabled_action_needs_a_complete_card(catalog):
    def mutate(action):
        action["card"]["retry"] = ""

    assert refused_with(catalog, mutate) == {
        f"{ACTION}/card/retry": "an enabled action needs a complete card"
    }


def test_a_disabled_action_may_have_an_incomplete_card(catalog):
    document = demo_document()
    action = document["actions"]["update_contact_email"]
    action["card"]["retry"] = ""
    action["enabled"] = False
    load_catalog(dump(document))
    stored = catalog["update_contact_email"].__class__.objects.get(name="update_contact_email")
    assert stored.enabled is False
    assert stored.version == 2


@pytest.mark.parametrize("klass", ["external", "irreversible"])
def test_session_grants_never_cover_external_or_irreversible_actions(catalog, klass):
    def mutate(action):
        action["consequence_class"] = klass
        action["approval"] = {"session_grant": True}

    assert refused_with(catalog, mutate) == {
        f"{ACTION}/approval/session_grant": (
            "only observation and reversible actions may run under a session grant"
        )
    }


def test_rules_need_exactly_one_comparison(catalog):
    def mutate(action):
        action["scope"] = [{"pointer": "/workspace", "equals": "a", "in": ["a"]}]

    assert refused_with(catalog, mutate) == {
        f"{ACTION}/scope/0": (
            "a rule needs exactly one of: equals, in, not_in, equals_agent, above, below, "
            "at_least, at_most"
        )
    }


def test_eligibility_needs_a_read_target(catalog):
    document = demo_document()
    document["actions"]["send_reminder"]["eligibility"] = [{"pointer": "/x", "equals": 1}]
    problems = problems_by_pointer(load_refused(document))
    assert problems == {
        "/actions/send_reminder/eligibility": (
            "eligibility rules need a target that is read before the change"
        )
    }


def test_duplicate_keys_are_refused_with_their_line(catalog):
    text = dump(demo_document()).replace(
        "  update_contact_email:\n    title:",
        "  update_contact_email:\n    title: x\n    title:",
        1,
    )
    error = load_refused(text)
    [problem] = error.problems
    assert "duplicate key 'title'" in problem.message
    assert problem.line == text.splitlines().index("    title: x") + 2


def test_problems_carry_the_line_of_the_mistake(catalog):
    document = demo_document()
    document["actions"]["update_contact_email"]["kind"] = "upsert"
    text = dump(document)
    error = load_refused(text)
    [problem] = error.problems
    assert problem.pointer == f"{ACTION}/kind"
    assert text.splitlines()[problem.line - 1].strip() == "kind: upsert"
    assert str(problem).startswith(f"line {problem.line}: {ACTION}/kind: ")


def test_class_defaults_set_approvers_ttl_and_grant_eligibility(catalog):
    specs = {name: action.spec for name, action in catalog.items()}
    assert specs["delete_contact"].approval.approvers == 2
    assert specs["update_contact_email"].approval.approvers == 1
    assert specs["delete_contact"].approval.approval_ttl <= 300
    assert specs["send_reminder"].approval.session_grant is False
    assert specs["update_contact_email"].approval.session_grant is False


def test_session_grant_can_be_allowed_for_a_reversible_action(catalog, settings):
    definition = dict(catalog["update_contact_email"].definition)
    definition["approval"] = {"session_grant": True}
    assert ActionSpec.from_definition("x", definition).approval.session_grant is True
    definition["consequence_class"] = "external"
    # Even a definition that bypassed the loader cannot grant it.
    assert ActionSpec.from_definition("x", definition).approval.session_grant is False


def test_the_refused_file_error_lists_every_problem(catalog):
    document = demo_document()
    document["actions"]["update_contact_email"]["card"]["effect"] = ""
    del document["actions"]["send_reminder"]["input_schema"]["properties"]["message"]["maxLength"]
    with pytest.raises(CatalogError) as info:
        load_catalog(dump(document))
    assert len(info.value.problems) == 2


def test_yaml_aliases_are_refused(catalog):
    text = dump(demo_document()) + "extra: &a [1, 2]\nmore: *a\n"
    error = load_refused(text)
    assert "aliases are not allowed" in error.problems[0].message


def test_loading_a_file_never_confirms_an_imported_class(catalog):
    from actions.models import Action

    Action.objects.filter(name="replace_note").update(class_confirmed=False, enabled=False)
    document = demo_document()
    document["actions"]["replace_note"]["title"] = "Changed"
    with pytest.raises(CatalogError) as info:
        load_catalog(dump(document))
    assert info.value.problems[0].pointer == "/enabled"
    assert Action.objects.get(name="replace_note").title != "Changed"
    document["actions"]["replace_note"]["enabled"] = False
    load_catalog(dump(document))
    stored = Action.objects.get(name="replace_note")
    assert stored.title == "Changed" and stored.class_confirmed is False


def test_confirming_a_class_is_a_recorded_decision(catalog):
    from actions.catalog import action_confirm_class
    from actions.lib.models import AuditEvent
    from actions.models import Action

    Action.objects.filter(name="replace_note").update(class_confirmed=False, enabled=False)
    action = action_confirm_class(name="replace_note", actor="user:rita")
    assert action.class_confirmed is True
    assert AuditEvent.objects.filter(kind="action.class_confirmed", actor="user:rita").exists()
