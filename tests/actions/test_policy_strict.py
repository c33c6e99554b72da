"""What a policy sees is derived from exactly what is written (actions/policy/engine.py):
an e-mail's domain from the strict parse of the address, A-Z lower-cased and nothing
else; a value that does not parse gives no attribute and keeps every policy from
approving the plan; the text fields lower-cased in ``context.lower``, because Cedar's
``like`` and ``==`` are case-sensitive."""

from __future__ import annotations

import pytest

from actions.policy.engine import APPROVE, FLOOR_ERRORS, REFUSE, REVIEW
from actions.policy.engine import policy_evaluate as evaluate
from actions.policy.requests import plan_request
from tests.actions.test_policy_engine import (
    DEMO_POLICIES,
    GRACE,
    INVOICE,
    PlanFacts,
    compile_,
    email,
    facts,
    policy,
)

KAT = {**GRACE, "id": "c-2001", "name": "Kat", "email": "kat@kit.example"}
MEMO = 'action == Action::"update_invoice_memo"'


@pytest.fixture(scope="module")
def demo():
    return compile_(DEMO_POLICIES)


def raw_email(to: str, before=GRACE) -> PlanFacts:
    """A plan whose after holds ``to`` exactly, as if no input check had run (a plan
    stored before this check, a backtest, a draft's cases)."""
    return PlanFacts(
        action="update_contact_email",
        agent="support-bot",
        target={"connector": "demo", "path": f"/contacts/{before['id']}"},
        input={"contact_id": before["id"], "email": to},
        before=before,
        after={**before, "email": to},
        changes=[{"path": "/email", "before": before["email"], "after": to}],
        now=facts().now,
    )


def domains(plan: PlanFacts, demo) -> dict:
    request, _ = plan_request(plan, demo.types[plan.action])
    return request["context"]["email_domains"]["/email"]


CRAFTED = [
    "grace@evil.example@example.test",
    "grace@evil.example\n@example.test",
    "grace@example.test ",
    "grace@example.test\t",
    " grace@example.test",
    "grace@EXAMPLE.test\u200b",
    "grace@\uff45xample.test",
    "grace@example.test\x00",
    "grace@xn--zz.example.test",
]


@pytest.mark.parametrize("to", CRAFTED, ids=range(len(CRAFTED)))
def test_a_crafted_after_gives_no_domain_and_no_yes(demo, to):
    plan = raw_email(to)
    assert "after" not in domains(plan, demo)
    result = evaluate(plan, demo)
    assert result.outcome == REVIEW
    assert result.policies == ()
    # It is an error of the plan's evaluation, said without the value.
    assert [e.policy for e in result.errors] == [""]
    message = result.errors[0].message
    assert message == (
        "/after/email is not an e-mail address that parses strictly, so the policies get no "
        "domain for it"
    )
    assert to.strip() not in message and "evil" not in message


def test_the_kelvin_sign_is_no_letter_k(demo):
    # A stored address at kit.example, and a crafted one with a Kelvin sign: Python's
    # lower-casing makes them equal; the strict parse does not parse the second at all.
    kat = raw_email("kat@\u212ait.example", before=KAT)
    assert "\u212ait.example".lower() == "kit.example"
    assert domains(kat, demo) == {"before": "kit.example"}
    assert evaluate(kat, demo).outcome == REVIEW
    # The same the other way round: a Kelvin sign in the address as read.
    stored = raw_email("kat@kit.example", before={**KAT, "email": "kat@\u212ait.example"})
    assert domains(stored, demo) == {"after": "kit.example"}
    assert evaluate(stored, demo).outcome == REVIEW


def test_a_crafted_stored_address_gives_no_domain_and_no_yes(demo):
    # "Everything after the last @" named kit.example here.
    plan = raw_email("kat@kit.example", before={**KAT, "email": "kat@evil.example@kit.example"})
    assert domains(plan, demo) == {"after": "kit.example"}
    result = evaluate(plan, demo)
    assert result.outcome == REVIEW
    assert result.errors[0].message.startswith("/before/email is not an e-mail address")


def test_the_domain_compared_is_the_written_one_with_only_ascii_case_folded(demo):
    assert domains(email("Grace@EXAMPLE.Test"), demo) == {
        "before": "example.test",
        "after": "example.test",
    }
    assert evaluate(email("Grace@EXAMPLE.Test"), demo).outcome == APPROVE
    # An internationalized domain is compared as written: the U-label and its A-label
    # are different strings, so the policy does not equate them (a person decides).
    bucher = {**GRACE, "email": "grace@b\u00fccher.example"}
    assert domains(email("g@B\u00fccher.example", before=bucher), demo) == {
        "before": "b\u00fccher.example",
        "after": "b\u00fccher.example",
    }
    assert evaluate(email("g@B\u00fccher.example", before=bucher), demo).outcome == APPROVE
    assert evaluate(email("g@xn--bcher-kva.example", before=bucher), demo).outcome == REVIEW
    # Another script is another domain.
    assert evaluate(email("grace@\u0435xample.test"), demo).outcome == REVIEW


def test_an_unparsable_value_keeps_even_a_policy_that_does_not_read_it_from_approving():
    # The derived attribute is missing; a policy that approves without reading it does
    # not approve a plan some of whose values could not be read strictly.
    compiled = compile_(policy('@id("all-email") @approve'))
    assert evaluate(email("g.hopper@example.test"), compiled).outcome == APPROVE
    crafted = raw_email("grace@evil.example@example.test")
    result = evaluate(crafted, compiled)
    assert result.outcome == REVIEW
    assert result.floor == FLOOR_ERRORS
    assert result.matched == ("all-email",)


def test_a_forbid_still_refuses_a_plan_with_an_unparsable_value():
    compiled = compile_(
        policy('@id("no-evil") forbid', when='context.lower.after.email like "*evil*"')
        + policy('@id("all-email") @approve')
    )
    result = evaluate(raw_email("grace@EVIL.example@example.test"), compiled)
    assert result.outcome == REFUSE
    assert result.policies == ("no-evil",)


# --- context.lower ------------------------------------------------------------------------


def memo_plan(memo: str) -> PlanFacts:
    return facts("update_invoice_memo", {"invoice_id": "inv-2001", "memo": memo}, {**INVOICE})


@pytest.mark.parametrize("memo", ["refund please", "Refund please", "REFUND", "a ReFuNd"])
def test_like_is_case_sensitive_and_lower_is_not(memo):
    exact = compile_(policy('@id("no-refunds") forbid', MEMO, 'context.input.memo like "*refund*"'))
    lowered = compile_(
        policy('@id("no-refunds") forbid', MEMO, 'context.lower.input.memo like "*refund*"')
    )
    assert evaluate(memo_plan(memo), lowered).outcome == REFUSE
    assert (evaluate(memo_plan(memo), exact).outcome == REFUSE) == (memo == "refund please")


def test_lower_holds_exactly_the_written_text_lower_cased(demo):
    plan = memo_plan("R\u00c9SUM\u00c9 Stra\u00dfe \u0130stanbul")
    request, _ = plan_request(plan, demo.types["update_invoice_memo"])
    lower = request["context"]["lower"]
    assert lower["input"] == {
        "invoice_id": "inv-2001",
        "memo": "r\u00e9sum\u00e9 stra\u00dfe i\u0307stanbul",  # Unicode lower-casing, no folding
    }
    assert request["context"]["input"]["memo"] == "R\u00c9SUM\u00c9 Stra\u00dfe \u0130stanbul"
    # The action declares no document: its before and after have no fields to lower.
    assert lower["before"] == lower["after"] == {}


def test_lower_covers_the_documents_text_and_sets_of_text(demo):
    vip = {**GRACE, "tags": ["VIP"], "name": "Grace HOPPER"}
    request, _ = plan_request(
        email("g.hopper@example.test", before=vip), demo.types["update_contact_email"]
    )
    lower = request["context"]["lower"]
    assert lower["before"]["tags"] == ["vip"]
    assert lower["before"]["name"] == "grace hopper"
    assert "version" not in lower["before"]
    compiled = compile_(
        policy(
            '@id("vips-to-people") forbid',
            when='context.lower.before has tags && context.lower.before.tags.contains("vip")',
        )
    )
    assert evaluate(email("g.hopper@example.test", before=vip), compiled).outcome == REFUSE
    assert evaluate(email("g.hopper@example.test"), compiled).outcome != REFUSE


# --- policy cases ---------------------------------------------------------------------------


def test_a_case_whose_input_the_action_would_refuse_is_refused_with_the_reason():
    from actions.policy.cases import CaseError, cases_read
    from tests.actions.test_policy_engine import ACTIONS

    case = {
        "action": "update_contact_email",
        "input": {"contact_id": "c-1002", "email": "grace@example.test\t"},
        "before": GRACE,
        "expect": "approve",
    }
    with pytest.raises(CaseError) as info:
        cases_read({"cases": [case]}, actions=ACTIONS)
    assert str(info.value) == (
        "case 1: input/email: not a valid e-mail address: it contains whitespace (U+0009) "
        "(the action would refuse it)"
    )
    case["input"]["email"] = "grace@example.test"
    assert cases_read({"cases": [case]}, actions=ACTIONS)[0].facts.input["email"] == (
        "grace@example.test"
    )


def test_the_docs_example_of_lower_compiles_and_refuses_any_case():
    import re

    from tests.conftest import ROOT

    text = (ROOT / "docs" / "policy.md").read_text()
    section = text.split("### Case: `like` is case-sensitive", 1)[1]
    block = re.search(r"```cedar\n(.*?)\n```", section, re.DOTALL).group(1)
    compiled = compile_(block)
    result = evaluate(memo_plan("Refund please"), compiled)
    assert result.outcome == REFUSE and result.policies == ("no-refunds",)
    vip = {**GRACE, "tags": ["Vip"]}
    deleting = facts("delete_contact", {"contact_id": "c-1002"}, vip)
    assert evaluate(deleting, compiled).outcome == REFUSE


def test_a_case_takes_its_input_as_a_submission_does():
    from actions.policy.cases import CaseError, cases_read
    from tests.actions.test_policy_engine import ACTIONS

    # In normal form, checked, and a format field as written: the Kelvin sign is refused
    # as the agent API and MCP refuse it; text elsewhere is put in normal form.
    case = {
        "action": "update_invoice_memo",
        "input": {"invoice_id": "inv-2001", "memo": "cafe\u0301"},
        "before": INVOICE,
        "expect": "review",
    }
    (read,) = cases_read({"cases": [case]}, actions=ACTIONS)
    assert read.facts.input["memo"] == "caf\u00e9"
    case = {
        "action": "update_contact_email",
        "input": {"contact_id": "c-2001", "email": "kat@\u212ait.example"},
        "before": KAT,
        "expect": "approve",
    }
    with pytest.raises(CaseError, match=r"input/email: .*Kelvin sign"):
        cases_read({"cases": [case]}, actions=ACTIONS)
    case["input"]["email"] = float("nan")
    with pytest.raises(CaseError, match=r"input/email: non-finite number"):
        cases_read({"cases": [case]}, actions=ACTIONS)
