"""Policies over a text document's change (context.text, actions/textdiff.py): the lines
added and removed, counted and given as text, bounded; a plan of a text is not a misfit
of its empty document; the backtest rebuilds the same context from the stored plan."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import yaml

from actions.policy.engine import (
    APPROVE,
    REFUSE,
    REVIEW,
    PlanFacts,
    PolicySetInvalid,
    policies_compile,
    policy_evaluate,
)
from actions.policy.requests import plan_request
from actions.policy.schema import action_types
from actions.preview import diff
from actions.textdiff import MAX_POLICY_TEXT_BYTES
from tests.conftest import DEMO_CATALOG

ACTIONS = yaml.safe_load(DEMO_CATALOG.read_text())["actions"]
NOTE = 'action == Action::"replace_note"'
MONDAY_NOON = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)

NO_BIG_DELETIONS = f"""
@id("no-big-deletions")
@reason("an agent does not delete more than ten lines of a file")
forbid (principal, {NOTE}, resource) when {{ context.text.lines_removed > 10 }};

@id("small-edits")
@approve
permit (principal, {NOTE}, resource)
when {{ context.text.is_text && context.text.lines_removed <= 10 &&
        !(context.text.added like "*password*") }};
"""


def text_plan(before: str | None, after: str | None, action: str = "replace_note") -> PlanFacts:
    return PlanFacts(
        action=action,
        agent="files-bot",
        target={"connector": "demo", "path": "/notes/n-1"},
        input={"note_id": "n-1", "title": "t", "body": "b"},
        before=before,
        after=after,
        changes=diff(before, after),
        now=MONDAY_NOON,
    )


def lines(n: int, word: str = "line") -> str:
    return "".join(f"{word} {i}\n" for i in range(n))


@pytest.fixture(scope="module")
def policies():
    return policies_compile(enforce=NO_BIG_DELETIONS, actions=ACTIONS)


def test_a_plan_removing_more_than_ten_lines_is_refused(policies):
    result = policy_evaluate(text_plan(lines(40), lines(40)[: len("line 0\n") * 10]), policies)
    assert result.outcome == REFUSE
    assert result.policies == ("no-big-deletions",)
    assert "ten lines" in result.reason


def test_a_small_edit_is_approved(policies):
    before = lines(40)
    after = before.replace("line 7\n", "line seven\n")
    result = policy_evaluate(text_plan(before, after), policies)
    assert (result.outcome, result.policies, result.errors) == (APPROVE, ("small-edits",), ())


def test_the_added_lines_are_text_the_policy_reads(policies):
    result = policy_evaluate(text_plan("a\n", "a\npassword = hunter2\n"), policies)
    assert result.outcome == REVIEW


def test_a_json_plan_has_an_empty_text(policies):
    before = {"id": "n-1", "title": "t", "body": "old"}
    after = {"id": "n-1", "title": "t", "body": "new"}
    request, _ = plan_request(
        text_plan(before, after), action_types("replace_note", ACTIONS["replace_note"])
    )
    assert request["context"]["text"] == {
        "is_text": False,
        "lines_added": 0,
        "lines_removed": 0,
        "added": "",
        "removed": "",
        "complete": True,
    }
    assert policy_evaluate(text_plan(before, after), policies).outcome == REVIEW


def test_the_context_of_a_text_is_bounded_and_its_document_empty():
    types = action_types("replace_note", ACTIONS["replace_note"])
    request, _ = plan_request(text_plan("x\n" * 5000, "y" * 300_000 + "\n"), types)
    context = request["context"]
    assert context["before"] == {} and context["after"] == {}
    assert context["text"]["lines_removed"] == 5000 and context["text"]["lines_added"] == 1
    assert len(context["text"]["added"].encode()) <= MAX_POLICY_TEXT_BYTES
    assert len(context["text"]["removed"].encode()) <= MAX_POLICY_TEXT_BYTES
    assert context["text"]["complete"] is False


def test_a_text_created_or_deleted_counts_every_line(policies):
    created = text_plan(None, lines(3))
    types = action_types("replace_note", ACTIONS["replace_note"])
    assert plan_request(created, types)[0]["context"]["text"]["lines_added"] == 3
    assert policy_evaluate(text_plan(lines(11), None), policies).outcome == REFUSE


def test_a_policy_reading_a_text_field_that_does_not_exist_is_refused_at_load():
    with pytest.raises(PolicySetInvalid, match="lines_deleted"):
        policies_compile(
            enforce=f"forbid (principal, {NOTE}, resource) "
            "when { context.text.lines_deleted > 1 };",
            actions=ACTIONS,
        )


def test_the_docs_example_compiles_and_refuses_what_it_says():
    import re

    from tests.conftest import ROOT

    text = (ROOT / "docs" / "policy.md").read_text()
    section = text.split("### Text documents", 1)[1]
    block = re.search(r"```cedar\n(.*?)\n```", section, re.DOTALL).group(1)
    # A file-writing action: a note's shape with no document, as a files connector has.
    actions = {**ACTIONS, "write_file": ACTIONS["replace_note"]}
    compiled = policies_compile(enforce=block, actions=actions)
    before = lines(30)
    deleting = text_plan(before, "", action="write_file")
    assert policy_evaluate(deleting, compiled).policies == ("no-big-deletions",)
    key = text_plan(before, before + "-----BEGIN PRIVATE KEY-----\n", action="write_file")
    assert policy_evaluate(key, compiled).policies == ("no-secrets-written",)
    small = text_plan(before, before + "one more line\n", action="write_file")
    assert policy_evaluate(small, compiled).outcome == REVIEW
