"""``manage.py policy_test``: the demo's policies pass their own cases (so CI runs them),
a case that fails fails the command, and a malformed cases file is refused with the
case and the reason."""

from __future__ import annotations

import io
import json

import pytest
import yaml
from django.core.management import CommandError, call_command

from tests.conftest import DEMO_CATALOG

CASES = DEMO_CATALOG.parent / "policies" / "tests.yaml"
POLICIES = sorted(str(p) for p in (DEMO_CATALOG.parent / "policies").glob("*.cedar"))


def run(*args) -> str:
    out = io.StringIO()
    call_command("policy_test", *map(str, args), stdout=out)
    return out.getvalue()


def test_the_demo_policies_pass_their_cases_from_the_catalog_file(db):
    from django.contrib.auth.models import Group

    Group.objects.create(name="billing-approvers")
    output = run(CASES, "--catalog", DEMO_CATALOG)
    lines = output.splitlines()
    total = len(yaml.safe_load(CASES.read_text())["cases"])
    assert lines[-1] == f"{total} cases: {total} passed, 0 failed"
    assert lines[0] == (
        "ok     1 a same-domain change on a plain contact needs no one: approve (routine-email)"
    )
    assert any("refuse (vip-contacts-stay)" in line for line in lines)
    assert any("review (large-invoices)" in line for line in lines)


def test_the_policies_in_force_and_cedar_files_pass_them_too(demo_policies):
    assert run(CASES).splitlines()[-1].endswith("passed, 0 failed")
    assert run(CASES, "--policies", *POLICIES).splitlines()[-1].endswith("passed, 0 failed")


def write_cases(tmp_path, cases) -> str:
    path = tmp_path / "cases.yaml"
    # JSON is YAML, without the aliases a catalog's loader refuses (the cases share values).
    path.write_text(json.dumps({"cases": cases}))
    return path


GRACE = {
    "id": "c-1002",
    "name": "Grace Hopper",
    "email": "grace@example.test",
    "workspace": "ws-blue",
    "tags": [],
}


def test_a_failing_case_fails_the_command(demo_policies, tmp_path):
    path = write_cases(
        tmp_path,
        [
            {
                "name": "routine",
                "action": "update_contact_email",
                "input": {"contact_id": "c-1002", "email": "g@example.test"},
                "before": GRACE,
                "expect": "approve",
            },
            {
                "name": "wrongly expected",
                "action": "update_contact_email",
                "input": {"contact_id": "c-1002", "email": "g@example.test"},
                "before": GRACE,
                "expect": "review",
                "require": ["support-leads"],
            },
        ],
    )
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"^2 cases: 1 passed, 1 failed$"):
        call_command("policy_test", str(path), stdout=out)
    assert out.getvalue().splitlines() == [
        "ok     1 routine: approve (routine-email)",
        "FAIL   2 wrongly expected: expected review, got approve; expected to require "
        "support-leads, got no group",
    ]


def test_a_case_sees_time_rate_agent_and_requester(demo_policies, tmp_path):
    policy = tmp_path / "hours.cedar"
    policy.write_text(
        '@id("hours") @approve\n'
        'permit (principal, action == Action::"update_contact_email", resource)\n'
        'when { context.time.weekday == "sat" && context.rate.day < 5 &&\n'
        '       principal.hasTag("team") && principal.getTag("team") == "support" };\n'
        '@id("leads") @require("support-leads")\n'
        'permit (principal, action == Action::"update_contact_email", resource)\n'
        'when { principal has on_behalf_of && principal.on_behalf_of in Group::"support-leads" };\n'
    )
    base = {
        "action": "update_contact_email",
        "input": {"contact_id": "c-1002", "email": "g@other.example"},
        "before": GRACE,
        "agent": {"name": "bot", "attributes": {"team": "support"}},
    }
    path = write_cases(
        tmp_path,
        [
            {**base, "at": "2026-01-10T10:00:00+00:00", "expect": "approve"},
            {**base, "at": "2026-01-10T10:00:00+00:00", "rate": {"day": 5}, "expect": "review"},
            {**base, "expect": "review"},  # the default time is a Monday
            {
                **base,
                "at": "2026-01-10T10:00:00Z",
                "requester": {"groups": ["support-leads"]},
                "expect": "review",
                "policies": ["leads"],
                "require": ["support-leads"],
            },
        ],
    )
    assert run(path, "--policies", policy).splitlines()[-1] == "4 cases: 4 passed, 0 failed"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            {"action": "send_invoices", "input": {}, "expect": "review"},
            "no action named 'send_invoices'",
        ),
        (
            {
                "action": "send_invoice",
                "input": {"invoice_id": "x"},
                "before": {},
                "expect": "review",
            },
            "input/invoice_id: 'x' does not match '^inv-[0-9]{1,10}$' (the action would refuse it)",
        ),
        (
            {"action": "send_invoice", "input": {"invoice_id": "inv-1"}, "expect": "review"},
            "before: an update reads its target: give the target as read",
        ),
        (
            {
                "action": "send_reminder",
                "input": {
                    "customer_id": "cus-1",
                    "channel": "sms",
                    "send_at": "2026-01-05T10:00:00Z",
                    "message": "hi",
                },
                "before": {},
                "expect": "review",
            },
            "before: an invoke reads nothing before the change",
        ),
        (
            {
                "action": "delete_contact",
                "input": {"contact_id": "c-1"},
                "before": {},
                "expect": "no",
            },
            "expect: one of refuse, approve, review",
        ),
        ({"action": "delete_contact", "expect": "review"}, "input is required"),
        (
            {
                "action": "delete_contact",
                "input": {"contact_id": "c-1"},
                "before": {},
                "expect": "review",
                "at": "monday",
            },
            "at: a date and time, such as 2026-01-05T10:30:00+00:00",
        ),
        (
            {
                "action": "delete_contact",
                "input": {"contact_id": "c-1"},
                "before": {},
                "expect": "review",
                "rate": {"hour": -1},
            },
            "rate.hour: a count of plans (0 or more)",
        ),
        (
            {
                "action": "delete_contact",
                "input": {"contact_id": "c-1"},
                "before": {},
                "expect": "review",
                "outcome": "x",
            },
            "unknown key 'outcome' (known: action, agent, at, before, expect, input, name, "
            "policies, rate, requester, require)",
        ),
    ],
)
def test_a_malformed_case_is_refused_with_its_number_and_reason(
    demo_policies, tmp_path, case, message
):
    good = {
        "action": "delete_contact",
        "input": {"contact_id": "c-1002"},
        "before": GRACE,
        "expect": "review",
    }
    path = write_cases(tmp_path, [good, case])
    with pytest.raises(CommandError) as info:
        run(path)
    assert str(info.value) == f"{path}: case 2: {message}"


def test_a_malformed_file_or_policy_is_refused_without_a_trace(demo_policies, tmp_path):
    path = tmp_path / "cases.yaml"
    path.write_text("cases: [unclosed\n")
    with pytest.raises(CommandError, match=r"not valid YAML at line 2"):
        run(path)
    path.write_text("- a list\n")
    with pytest.raises(CommandError, match="the file must hold a mapping"):
        run(path)
    path.write_text("cases: []\n")
    with pytest.raises(CommandError, match="cases: a non-empty list"):
        run(path)
    bad = tmp_path / "bad.cedar"
    bad.write_text('@id("x")\nforbid (principal, action == Action::"nope", resource);\n')
    with pytest.raises(CommandError, match=r"bad.cedar, line 2: policy x: no action named nope"):
        run(CASES, "--policies", bad)
    with pytest.raises(CommandError, match="cannot read"):
        run(tmp_path / "missing.yaml")
