"""The catalog's ``policies:`` section and the actions' ``document:``: validated at load
against the catalog (each refusal with its line, the set in force unchanged), versioned
and audited, exported, compiled once per catalog generation, and shown in the admin."""

from __future__ import annotations

import io
import json
import os

import cedarpy
import pytest
import yaml
from django.core.management import call_command
from django.urls import reverse

from actions.catalog import CatalogError, load_catalog
from actions.export import export_catalog
from actions.lib.models import AuditEvent
from actions.models import Action, PolicyVersion
from actions.policy.engine import REVIEW, catalog_types, policy_evaluate
from actions.policy.schema import cedar_schema
from actions.policy.versions import MAX_DIFF_LINES, policies_in_force
from tests.actions.test_policy_engine import email
from tests.conftest import DEMO_CATALOG

INVOICE_SCOPE = 'action == Action::"send_invoice"'


def catalog_with(enforce: str = "", shadow: str | None = None, **section) -> str:
    """A catalog file holding only a policies: section, its Cedar inline as block text
    (JSON is YAML, but a block shows the lines as a person wrote them)."""
    lines = ["version: 1", "policies:"]
    for key, value in section.items():
        lines.append(f"  {key}: {json.dumps(value)}")
    for part, text in (("enforce", enforce), ("shadow", shadow)):
        if text is None:
            continue
        lines.append(f"  {part}:")
        lines.append("    - text: |")
        lines += [f"        {line}" if line else "" for line in text.splitlines()]
    return "\n".join(lines) + "\n"


def line_with(text: str, needle: str, occurrence: int = 1) -> int:
    found = [n for n, line in enumerate(text.splitlines(), start=1) if needle in line]
    return found[occurrence - 1]


@pytest.fixture(autouse=True)
def billing_approvers(db):
    """The group the demo's large-invoices policy names (made by its section too)."""
    from django.contrib.auth.models import Group

    Group.objects.get_or_create(name="billing-approvers")


def in_force() -> tuple[int, str]:
    current = PolicyVersion.objects.order_by("-number").first()
    return (current.number, current.hash) if current else (0, "")


def refused(text: str, **kwargs) -> list:
    before = in_force(), PolicyVersion.objects.count()
    with pytest.raises(CatalogError) as info:
        load_catalog(text, source="bad.yaml", **kwargs)
    assert (in_force(), PolicyVersion.objects.count()) == before
    return info.value.problems


# --- what the demo catalog loads ---------------------------------------------------------------


def test_the_demo_catalog_puts_its_three_policies_in_force(demo_policies):
    compiled = policies_in_force()
    assert compiled.problem == ""
    assert compiled.ids() == ["large-invoices", "routine-email", "vip-contacts-stay"]
    version = PolicyVersion.objects.get()
    assert version.number == compiled.version == 1
    assert version.policies == {
        "enforce": ["routine-email", "large-invoices", "vip-contacts-stay"],
        "shadow": [],
    }
    assert '@id("routine-email")' in version.enforce
    # The file's own text, comments and all, one file after the other.
    assert version.enforce.startswith("// A routine email change needs no one")


def test_the_generated_schema_types_the_demo_actions(demo_policies):
    types = catalog_types(dict(Action.objects.values_list("name", "definition")))
    schema = cedar_schema(types)[""]
    cedarpy.Schema.from_json_str(json.dumps({"": schema}))  # Cedar takes it
    agent = schema["entityTypes"]["Agent"]
    assert agent["tags"] == {"type": "String"}
    assert set(agent["shape"]["attributes"]) == {"name", "registrar", "on_behalf_of"}
    assert schema["entityTypes"]["Person"]["memberOfTypes"] == ["Group"]
    assert set(schema["entityTypes"]["Target"]["shape"]["attributes"]) == {"connector", "path"}
    actions = schema["actions"]
    assert actions["delete_contact"]["memberOf"] == [
        {"id": "class:irreversible"},
        {"id": "kind:delete"},
    ]
    assert {"class:observation", "kind:invoke"} <= set(actions)

    def context(name: str) -> dict:
        return actions[name]["appliesTo"]["context"]["attributes"]

    email_context = context("update_contact_email")
    assert set(email_context) == {
        "input",
        "before",
        "after",
        "lower",
        "changed",
        "deltas",
        "email_domains",
        "text",
        "rate",
        "time",
    }
    # What changed in a text document (actions/textdiff.py), on every action's context.
    assert {name: spec["type"] for name, spec in email_context["text"]["attributes"].items()} == {
        "is_text": "Boolean",
        "lines_added": "Long",
        "lines_removed": "Long",
        "added": "String",
        "removed": "String",
        "complete": "Boolean",
    }
    # The text fields lower-cased: strings (and sets of them) only, as required as they are.
    lower = email_context["lower"]["attributes"]
    assert set(lower) == {"input", "before", "after"}
    assert lower["input"]["attributes"] == {
        "contact_id": {"type": "String", "required": True},
        "email": {"type": "String", "required": True},
    }
    assert lower["before"]["attributes"]["tags"] == {
        "type": "Set",
        "element": {"type": "String"},
        "required": False,
    }
    assert "version" not in lower["before"]["attributes"]
    assert set(context("delete_contact")["lower"]["attributes"]) == {"input", "before"}
    before = email_context["before"]["attributes"]
    assert before["tags"] == {"type": "Set", "element": {"type": "String"}, "required": False}
    assert before["email"] == {"type": "String", "required": True}
    assert before["version"] == {"type": "Long", "required": False}
    assert set(email_context["email_domains"]["attributes"]) == {"/email"}
    assert email_context["input"]["attributes"]["email"] == {"type": "String", "required": True}
    invoice = context("send_invoice")
    assert invoice["before"]["attributes"]["amount"] == {
        "type": "Extension",
        "name": "decimal",
        "required": True,
    }
    assert set(invoice["deltas"]["attributes"]) == {"/amount", "/revision"}
    # What a kind has: a delete no after, a create no before, an invoke neither; an action
    # without a document has an empty one.
    assert "after" not in context("delete_contact") and "before" in context("delete_contact")
    assert "before" not in context("create_contact") and "after" in context("create_contact")
    assert not {"before", "after"} & set(context("send_reminder"))
    assert context("update_contact_phone")["before"]["attributes"] == {}
    assert context("send_reminder")["input"]["attributes"]["channel"]["type"] == "String"


# --- refusals, each with its line ----------------------------------------------------------

GOOD = """@id("keep")
forbid (principal, action == Action::"delete_contact", resource);
"""

REFUSALS = [
    (
        "syntax",
        '@id("broken")\npermit (principal, action, resource)\nwhen { context.rate.hour + };',
        "+ }",
        "syntax error: unexpected token `}`",
    ),
    (
        "missing-semicolon",
        '@id("a") @approve\npermit (principal, action == Action::"send_invoice", resource)\n'
        '@id("b") @approve\npermit (principal, action == Action::"send_invoice", resource);',
        '@id("b")',
        "syntax error: unexpected token `@` (does the policy before it end with `;`?)",
    ),
    (
        "unknown-field",
        '@id("typo") @require("billing-approvers")\n'
        f"permit (principal, {INVOICE_SCOPE}, resource)\n"
        'when { context.before.amont == "1" };',
        "amont",
        "policy typo: `context.before.amont` is no field of send_invoice's document",
    ),
    (
        "no-document",
        '@id("phone") @approve\n'
        'permit (principal, action == Action::"update_contact_phone", resource)\n'
        'when { context.before.workspace == "ws-blue" };',
        "workspace",
        "policy phone: update_contact_phone declares no document, so `context.before` has no "
        "fields: declare the target's shape under `document:` on update_contact_phone to use "
        "`context.before.workspace`",
    ),
    (
        "no-after",
        '@id("gone") forbid (principal, action == Action::"delete_contact", resource)\n'
        'when { context.after.name == "x" };',
        "context.after",
        "policy gone: delete_contact has no `context.after`: a delete leaves nothing",
    ),
    (
        "wrong-type",
        '@id("money-is-text") @require("billing-approvers")\n'
        f"permit (principal, {INVOICE_SCOPE}, resource)\n"
        'when { context.before.amount == "120.00" };',
        "context.before.amount ==",
        "policy money-is-text: the types String and decimal are not compatible, where the "
        "policy reads `context.before.amount` (column 8)",
    ),
    (
        "string-as-number",
        '@id("ids-are-text") @require("billing-approvers")\n'
        f"permit (principal, {INVOICE_SCOPE}, resource)\n"
        "when { context.input.invoice_id > 3 };",
        "context.input.invoice_id >",
        "policy ids-are-text: unexpected type: expected Long but saw String, where the policy "
        "reads `context.input.invoice_id` (column 8)",
    ),
    (
        "optional-field",
        '@id("vip") forbid (principal, action == Action::"delete_contact", resource)\n'
        'when { context.before.tags.contains("vip") };',
        "tags",
        "policy vip: `context.before.tags` may be absent: test it first "
        "(`context.before has tags && …`)",
    ),
    (
        "too-wide-a-scope",
        '@id("wide") forbid (principal, action, resource)\nwhen { context.input.email == "x" };',
        "email",
        "policy wide: `context.input.email` is no input field of delete_contact, get_contact, "
        "get_contact_phone, get_deployment, get_reminder and 6 more: name the actions that "
        "have it in the policy's scope",
    ),
    (
        "unknown-tag",
        '@id("team") forbid (principal, action == Action::"delete_contact", resource)\n'
        'when { principal.getTag("team") == "x" };',
        '@id("team")',
        'policy team: `principal.getTag("team")` may be absent: test it first '
        '(`principal.hasTag("team") && …`)',
    ),
    (
        "unknown-action",
        '@id("nope") forbid (principal, action == Action::"send_invoices", resource);',
        '@id("nope")',
        "policy nope: no action named send_invoices",
    ),
    (
        "missing-id",
        f"forbid (principal, {INVOICE_SCOPE}, resource);",
        INVOICE_SCOPE,
        '@id("a-name") is required: a lowercase slug, naming the policy wherever it decides',
    ),
    (
        "bad-id",
        '@id("Big Name") forbid (principal, action == Action::"delete_contact", resource);',
        "Big Name",
        '@id("Big Name") is not a lowercase slug (letters, digits, - and _)',
    ),
    (
        "duplicate-id",
        '@id("keep") forbid (principal, action == Action::"delete_contact", resource);',
        '@id("keep")',
        "policy keep: the id is used twice in the enforce set (first at line 1)",
    ),
    (
        "unknown-group",
        f'@id("sec") @require("2 of security")\npermit (principal, {INVOICE_SCOPE}, resource);',
        '@id("sec")',
        "policy sec: @require: unknown group 'security' (create it, or declare it in "
        "policies.groups or reviewers.groups)",
    ),
    (
        "impossible-count",
        f'@id("many") @require("21 of billing-approvers")\n'
        f"permit (principal, {INVOICE_SCOPE}, resource);",
        '@id("many")',
        "policy many: @require: a count is from 1 to 20, not 21",
    ),
    (
        "no-count",
        f'@id("none") @require("0 of billing-approvers")\n'
        f"permit (principal, {INVOICE_SCOPE}, resource);",
        '@id("none")',
        "policy none: @require: a count is from 1 to 20, not 0",
    ),
    (
        "two-argument-require",
        f'@id("two") @require("security", "1")\npermit (principal, {INVOICE_SCOPE}, resource);',
        '@id("two")',
        "syntax error: unexpected token `,` (an annotation holds one string: "
        '@require("2 of security"))',
    ),
    (
        "permit-says-nothing",
        f'@id("vague")\npermit (principal, {INVOICE_SCOPE}, resource);',
        '@id("vague")',
        "policy vague: a permit says what it allows: @approve (no person needed) or "
        '@require("group") (who must approve), exactly one of them',
    ),
    (
        "forbid-approves",
        '@id("odd") @approve forbid (principal, action == Action::"delete_contact", resource);',
        '@id("odd")',
        "policy odd: a forbid refuses: @approve is for permits",
    ),
    (
        "misspelt-shadow",
        f'@id("draft") @shadw @approve\npermit (principal, {INVOICE_SCOPE}, resource);',
        '@id("draft")',
        "policy draft: unknown annotation @shadw (known: @approve, @description, @id, "
        "@reason, @require, @shadow)",
    ),
]


@pytest.mark.parametrize(
    ("policy", "needle", "message"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_a_bad_policy_is_refused_with_its_line_and_the_set_in_force_stays(
    demo_policies, policy, needle, message
):
    text = catalog_with(GOOD + "\n" + policy)
    problems = refused(text)
    assert [(p.pointer, p.line, p.message) for p in problems] == [
        (
            "/policies/enforce/0/text",
            line_with(text, needle, 2 if needle == '@id("keep")' else 1),
            message,
        )
    ]
    assert policies_in_force().ids() == ["large-invoices", "routine-email", "vip-contacts-stay"]


def test_a_policy_file_is_refused_with_its_own_name_and_line(demo_policies, tmp_path):
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "money.cedar").write_text(
        "// Invoices\n\n"
        '@id("big") @require("billing-approvers")\n'
        f"permit (principal, {INVOICE_SCOPE}, resource)\n"
        'when { context.before.total.greaterThan(decimal("1000.0")) };\n'
    )
    text = "version: 1\npolicies:\n  enforce:\n    - file: policies/money.cedar\n"
    (problem,) = refused(text, base_dir=tmp_path)
    assert problem.pointer == "/policies/enforce/0/file"
    assert problem.line == 4
    assert problem.message == (
        "policies/money.cedar, line 5: policy big: `context.before.total` is no field of "
        "send_invoice's document"
    )
    assert str(problem).startswith("line 4: /policies/enforce/0/file: policies/money.cedar")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("policies/missing.cedar", "cannot read policies/missing.cedar: No such file or directory"),
        (
            "policies/../../etc/x.cedar",
            "a policy file is a .cedar file inside the catalog's directory",
        ),
        ("outside.cedar", "a policy file is a .cedar file inside the catalog's directory"),
    ],
)
def test_a_policy_file_must_be_readable_and_inside_the_catalogs_directory(
    demo_policies, tmp_path, name, message
):
    root = tmp_path / "catalog"
    root.mkdir()
    (tmp_path / "secret.cedar").write_text(GOOD)
    os.symlink(tmp_path / "secret.cedar", root / "outside.cedar")
    text = f"version: 1\npolicies:\n  enforce:\n    - file: {name}\n"
    (problem,) = refused(text, base_dir=root)
    assert (problem.pointer, problem.message) == ("/policies/enforce/0/file", message)


def test_files_need_the_catalogs_directory(demo_policies):
    (problem,) = refused("version: 1\npolicies:\n  enforce:\n    - file: policies/x.cedar\n")
    assert "load the catalog from its file" in problem.message


def test_groups_declared_beside_the_policies_are_made(demo_policies):
    policy = f'@id("sec") @require("2 of security")\npermit (principal, {INVOICE_SCOPE}, resource);'
    report = load_catalog(catalog_with(policy, groups=["security"]))
    assert report.groups_created == ["security"]
    assert report.policies == 2 and report.policies_changed


# --- the document -------------------------------------------------------------------------


def with_document(name: str, document) -> str:
    definition = Action.objects.get(name=name).definition
    return yaml.safe_dump({"version": 1, "actions": {name: {**definition, "document": document}}})


@pytest.mark.parametrize(
    ("action", "document", "pointer", "message"),
    [
        (
            "send_reminder",
            {"type": "object"},
            "/actions/send_reminder/document",
            "an invoke has no readable target: its input is what it sends",
        ),
        (
            "update_contact_phone",
            {"type": "array"},
            "/actions/update_contact_phone/document/type",
            "the target document is an object: type: object",
        ),
        (
            "update_contact_phone",
            {"type": "object", "properties": {"phone": {"type": ["string", "integer"]}}},
            "/actions/update_contact_phone/document/properties/phone",
            "no Cedar type: several types (string, integer) have no one Cedar type",
        ),
        (
            "update_contact_phone",
            {"type": "object", "properties": {"tags": {"type": "array"}}},
            "/actions/update_contact_phone/document/properties/tags",
            "no Cedar type: an array needs items with one type",
        ),
        (
            "update_contact_phone",
            {"type": "object", "properties": {"x": {"type": "nonsense"}}},
            "/actions/update_contact_phone/document",
            "not a valid JSON Schema: 'nonsense' is not valid under any of the given schemas",
        ),
    ],
)
def test_a_document_cedar_cannot_type_is_refused(demo_policies, action, document, pointer, message):
    problems = refused(with_document(action, document))
    assert {p.pointer: p.message for p in problems} == {pointer: message}


def test_a_document_is_part_of_the_definition_and_its_digest(demo_policies):
    action = Action.objects.get(name="update_contact_phone")
    document = {"type": "object", "properties": {"phone": {"type": "string"}}}
    report = load_catalog(with_document("update_contact_phone", document))
    assert report.updated == ["update_contact_phone"]
    changed = Action.objects.get(name="update_contact_phone")
    assert changed.version == action.version + 1 and changed.digest != action.digest
    assert changed.definition["document"] == document


def test_a_file_whose_actions_would_break_the_policies_in_force_is_refused(demo_policies):
    definition = dict(Action.objects.get(name="update_contact_email").definition)
    del definition["document"]
    text = yaml.safe_dump({"version": 1, "actions": {"update_contact_email": definition}})
    problems = refused(text)
    assert all(
        p.message.startswith(
            "the policies in force (version 1) would not hold with these actions: enforce, line "
        )
        for p in problems
    )
    assert any(
        "policy routine-email: update_contact_email declares no document" in p.message
        for p in problems
    )
    assert "document" in Action.objects.get(name="update_contact_email").definition
    # With a policies: section that fits them, the same actions load.
    text = yaml.safe_dump(
        {"version": 1, "actions": {"update_contact_email": definition}, "policies": {}}
    )
    assert load_catalog(text).updated == ["update_contact_email"]


# --- versions and the audit trail ----------------------------------------------------------

ROUTINE = (DEMO_CATALOG.parent / "policies" / "routine-email.cedar").read_text()


def test_a_change_makes_a_version_with_its_diff_and_an_audit_event(demo_policies):
    events = AuditEvent.objects.filter(kind="policy.changed")
    assert events.count() == 1  # the demo catalog's own
    first = PolicyVersion.objects.get()
    report = load_catalog(catalog_with(ROUTINE, shadow=GOOD), actor="user:rita")
    assert (report.policies, report.policies_changed) == (2, True)
    version = PolicyVersion.objects.get(number=2)
    assert version.created_by == "user:rita"
    assert version.enforce == ROUTINE and version.shadow == GOOD
    assert version.policies == {"enforce": ["routine-email"], "shadow": ["keep"]}
    assert "--- enforce (v1)\n+++ enforce (v2)\n" in version.diff
    assert '-@id("large-invoices")\n' in version.diff
    assert '+@id("keep")\n' in version.diff
    event = events.order_by("-id").first()
    assert event.actor == "user:rita"
    assert event.data == {
        "version": 2,
        "hash": version.hash,
        "previous_version": 1,
        "previous_hash": first.hash,
        "policies": {"enforce": ["routine-email"], "shadow": ["keep"]},
        "diff": version.diff,
    }
    assert len(version.hash) == 64 and version.hash != first.hash


def test_a_load_that_changes_nothing_makes_no_version(demo_policies):
    load_catalog(catalog_with(ROUTINE))
    count, events = (
        PolicyVersion.objects.count(),
        AuditEvent.objects.filter(kind="policy.changed").count(),
    )
    # The same text, with trailing spaces and blank lines around it: the same set.
    report = load_catalog(catalog_with("\n\n" + ROUTINE.replace(";", ";   ") + "\n\n"))
    assert (report.policies, report.policies_changed) == (2, False)
    # A file without the section leaves the set as it is.
    assert load_catalog("version: 1\n").policies is None
    assert PolicyVersion.objects.count() == count
    assert AuditEvent.objects.filter(kind="policy.changed").count() == events


def test_an_empty_section_removes_every_policy(demo_policies):
    report = load_catalog("version: 1\npolicies: {}\n")
    assert (report.policies, report.policies_changed) == (2, True)
    assert policies_in_force().empty
    assert policy_evaluate(email("g.hopper@example.test"), policies_in_force()).outcome == REVIEW


def test_the_diff_is_bounded(demo_policies):
    many = "".join(f"// line {n}\n" for n in range(2 * MAX_DIFF_LINES)) + GOOD
    load_catalog(catalog_with(many))
    diff = PolicyVersion.objects.get(number=2).diff
    assert len(diff.splitlines()) == MAX_DIFF_LINES + 1
    assert diff.endswith("more lines of the diff not shown\n")
    assert PolicyVersion.objects.get(number=2).enforce.count("// line") == 2 * MAX_DIFF_LINES


def test_the_compiled_set_follows_the_version_in_force(demo_policies):
    assert policies_in_force().version == 1
    load_catalog(catalog_with(GOOD, shadow=ROUTINE))
    compiled = policies_in_force()
    assert (compiled.version, compiled.ids(), compiled.ids("shadow")) == (
        2,
        ["keep"],
        ["routine-email"],
    )
    assert policies_in_force() is compiled  # one compilation per catalog generation


def test_a_set_in_force_that_no_longer_holds_sends_every_plan_to_a_person(demo_policies):
    # A change made around the loader (here, in the database itself).
    PolicyVersion.objects.filter(number=1).update(
        enforce='@id("x") forbid (principal, action == Action::"gone", resource);\n'
    )
    compiled = policies_in_force()
    assert compiled.problem.startswith("the policies in force (version 1) do not hold")
    result = policy_evaluate(email("g.hopper@example.test"), compiled)
    assert result.outcome == REVIEW
    assert "no action named gone" in result.errors[0].message


# --- export ---------------------------------------------------------------------------------


def test_the_export_inlines_the_policies_and_loads_back_unchanged(demo_policies):
    load_catalog(catalog_with(DEMO_POLICIES_TEXT, shadow=GOOD))
    text = export_catalog()
    document = yaml.safe_load(text)
    current = PolicyVersion.objects.order_by("-number").first()
    assert document["policies"] == {
        "groups": ["billing-approvers"],
        "enforce": [{"text": current.enforce}],
        "shadow": [{"text": current.shadow}],
    }
    assert "document" in document["actions"]["update_contact_email"]
    # The text stays readable: a literal block, line by line.
    assert "- text: |\n" in text and "  // A routine email change needs no one:" in text
    count = PolicyVersion.objects.count()
    report = load_catalog(text, source="export.yaml")
    assert (report.policies, report.policies_changed) == (current.number, False)
    assert PolicyVersion.objects.count() == count
    # A partial export has no policies: the actions they name may not be in it.
    assert "policies" not in yaml.safe_load(export_catalog(connectors=["demo"]))


DEMO_POLICIES_TEXT = "\n".join(
    (DEMO_CATALOG.parent / "policies" / name).read_text()
    for name in ("routine-email.cedar", "large-invoices.cedar", "vip-contacts.cedar")
)


def test_load_catalog_says_which_version_is_in_force(demo_policies, tmp_path):
    path = tmp_path / "catalog.yaml"
    path.write_text(catalog_with(GOOD))
    out = io.StringIO()
    call_command("load_catalog", str(path), stdout=out)
    assert "  policies: version 2 in force (new)" in out.getvalue()
    out = io.StringIO()
    call_command("load_catalog", str(path), stdout=out)
    assert "  policies: version 2 in force (unchanged)" in out.getvalue()


# --- the admin ------------------------------------------------------------------------------


def test_the_admin_shows_the_versions_with_their_diff_and_changes_none(client, demo_policies):
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.create_superuser(username="ada-admin", password="pw")
    client.force_login(admin)
    load_catalog(catalog_with(GOOD))
    listing = client.get(reverse("admin:actions_policyversion_changelist")).content.decode()
    assert "routine-email, large-invoices, vip-contacts-stay" in listing
    assert '<td class="field-enforced">keep</td>' in listing
    version = PolicyVersion.objects.get(number=2)
    page = client.get(reverse("admin:actions_policyversion_change", args=[version.pk]))
    assert page.status_code == 200
    body = page.content.decode()
    assert "+++ enforce (v2)" in body and "-@id(&quot;routine-email&quot;)" in body
    assert client.get(reverse("admin:actions_policyversion_add")).status_code == 403
    client.post(reverse("admin:actions_policyversion_change", args=[version.pk]), {"enforce": ""})
    assert PolicyVersion.objects.get(pk=version.pk).enforce == GOOD
    deleted = client.post(
        reverse("admin:actions_policyversion_delete", args=[version.pk]), {"post": "yes"}
    )
    assert deleted.status_code == 403
    assert PolicyVersion.objects.filter(pk=version.pk).exists()


def test_the_documented_section_loads_beside_the_demo_catalog(demo_policies):
    from tests.actions.test_catalog_docs import block

    report = load_catalog(
        "version: 1\n" + block("policies"), source="docs/catalog.md", base_dir=DEMO_CATALOG.parent
    )
    assert report.groups_created == ["security"]
    assert policies_in_force().ids() == ["no-vip-deletes", "routine-email"]


def test_a_new_action_is_checked_against_the_policies_whose_scope_reaches_it(demo_policies):
    irreversible = """@id("red-stays")
forbid (principal, action in Action::"class:irreversible", resource)
when { context.before.workspace == "ws-red" };
"""
    load_catalog(catalog_with(irreversible))
    erase = {**Action.objects.get(name="delete_contact").definition}
    del erase["document"]
    # A new irreversible action without a document: the policy could no longer read it.
    problems = refused(yaml.safe_dump({"version": 1, "actions": {"erase_contact": erase}}))
    assert any("erase_contact declares no document" in p.message for p in problems)
    assert not Action.objects.filter(name="erase_contact").exists()
    # A new reversible one no policy's scope reaches loads as it always did.
    fax = {**Action.objects.get(name="update_contact_phone").definition}
    report = load_catalog(yaml.safe_dump({"version": 1, "actions": {"update_contact_fax": fax}}))
    assert report.created == ["update_contact_fax"]
