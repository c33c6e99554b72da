"""A refused policy's problem points at the line it is on, not at the policy's first line,
and names what it is about: the field of a type error (with its column), the unknown
annotation, the unknown group. Cedar's validator gives no position: the loader finds it.
Through catalog loads, from inline text and from a ``.cedar`` file."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from tests.actions.test_policy_loading import catalog_with, refused

INVOICE = 'action == Action::"send_invoice"'


@pytest.fixture(autouse=True)
def groups(db):
    Group.objects.get_or_create(name="billing-approvers")


def only(problems) -> tuple[int | None, str]:
    (problem,) = problems
    return problem.line, problem.message


def catalog_line(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), start=1) if needle in line)


def test_a_type_error_names_the_field_its_line_and_column(demo_policies):
    policy = (
        '@id("ids-are-text")\n'
        '@require("billing-approvers")\n'
        f"permit (principal, {INVOICE}, resource)\n"
        "when {\n"
        '  context.input.invoice_id like "inv-*" &&\n'
        '  context.before.amount.greaterThan(decimal("10.00")) &&\n'
        "      context.input.invoice_id > 3\n"
        "};"
    )
    text = catalog_with(policy)
    # The field is read twice; only the comparison with a number is wrong.
    assert only(refused(text)) == (
        catalog_line(text, "context.input.invoice_id > 3"),
        "policy ids-are-text: unexpected type: expected Long but saw String, where the policy "
        "reads `context.input.invoice_id` (column 7)",
    )


def test_two_type_errors_in_one_policy_are_each_placed(demo_policies):
    policy = (
        '@id("two-wrongs") @require("billing-approvers")\n'
        f"permit (principal, {INVOICE}, resource)\n"
        "when {\n"
        "  context.input.invoice_id > 3 ||\n"
        '  context.before.amount == "120.00"\n'
        "};"
    )
    text = catalog_with(policy)
    problems = sorted((p.line, p.message) for p in refused(text))
    assert problems == [
        (
            catalog_line(text, "invoice_id > 3"),
            "policy two-wrongs: unexpected type: expected Long but saw String, where the "
            "policy reads `context.input.invoice_id` (column 3)",
        ),
        (
            catalog_line(text, 'amount == "120.00"'),
            "policy two-wrongs: the types String and decimal are not compatible, where the "
            "policy reads `context.before.amount` (column 3)",
        ),
    ]


def test_a_type_error_in_a_field_written_with_brackets_is_found(demo_policies):
    policy = (
        '@id("brackets") @require("billing-approvers")\n'
        f"permit (principal, {INVOICE}, resource)\n"
        "when {\n"
        '  // context.input["invoice_id"] > 3 in a comment is not the code\n'
        '  context["input"]["invoice_id"] > 3\n'
        "};"
    )
    text = catalog_with(policy)
    assert only(refused(text)) == (
        catalog_line(text, '  context["input"]["invoice_id"] > 3'),
        "policy brackets: unexpected type: expected Long but saw String, where the policy "
        "reads `context.input.invoice_id` (column 3)",
    )


def test_an_unknown_annotation_points_at_its_own_line(demo_policies):
    policy = (
        '@id("draft")\n'
        '@description("tried in shadow first")\n'
        "@shadw\n"
        "@approve\n"
        f"permit (principal, {INVOICE}, resource);"
    )
    text = catalog_with(policy)
    assert only(refused(text)) == (
        catalog_line(text, "@shadw"),
        "policy draft: unknown annotation @shadw (known: @approve, @description, @id, "
        "@reason, @require, @shadow)",
    )


def test_two_unknown_annotations_are_each_placed(demo_policies):
    policy = f'@id("odd")\n@approve\n@owner("x")\n@shadw\npermit (principal, {INVOICE}, resource);'
    text = catalog_with(policy)
    assert sorted((p.line, p.message.split(" (")[0]) for p in refused(text)) == [
        (catalog_line(text, "@owner"), "policy odd: unknown annotation @owner"),
        (catalog_line(text, "@shadw"), "policy odd: unknown annotation @shadw"),
    ]


def test_an_unknown_group_points_at_the_require_naming_it(demo_policies):
    policy = (
        '@id("ask-billing")\n'
        '@description("large invoices")\n'
        '@require("1 of billing-approvers or 2 of billing-aprovers")\n'
        f"permit (principal, {INVOICE}, resource)\n"
        'when { context.before.amount.greaterThan(decimal("100.00")) };'
    )
    text = catalog_with(policy)
    assert only(refused(text)) == (
        catalog_line(text, "billing-aprovers"),
        "policy ask-billing: @require: unknown group 'billing-aprovers' (create it, or "
        "declare it in policies.groups or reviewers.groups)",
    )


def test_a_cedar_files_problems_are_placed_in_that_file(demo_policies, tmp_path):
    (tmp_path / "invoices.cedar").write_text(
        "// Invoices\n"
        '@id("big")\n'
        '@require("billing-approvers")\n'
        f"permit (principal, {INVOICE}, resource)\n"
        "when {\n"
        "  context.input.invoice_id > 3\n"
        "};\n"
        "\n"
        '@id("sec")\n'
        "@approve\n"
        '@owner("me")\n'
        f"permit (principal, {INVOICE}, resource);\n"
    )
    text = "version: 1\npolicies:\n  enforce:\n    - file: invoices.cedar\n"
    problems = refused(text, base_dir=tmp_path)
    assert sorted(p.message.split(": policy")[0] for p in problems) == [
        "invoices.cedar, line 11",
        "invoices.cedar, line 6",
    ]
    assert any("`context.input.invoice_id` (column 3)" in p.message for p in problems)


def test_statements_split_at_semicolons_outside_comments_and_strings():
    from actions.policy.statements import split_statements

    text = (
        "// a comment; with a semicolon\n"
        'permit (principal, action, resource) when { context.input.memo == "a;b" };\n'
        "forbid (principal, action, resource); // trailing; comment\n"
        "permit (principal, action, resource)"
    )
    found = split_statements(text)
    assert [s.line for s in found] == [2, 3, 4]
    assert found[0].text.endswith('"a;b" };') and found[1].text.startswith("forbid")
    assert found[2].text == "permit (principal, action, resource)"
