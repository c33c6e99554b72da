"""The catalog's ``reviewers:`` section: ordered comparisons, validation at load (with
the rule's name and the reason, the rules in force left as they were), matching, the
requirement several rules give, and whether approvals meet it."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
import yaml
from django.contrib.auth.models import Group

from actions.catalog import CatalogError, load_catalog
from actions.export import export_catalog
from actions.lib.models import AuditEvent
from actions.models import DecisionRule
from actions.policy.reviewers import (
    plan_subject,
    requirement_assess,
    requirement_for,
    rule_matches,
    rules_in_force,
)
from actions.rules import as_decimal, rule_decides, rule_holds, rule_problem

BILLING = {"group": "billing-approvers", "count": 1}
LEADS = {"group": "support-leads", "count": 1}


def section(rules: dict, groups=("billing-approvers", "support-leads")) -> str:
    # JSON is YAML, and has no aliases (which a catalog refuses) for shared values.
    return json.dumps({"version": 1, "reviewers": {"groups": list(groups), "rules": rules}})


def invoices_rule(**extra) -> dict:
    return {"match": {"actions": ["send_invoice"]}, "any_of": [BILLING], **extra}


def refusal(text: str) -> dict[str, str]:
    before = list(DecisionRule.objects.values_list("name", "digest"))
    with pytest.raises(CatalogError) as info:
        load_catalog(text)
    assert list(DecisionRule.objects.values_list("name", "digest")) == before
    return {p.pointer: p.message for p in info.value.problems}


# --- ordered comparisons -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1000, Decimal("1000")),
        ("1000.01", Decimal("1000.01")),
        ("-3.5", Decimal("-3.5")),
        (0.1, Decimal("0.1")),
        (True, None),
        ("1,000.00", None),
        ("1e3", None),
        ("", None),
        (None, None),
        (float("nan"), None),
    ],
)
def test_numbers_and_decimal_strings_are_read_exactly(value, expected):
    assert as_decimal(value) == expected


def test_ordered_comparisons_compare_money_as_decimals():
    doc = {"amount": "1000.00", "count": 3}
    assert rule_holds({"pointer": "/amount", "at_least": "1000"}, doc, {})
    assert not rule_holds({"pointer": "/amount", "above": "1000"}, doc, {})
    assert rule_holds({"pointer": "/amount", "above": "999.999"}, doc, {})
    assert rule_holds({"pointer": "/amount", "at_most": 1000}, doc, {})
    assert not rule_holds({"pointer": "/amount", "below": "1000.00"}, doc, {})
    assert rule_holds({"pointer": "/count", "below": 3.5}, doc, {})
    # A float would say 0.1 + 0.2 > 0.3; decimals do not.
    assert not rule_holds({"pointer": "/x", "above": "0.3"}, {"x": "0.30"}, {})


def test_a_comparison_that_cannot_be_decided_says_so():
    assert rule_decides({"pointer": "/amount", "above": 5}, {}, {}) is None
    assert rule_decides({"pointer": "/amount", "above": 5}, {"amount": "lots"}, {}) is None
    assert rule_decides({"pointer": "/amount", "above": 5}, {"amount": True}, {}) is None
    # Scope rules refuse what they cannot decide.
    assert not rule_holds({"pointer": "/amount", "above": 5}, {"amount": "lots"}, {})


def test_a_malformed_comparison_is_named():
    assert rule_problem({"pointer": "/a", "above": "a lot"}) == (
        "above needs a number or a decimal string such as '1000.00'"
    )
    assert "exactly one of" in rule_problem({"pointer": "/a", "above": 1, "below": 2})


# --- loading -------------------------------------------------------------------------------


def test_the_section_loads_creates_declared_groups_and_is_audited(catalog):
    report = load_catalog(section({"invoices": invoices_rule()}))
    assert report.decision_rules == ["invoices"]
    assert sorted(report.groups_created) == ["billing-approvers", "support-leads"]
    assert Group.objects.get(name="billing-approvers").permissions.count() == 0
    assert [r["name"] for r in rules_in_force()] == ["invoices"]
    event = AuditEvent.objects.filter(kind="decision_rules.replaced").get()
    assert event.data["rules"] == ["invoices"]
    # Loading the same again changes nothing and records nothing.
    load_catalog(section({"invoices": invoices_rule()}))
    assert AuditEvent.objects.filter(kind="decision_rules.replaced").count() == 1


def test_a_file_without_the_section_leaves_the_rules_and_an_empty_one_clears_them(catalog):
    load_catalog(section({"invoices": invoices_rule()}))
    load_catalog(yaml.safe_dump({"version": 1, "connectors": {}}))
    assert DecisionRule.objects.count() == 1
    load_catalog(yaml.safe_dump({"version": 1, "reviewers": {}}))
    assert DecisionRule.objects.count() == 0


@pytest.mark.parametrize(
    ("rule", "pointer", "message"),
    [
        (
            {"match": {"actions": ["send_invoice"]}, "any_of": [{"group": "finance", "count": 1}]},
            "/reviewers/rules/bad/any_of/0/group",
            "rule 'bad': unknown group 'finance' (create it, or declare it in reviewers.groups)",
        ),
        (
            {"match": {"actions": ["send_invoices"]}, "any_of": [BILLING]},
            "/reviewers/rules/bad/match/actions/0",
            "rule 'bad': no action named 'send_invoices'",
        ),
        (
            {"match": {"connectors": ["crm"]}, "any_of": [BILLING]},
            "/reviewers/rules/bad/match/connectors/0",
            "rule 'bad': unknown connector 'crm'",
        ),
        (
            {
                "match": {
                    "actions": ["send_invoice"],
                    "input": [{"pointer": "/amount", "above": 1}],
                },
                "any_of": [BILLING],
            },
            "/reviewers/rules/bad/match/input/0/pointer",
            "rule 'bad': 'amount' is no input field of the actions it matches",
        ),
        (
            {
                "match": {"before": [{"pointer": "/amount", "above": "much"}]},
                "any_of": [BILLING],
            },
            "/reviewers/rules/bad/match/before/0",
            "rule 'bad': above needs a number or a decimal string such as '1000.00'",
        ),
        (
            {"any_of": [BILLING], "all_of": [LEADS]},
            "/reviewers/rules/bad",
            "rule 'bad': give exactly one of any_of or all_of",
        ),
        (
            {"all_of": [BILLING, {"group": "billing-approvers", "count": 2}]},
            "/reviewers/rules/bad/all_of/1/group",
            "rule 'bad': 'billing-approvers' is named twice",
        ),
    ],
)
def test_bad_rules_are_refused_with_the_rules_name_and_reason(catalog, rule, pointer, message):
    load_catalog(section({"good": invoices_rule()}))
    problems = refusal(
        section({"good": invoices_rule(), "bad": rule}, groups=["billing-approvers"])
    )
    assert problems == {pointer: message}
    assert [r["name"] for r in rules_in_force()] == ["good"]


def test_an_impossible_count_is_refused_by_the_schema(catalog):
    problems = refusal(section({"bad": {"any_of": [{"group": "support-leads", "count": 0}]}}))
    assert list(problems) == ["/reviewers/rules/bad/any_of/0/count"]
    problems = refusal(section({"bad": {"any_of": [{"group": "support-leads", "count": 21}]}}))
    assert list(problems) == ["/reviewers/rules/bad/any_of/0/count"]


def test_an_existing_group_needs_no_declaration(catalog):
    Group.objects.create(name="finance")
    rule = {"any_of": [{"group": "finance", "count": 1}]}
    assert load_catalog(section({"all": rule}, groups=[])).decision_rules == ["all"]


def test_the_export_carries_the_section_and_loads_back_unchanged(catalog):
    load_catalog(section({"invoices": invoices_rule(), "deletions": {"all_of": [LEADS, BILLING]}}))
    text = export_catalog()
    document = yaml.safe_load(text)
    assert document["reviewers"]["groups"] == ["billing-approvers", "support-leads"]
    assert set(document["reviewers"]["rules"]) == {"deletions", "invoices"}
    digests = dict(DecisionRule.objects.values_list("name", "digest"))
    events = AuditEvent.objects.filter(kind="decision_rules.replaced").count()
    load_catalog(text)
    assert dict(DecisionRule.objects.values_list("name", "digest")) == digests
    assert AuditEvent.objects.filter(kind="decision_rules.replaced").count() == events
    # A partial export has no rules: the actions they name may not be in it.
    assert "reviewers" not in yaml.safe_load(export_catalog(connectors=["demo"]))


def test_the_demo_catalogs_section_loads(db):
    from tests.conftest import DEMO_CATALOG

    report = load_catalog(
        DEMO_CATALOG.read_text(),
        base_urls={"demo": "http://127.0.0.1:1"},
        base_dir=DEMO_CATALOG.parent,
    )
    assert report.decision_rules == ["deleting-a-contact", "invoices-are-billings"]
    assert set(Group.objects.values_list("name", flat=True)) >= {
        "billing-approvers",
        "support-leads",
    }


# --- matching and combining ----------------------------------------------------------------


def subject(**overrides) -> dict:
    base = plan_subject(
        action="send_invoice",
        connector="demo",
        kind="update",
        consequence_class="external",
        before={"amount": "1250.00", "workspace": "ws-blue"},
        input={"invoice_id": "inv-1"},
    )
    return {**base, **overrides}


def test_a_rule_matches_by_action_connector_kind_class_and_comparisons():
    rule = {
        "name": "r",
        "match": {
            "actions": ["send_invoice"],
            "connectors": ["demo"],
            "kinds": ["update"],
            "consequence_classes": ["external"],
            "before": [{"pointer": "/amount", "above": "1000"}],
            "input": [{"pointer": "/invoice_id", "equals": "inv-1"}],
        },
        "any_of": [BILLING],
    }
    assert rule_matches(rule, subject())
    assert not rule_matches(rule, subject(action="update_invoice_memo"))
    assert not rule_matches(rule, subject(connector="crm"))
    assert not rule_matches(rule, subject(kind="delete"))
    assert not rule_matches(rule, subject(consequence_class="reversible"))
    assert not rule_matches(rule, subject(before={"amount": "999.99"}))
    assert not rule_matches(rule, subject(input={"invoice_id": "inv-2"}))
    # A field it cannot read: the rule applies (it asks more people, never fewer).
    assert rule_matches(rule, subject(before={"workspace": "ws-blue"}))
    assert rule_matches(rule, subject(before=None))


def test_matching_rules_combine_as_all_of_and_a_repeated_clause_counts_once():
    rules = [
        {"name": "b-invoices", "match": {"actions": ["send_invoice"]}, "any_of": [BILLING]},
        {
            "name": "a-large",
            "match": {"before": [{"pointer": "/amount", "above": 1000}]},
            "all_of": [LEADS, BILLING],
        },
        {"name": "c-other", "match": {"actions": ["delete_contact"]}, "any_of": [LEADS]},
    ]
    requirement = requirement_for(subject(), rules)
    assert requirement["rules"] == ["a-large", "b-invoices"]
    # billing-approvers is asked by both rules: one billing approver, not two.
    assert sorted(c["any_of"][0]["group"] for c in requirement["all_of"]) == [
        "billing-approvers",
        "support-leads",
    ]
    assert all(len(c["any_of"]) == 1 for c in requirement["all_of"])
    # The order rules are given in does not change the requirement (nor the fingerprint).
    assert requirement_for(subject(), list(reversed(rules))) == requirement
    assert requirement_for(subject(action="get_contact", before={}), rules[:1]) == {}


def test_one_person_fills_one_threshold_only():
    all_of = {"rules": ["r"], "all_of": [{"any_of": [BILLING]}, {"any_of": [LEADS]}]}
    both = ("ada", {"billing-approvers", "support-leads"})
    assert not requirement_assess(all_of, [both]).met
    assessment = requirement_assess(all_of, [both, ("bob", {"billing-approvers"})])
    assert assessment.met
    # Ada counts for the threshold Bob cannot fill.
    assert assessment.counted_for == {"ada": "support-leads", "bob": "billing-approvers"}
    assert not requirement_assess(all_of, [("bob", {"billing-approvers"})]).met


def test_any_of_is_one_lead_or_two_members():
    any_of = {
        "rules": ["r"],
        "all_of": [{"any_of": [LEADS, {"group": "billing-approvers", "count": 2}]}],
    }
    assert requirement_assess(any_of, [("a", {"support-leads"})]).met
    one = requirement_assess(any_of, [("a", {"billing-approvers"})])
    assert not one.met and one.filled == [[0, 1]]
    assert requirement_assess(
        any_of, [("a", {"billing-approvers"}), ("b", {"billing-approvers"})]
    ).met
    assert not requirement_assess(any_of, [("a", set())]).met


def test_the_documented_section_loads_beside_the_demo_catalog(catalog):
    from tests.actions.test_catalog_docs import block

    report = load_catalog("version: 1\n" + block("reviewers"), source="docs/catalog.md")
    assert report.decision_rules == [
        "deleting-a-contact",
        "for-contractors",
        "invoices-are-billings",
        "large-invoices",
    ]
    large = DecisionRule.objects.get(name="large-invoices").definition
    assert large["match"]["before"] == [{"pointer": "/amount", "above": "1000.00"}]
    assert (large["escalate_after"], large["escalate_to"]) == ("30m", "cfo-office")
    contractors = DecisionRule.objects.get(name="for-contractors").definition
    assert contractors["match"] == {"requester_groups": ["contractors"]}
