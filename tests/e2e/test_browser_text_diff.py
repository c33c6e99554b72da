"""A text document's line diff in a real Chromium at a phone's width (390 px): long lines
scroll inside the diff block, never the page; the CSP (no inline style or script) holds
with no error in the console; hostile text does not run; axe finds nothing serious."""

from __future__ import annotations

import pytest

from actions.preview import diff
from approvals.models import Plan
from tests.e2e.test_browser import log_in
from tests.e2e.test_browser_decision import PHONE, axe_violations, overflow, serious

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

SCREENSHOT = "/tmp/countersign-text-diff.png"


def text_plan(agent_api) -> dict:
    """A plan proposed through the API, then given a text target as a connector whose
    target is a file would have made it: long lines, a tab, a Trojan-source line."""
    response = agent_api.http.post(
        "/plans",
        json={
            "action": "replace_note",
            "input": {"note_id": "n-1", "title": "A file", "body": "text"},
        },
    )
    assert response.status_code == 201, response.text
    plan = response.json()
    before = "".join(f"line {i}\n" for i in range(1, 60))
    after = before.replace(
        "line 30\n",
        "line 30 " + "a very long line that goes on " * 12 + "\n"
        "\tindented <script>alert(1)</script>\n"
        'role = "user\u202e \u2066// admin\u2069"\n',
    ).replace("line 50\n", "")
    Plan.objects.filter(pk=plan["id"]).update(
        before=before, after=after, changes=diff(before, after)
    )
    return plan


def test_the_line_diff_scrolls_inside_itself_on_a_phone_under_the_csp(chromium, agent_api):
    plan = text_plan(agent_api)
    page = chromium(viewport=PHONE)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    log_in(page)
    page.goto(f"/plans/{plan['id']}/")

    block = page.get_by_test_id("text-diff")
    assert "3 lines added, 2 removed" in block.get_by_test_id("text-diff-summary").inner_text()
    rows = page.locator("table.text-diff-lines tr.line-added")
    assert rows.count() == 3
    assert "⟨U+202E⟩" in rows.nth(2).inner_text()
    folds = page.locator("table.text-diff-lines tr.fold")
    assert folds.count() >= 2
    # A fold says how many lines it hides where a phone shows it, at the block's left.
    assert "unchanged lines" in folds.first.inner_text()
    text_x = folds.first.locator("td").evaluate(
        "e => { const r = document.createRange(); r.selectNodeContents(e);"
        " return r.getBoundingClientRect().right }"
    )
    assert text_x < PHONE["width"], text_x
    scroller = page.locator(".text-diff-scroll")
    widths = scroller.evaluate("e => [e.scrollWidth, e.clientWidth]")
    assert widths[0] > widths[1], widths  # the long line scrolls inside the block
    assert overflow(page) == 0  # and the page is no wider than the phone
    # The colours come from the stylesheet (no inline style): a removed line is tinted.
    tint = page.locator("tr.line-removed td").first.evaluate(
        "e => getComputedStyle(e).backgroundColor"
    )
    assert tint == "rgb(253, 236, 238)"
    page.screenshot(path=SCREENSHOT, full_page=True)
    assert serious(axe_violations(page)) == []
    assert errors == [] and dialogs == []
