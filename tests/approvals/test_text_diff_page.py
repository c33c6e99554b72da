"""A plan whose target is a text (a file's content) on the plan page: a unified line diff
with old and new line numbers, added and removed lines marked by a sign as well as a
colour, unchanged runs folded, everything escaped and hidden characters spelled out; a
multi-line field of a JSON record gets the same diff; the backtest reads the text's
change as the submission did."""

from __future__ import annotations

import re

import pytest

from actions.fingerprint import fingerprint, plan_fingerprint_document
from actions.policy.drafts import draft_compile, stored_actions
from actions.preview import diff
from approvals.models import Plan
from tests.approvals.test_backtest import approve, deny, executed, listed, report_of


@pytest.fixture
def rita(client, reviewer):
    client.force_login(reviewer)
    return client


def page_of(client, plan: Plan) -> str:
    response = client.get(plan.get_absolute_url())
    assert response.status_code == 200
    return response.content.decode()


def as_text(plan: Plan, before: str | None, after: str | None) -> Plan:
    """The stored plan, as a connector whose target is a text would have made it (its
    fingerprint too: a reviewer approves it)."""
    Plan.objects.filter(pk=plan.pk).update(before=before, after=after, changes=diff(before, after))
    plan = Plan.objects.get(pk=plan.pk)
    canonical, digest = fingerprint(plan_fingerprint_document(plan))
    Plan.objects.filter(pk=plan.pk).update(canonical=canonical, fingerprint=digest)
    return Plan.objects.get(pk=plan.pk)


def note_plan(make_plan, n: int = 1) -> Plan:
    """A plan on the demo's note n-1 (a different title each: not a repeat)."""
    return make_plan("replace_note", {"note_id": "n-1", "title": f"Title {n}", "body": "Body"})


def rows_of(page: str) -> list[tuple[str, str, str, str]]:
    """(class, old number, new number, sign) of each row of the line diff."""
    found = re.findall(
        r'<tr class="line-(\w+)"><td class="num old">(\d*)</td><td class="num new">(\d*)</td>'
        r'<td class="sign">(?:<span aria-hidden="true">([+-])</span>)?',
        page,
    )
    return found


def test_a_text_plan_shows_a_line_diff_with_numbers_signs_and_folds(rita, make_plan):
    before = "".join(f"line {i}\n" for i in range(1, 41))
    after = before.replace("line 20\n", "line twenty\nline 20.5\n")
    page = page_of(rita, as_text(note_plan(make_plan), before, after))
    assert 'data-testid="text-diff"' in page
    rows = rows_of(page)
    assert ("removed", "20", "", "-") in rows
    assert ("added", "", "20", "+") in rows and ("added", "", "21", "+") in rows
    assert ("context", "21", "22", "") in rows
    assert "… 16 unchanged lines …" in page and "… 17 unchanged lines …" in page
    summary = re.search(r'data-testid="text-diff-summary">(.*?)</p>', page, re.S).group(1)
    assert "2 lines added, 1 removed" in summary
    # No field table for a text: its single "replace" of two strings says nothing.
    assert "No field changes." not in page and 'class="op-replace field-row"' not in page


def test_hostile_text_is_escaped_and_hidden_characters_spelled_out(rita, make_plan):
    hostile = '<script>alert(1)</script>\nok = "user\u202e \u2066// admin\u2069"\n'
    page = page_of(rita, as_text(note_plan(make_plan), "first\n", hostile))
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "\u202e" not in page and "\u2066" not in page
    assert "⟨U+202E⟩ ⟨U+2066⟩// admin⟨U+2069⟩" in page


def test_a_created_text_and_line_endings_and_no_final_newline(rita, make_plan):
    page = page_of(rita, as_text(note_plan(make_plan), None, "a\nb"))
    assert "A new text:" in page
    assert [r[:3] for r in rows_of(page)] == [("added", "", "1"), ("added", "", "2")]
    assert "\\ No newline at end of file" in page
    page = page_of(rita, as_text(note_plan(make_plan, 2), "one\r\n", "one\n"))
    assert re.search(r"<pre>one<abbr class=\"eol\" title=\"[^\"]+\">␍</abbr></pre>", page)


def test_a_text_too_long_to_compare_says_so_with_sizes(rita, make_plan):
    page = page_of(rita, as_text(note_plan(make_plan), "x\n" * 20_001, "y\n"))
    assert "The texts differ; too long to compare line by line." in page
    assert "Before: 20001 lines, 40002 bytes. After: 1 lines, 2 bytes." in page
    assert not rows_of(page)


def test_a_multi_line_field_of_a_record_gets_a_line_diff(rita, make_plan):
    plan = note_plan(make_plan)
    before = {"id": "n-1", "title": "Title", "body": "alpha\nbeta\ngamma\n"}
    after = {"id": "n-1", "title": "Title", "body": "alpha\nBETA\ngamma\n"}
    Plan.objects.filter(pk=plan.pk).update(before=before, after=after, changes=diff(before, after))
    page = page_of(rita, Plan.objects.get(pk=plan.pk))
    assert 'class="op-replace field-row"' in page and "<code>/body</code>" in page
    assert ("removed", "2", "", "-") in rows_of(page) and ("added", "", "2", "+") in rows_of(page)


TEXT_DRAFT = (
    '@id("no-big-deletions") @reason("no more than ten lines deleted")\n'
    'forbid (principal, action == Action::"replace_note", resource)\n'
    "when { context.text.lines_removed > 10 };\n"
)


def test_the_backtest_reads_a_stored_texts_change_as_the_submission_did(make_plan, reviewer):
    many = "".join(f"line {i}\n" for i in range(30))
    big = executed(
        approve(as_text(note_plan(make_plan, 1), many, "line 0\n"), reviewer), "completed"
    )
    deny(as_text(note_plan(make_plan, 2), many, many + "one more\n"), reviewer)
    report = report_of(draft_compile([("text.cedar", TEXT_DRAFT)], actions=stored_actions()))
    assert listed(report, "refuse_disagreements") == [str(big.id)]
    assert report["totals"]["draft"]["refuse"] == 1
    assert (
        report["totals"]["evaluation_errors"] if "evaluation_errors" in report["totals"] else True
    )


def test_the_api_gives_a_text_plans_line_counts_and_nothing_for_json(make_plan, agent_token):
    from django.test import Client

    api = Client(HTTP_AUTHORIZATION=f"Bearer {agent_token}")
    text = as_text(note_plan(make_plan), "a\nb\nc\n", "a\nB\nc\nd\n")
    preview = api.get(f"/api/v1/plans/{text.id}").json()["preview"]
    assert preview["text"] == {"lines_added": 2, "lines_removed": 1, "too_long": False}
    record = note_plan(make_plan, 2)
    assert api.get(f"/api/v1/plans/{record.id}").json()["preview"].get("text") is None
    document = api.get("/api/v1/openapi.json").json()
    schemas = document["components"]["schemas"]
    assert set(schemas["TextChangeOut"]["properties"]) == {
        "lines_added",
        "lines_removed",
        "too_long",
    }


def test_a_revision_shows_how_the_text_moved_since_the_stale_preview(rita, make_plan):
    original = as_text(note_plan(make_plan, 1), "one\ntwo\nthree\n", "one\n2\nthree\n")
    Plan.objects.filter(pk=original.pk).update(status="stale")
    revision = as_text(note_plan(make_plan, 2), "one\ntwo\nthree\nfour\n", "one\n2\nthree\nfour\n")
    Plan.objects.filter(pk=revision.pk).update(revision_of=original)
    page = page_of(rita, Plan.objects.get(pk=revision.pk))
    moved = page.split('data-testid="revision"', 1)[1]
    assert "What changed in the target since that preview" in moved
    assert ("added", "", "4", "+") in rows_of(moved)
