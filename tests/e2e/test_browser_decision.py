"""The decision surface in a real Chromium, measured rather than merely present: the
summary line and the first changed field inside the first viewport on a desktop and a
phone for one plan of each kind; no page wider than a phone; the queue's refresh keeping
the reviewer's focus; the keys; the irreversible Approve disabled until the target is
typed; a preview made obsolete offering "preview again" and no Approve; and axe-core's
rules with no serious or critical violation on the queue, a plan of each kind and the
audit log (axe is evaluated through the DevTools protocol: the CSP stays strict)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_browser import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

DESKTOP = {"width": 1280, "height": 800}
HEADER_LINKS = ("Queue", "Dashboard", "Audit log", "Session grants", "Passkeys")
PHONE = {"width": 390, "height": 844}
AXE = Path(__file__).with_name("vendor") / "axe.min.js"
# Where the measured positions are written for a person to read (the README quotes them).
POSITIONS_COPY = Path("/tmp/countersign-positions.json")

KINDS = {
    "update": ("update_contact_email", {"contact_id": "c-1001", "email": "ada@new.example"}),
    "create": (
        "create_contact",
        {
            "contact_id": "c-1009",
            "name": "Katherine Johnson",
            "email": "katherine@example.test",
            "workspace": "ws-blue",
        },
    ),
    "replace": (
        "replace_note",
        {
            "note_id": "n-1",
            "title": "Runbook",
            "body": "Restart the worker, then check the queue and the sweeper's log.",
        },
    ),
    "delete": ("delete_contact", {"contact_id": "c-1002"}),
    "invoke": (
        "send_reminder",
        {
            "customer_id": "cus-77",
            "channel": "email",
            "send_at": "2030-01-15T09:00:00Z",
            "message": "Invoice **inv-2001** is due on 31 January.",
        },
    ),
}


def propose(agent_api, action: str, data: dict) -> dict:
    response = agent_api.http.post("/plans", json={"action": action, "input": data})
    assert response.status_code == 201, response.text
    return response.json()


@pytest.fixture
def one_of_each(agent_api) -> dict[str, dict]:
    return {kind: propose(agent_api, *KINDS[kind]) for kind in KINDS}


def box(page, locator) -> dict:
    found = locator.bounding_box()
    assert found is not None, f"{locator} is not displayed"
    return found


def overflow(page) -> int:
    """How many CSS pixels the page is wider than the window (0: none)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def axe_violations(page) -> list[dict]:
    page.evaluate(AXE.read_text())
    return page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ["violations"]})).violations
            .map(v => ({id: v.id, impact: v.impact, help: v.help,
                        nodes: v.nodes.map(n => n.target.join(" ")).slice(0, 3)}))"""
    )


def serious(violations: list[dict]) -> list[dict]:
    return [v for v in violations if v["impact"] in ("serious", "critical")]


def test_the_change_is_in_the_first_viewport_on_a_desktop_and_a_phone(chromium, one_of_each):
    measured: dict[str, dict] = {}
    for size_name, viewport in (("1280x800", DESKTOP), ("390x844", PHONE)):
        page = chromium(viewport=viewport)
        log_in(page)
        for kind, plan in one_of_each.items():
            page.goto(f"/plans/{plan['id']}/")
            line = box(page, page.get_by_test_id("summary-line"))
            first = box(
                page,
                page.locator("section.changes")
                .locator("[data-testid=message], tr.field-row")
                .first,
            )
            approve = box(page, page.locator("#approve"))
            bar = box(page, page.get_by_test_id("decision-bar"))
            height = viewport["height"]
            assert line["y"] >= 0 and line["y"] + line["height"] <= height, (kind, size_name)
            assert first["y"] + first["height"] <= height, (kind, size_name, first)
            # The sticky decision bar is in the window too, and covers none of that.
            assert approve["y"] + approve["height"] <= height, (kind, size_name, approve)
            assert first["y"] + first["height"] <= bar["y"], (kind, size_name)
            assert overflow(page) == 0, (kind, size_name)
            measured.setdefault(size_name, {})[kind] = {
                "summary_line": round(line["y"]),
                "first_change": round(first["y"]),
                "approve": round(approve["y"]),
            }
    POSITIONS_COPY.write_text(json.dumps(measured, indent=2))
    print(json.dumps(measured, indent=2))


def test_no_page_is_wider_than_a_phone(chromium, one_of_each):
    page = chromium(viewport=PHONE)
    page.goto("/accounts/login/")
    assert overflow(page) == 0, "/accounts/login/"
    log_in(page)
    urls = [
        "/plans/",
        "/plans/?status=any",
        "/plans/?view=all",
        "/plans/passkeys/",
        "/plans/audit/",
        "/plans/dashboard/",
        "/plans/grants/",
        f"/plans/{one_of_each['update']['id']}/edit",
    ] + [f"/plans/{plan['id']}/" for plan in one_of_each.values()]
    for url in urls:
        page.goto(url)
        assert overflow(page) == 0, url
    # The header folds: the brand and the page's heading are on screen, one above the other.
    page.goto("/plans/")
    assert box(page, page.locator("header.top"))["height"] < 120
    # Every link of the header, the user name and Log out are on screen, none cut off.
    header = page.locator("header.top")
    items = [header.get_by_role("link", name=n) for n in HEADER_LINKS] + [
        header.locator(".who"),
        header.get_by_role("button", name="Log out"),
    ]
    for item in items:
        found = box(page, item)
        assert found["x"] >= 0 and found["x"] + found["width"] <= PHONE["width"], found
        assert found["y"] + found["height"] <= PHONE["height"], found
        assert item.evaluate("el => el.getClientRects().length") == 1, item
    assert header.locator(".who").inner_text() == "rita"
    # The queue stacks too: a card per plan, each cell beside its label, none cut off.
    first = page.locator("table.plans tbody tr").first
    labels = first.locator("td").evaluate_all(
        "tds => tds.map(td => getComputedStyle(td, '::before').content)"
    )
    # What is mine to decide is undecided: no decided-by line on its cards.
    assert labels[:2] == ['"Class"', '"Action"'] and labels[-1] == '"Code"'
    assert '"Decided by"' not in labels
    card = box(page, first)
    assert card["x"] >= 0 and card["x"] + card["width"] <= PHONE["width"]


def test_enter_on_the_login_page_signs_in(chromium):
    page = chromium()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("rita")
    page.get_by_label("Password").fill("pw-rita")
    page.get_by_label("Password").press("Enter")
    page.wait_for_url("**/plans/")
    # The language switcher is still there, after the content, and still works.
    assert page.get_by_test_id("language-switcher").is_visible()


def test_the_audit_logs_identifiers_are_never_broken_mid_word(chromium, one_of_each):
    for viewport in (DESKTOP, PHONE):
        page = chromium(viewport=viewport)
        log_in(page)
        page.goto("/plans/audit/")
        cells = page.locator("[data-testid=event-kind], [data-testid=event-actor]")
        assert cells.count() >= 2 * len(one_of_each)
        texts = set(cells.all_inner_texts())
        assert "plan.proposed" in texts and "agent:test-agent" in texts
        # Each on one line: an inline element broken over lines has a box per line.
        broken = page.evaluate(
            """() => [...document.querySelectorAll(
                    '[data-testid=event-kind], [data-testid=event-actor]')]
                .filter(el => el.getClientRects().length !== 1).map(el => el.textContent)"""
        )
        assert broken == [], (viewport, broken)
        # Nothing is clipped unseen: what is wider than its cell scrolls in its own box.
        assert overflow(page) == 0, viewport
        if viewport is PHONE:
            # A card per event: the labels are shown beside the values.
            first = page.locator("table.events tbody tr").first
            assert box(page, first)["width"] <= PHONE["width"]
            labels = first.locator("td").evaluate_all(
                "tds => tds.map(td => getComputedStyle(td, '::before').content)"
            )
            assert labels == ['"#"', '"When"', '"Kind"', '"Actor"', '"Plan"', '"Data"']
            page.screenshot(path="/tmp/countersign-audit-phone.png")


def test_the_queue_refresh_keeps_focus_and_scroll_and_j_k_move(chromium, agent_api):
    plans = [agent_api.propose(email=f"ada{i}@new.example") for i in range(3)]
    page = chromium()
    # The page's timers run on a clock the test may move on: the queue's refresh (every
    # 5 s) is then made due at once, by the page's own timer.
    page.clock.install()
    log_in(page)
    page.keyboard.press("j")
    page.keyboard.press("j")
    focused = page.evaluate("document.activeElement.id")
    assert focused == f"open-{plans[1]['id']}"  # newest first: the second row
    page.keyboard.press("k")
    assert page.evaluate("document.activeElement.id") == f"open-{plans[2]['id']}"
    page.keyboard.press("j")
    scroll = page.evaluate("window.scrollY")
    with page.expect_response(
        lambda r: r.request.headers.get("hx-request") == "true" and "/plans/" in r.url,
        timeout=12_000,
    ):
        page.clock.fast_forward(5_000)
    page.wait_for_timeout(300)  # the swap settles
    assert page.evaluate("document.activeElement.id") == focused
    assert page.evaluate("window.scrollY") == scroll
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/plans/{plans[1]['id']}/")


def test_keys_on_the_plan_page_and_the_help(chromium, agent_api):
    plan = agent_api.propose()
    page = chromium()
    log_in(page)
    page.goto(f"/plans/{plan['id']}/")
    page.keyboard.press("a")
    assert page.evaluate("document.activeElement.id") == "approve"
    page.keyboard.press("d")
    assert page.evaluate("document.activeElement.id") == "deny"
    help_ = page.locator("#keys-help")
    assert help_.get_attribute("open") is None
    page.keyboard.press("?")
    assert help_.get_attribute("open") == ""
    assert "go to Deny" in help_.inner_text()
    # The skip link is the first thing a keyboard reaches, and lands on the content.
    page.goto(f"/plans/{plan['id']}/")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip-link"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"


def test_irreversible_approve_stays_disabled_until_the_target_is_typed(chromium, agent_api):
    plan = propose(agent_api, *KINDS["delete"])
    page = chromium()
    log_in(page)
    page.goto(f"/plans/{plan['id']}/")
    approve = page.get_by_role("button", name=f"Approve {plan['short_code']}")
    assert approve.is_disabled()
    assert "cannot be undone" in page.get_by_test_id("decision-bar").inner_text()
    assert page.get_by_role("link", name="Edit the input").count() == 0
    page.keyboard.press("a")  # Approve is disabled: the confirmation gets the focus
    assert page.evaluate("document.activeElement.id") == "confirm"
    page.keyboard.type("c-100")
    assert approve.is_disabled()
    page.keyboard.type("2")
    assert approve.is_enabled()
    page.get_by_test_id("confirm").fill("Grace")
    assert approve.is_disabled()
    page.get_by_test_id("confirm").fill("grace hopper")
    assert approve.is_enabled()
    approve.click()
    page.wait_for_url(f"**/plans/{plan['id']}/")
    assert page.get_by_role("status").filter(has_text="Approval recorded.").count() == 1
    assert page.get_by_test_id("approval-progress").inner_text() == "1 of 2"


def test_a_preview_made_obsolete_offers_preview_again_and_no_approve(chromium, agent_api, upstream):
    plan = agent_api.propose()
    other = agent_api.propose(email="other@new.example")
    upstream.mutate("/contacts/c-1001", {"phone": "+1 555 0199"})  # another change lands
    page = chromium()
    log_in(page)
    page.goto(f"/plans/{plan['id']}/")
    assert "changed since the preview" in page.get_by_test_id("freshness-warning").inner_text()
    assert page.get_by_role("button", name=f"Approve {plan['short_code']}").count() == 0
    assert page.get_by_test_id("same-target").count() == 1  # the other plan is named
    assert other["short_code"] in page.get_by_test_id("same-target").inner_text()
    page.get_by_role("button", name="Preview again").click()
    page.wait_for_url(lambda url: "/plans/" in url and plan["id"] not in url)
    revision = page.get_by_test_id("short-code").inner_text()
    assert page.get_by_role("button", name=f"Approve {revision}").is_enabled()
    assert agent_api.get(plan["id"])["status"] == "cancelled"


def test_axe_finds_no_serious_violation(chromium, one_of_each):
    page = chromium()
    log_in(page)
    found: dict[str, list] = {}
    urls = {"queue": "/plans/", "audit": "/plans/audit/"}
    urls |= {kind: f"/plans/{plan['id']}/" for kind, plan in one_of_each.items()}
    for name, url in urls.items():
        page.goto(url)
        found[name] = axe_violations(page)
    # The CSP stayed strict: axe ran without the page allowing any inline script.
    policy = page.evaluate("1") and page.request.get(urls["queue"]).headers
    assert "'unsafe-inline'" not in policy["content-security-policy"]
    print(json.dumps(found, indent=2))
    assert {name: serious(v) for name, v in found.items() if serious(v)} == {}
    assert all(isinstance(v, list) for v in found.values()) and len(found) == 7


def test_the_form_checks_freshness_again_as_the_reviewer_reaches_it(chromium, agent_api, upstream):
    plan = agent_api.propose()
    page = chromium()
    log_in(page)
    page.goto(f"/plans/{plan['id']}/")
    assert "still as previewed" in page.get_by_test_id("freshness").inner_text()
    approve = page.get_by_role("button", name=f"Approve {plan['short_code']}")
    assert approve.count() == 1
    # Another change lands while the reviewer reads; reaching the form checks again, and
    # the page, reloaded, no longer offers Approve.
    upstream.mutate("/contacts/c-1001", {"phone": "+1 555 0199"})
    with page.expect_navigation():
        page.keyboard.press("a")
    assert "changed since the preview" in page.get_by_test_id("freshness-warning").inner_text()
    assert approve.count() == 0
    assert page.get_by_role("button", name="Preview again").count() == 1
