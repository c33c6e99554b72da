"""Accessibility and robustness of the reviewer pages: every form control has a label,
keyboard focus is visible, and the page that approves cannot be framed."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.urls import NoReverseMatch, reverse

from approvals.models import Plan, PlanStatus
from tests.conftest import ROOT

UNLABELLED_TYPES = {"hidden", "submit", "button", "reset", "image"}


class Controls(HTMLParser):
    """Form controls and how each is labelled: by <label for>, by an enclosing <label>,
    or by aria-label / aria-labelledby."""

    def __init__(self) -> None:
        super().__init__()
        self.label_for: set[str] = set()
        self.open_labels = 0
        self.controls: list[dict] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "label":
            self.open_labels += 1
            if attrs.get("for"):
                self.label_for.add(attrs["for"])
        elif tag in ("input", "select", "textarea"):
            if tag == "input" and (attrs.get("type") or "text") in UNLABELLED_TYPES:
                return
            self.controls.append({"tag": tag, "in_label": self.open_labels > 0, **attrs})

    def handle_endtag(self, tag):
        if tag == "label":
            self.open_labels -= 1

    def unlabelled(self) -> list[str]:
        return [
            f"<{c['tag']} name={c.get('name')!r}>"
            for c in self.controls
            if not (
                c["in_label"]
                or c.get("id") in self.label_for
                or c.get("aria-label", "").strip()
                or c.get("aria-labelledby")
            )
        ]


def unlabelled_controls(html: str) -> tuple[int, list[str]]:
    parser = Controls()
    parser.feed(html)
    return len(parser.controls), parser.unlabelled()


@pytest.fixture
def rita(client, reviewer):
    client.force_login(reviewer)
    return client


def _pages(plan: Plan, unknown: Plan) -> list[str]:
    urls = [
        reverse("approvals:queue"),
        reverse("approvals:plan-detail", args=[plan.id]),
        reverse("approvals:plan-detail", args=[unknown.id]),  # the resolve form
        reverse("approvals:plan-edit", args=[plan.id]),
        reverse("approvals:audit"),
        reverse("approvals:dashboard"),
    ]
    try:
        urls.append(reverse("approvals:grants"))
    except NoReverseMatch:
        pass
    return urls


def test_every_form_control_has_a_label(rita, make_plan):
    plan = make_plan()
    unknown = make_plan(input={"contact_id": "c-1001", "email": "other@new.example"})
    Plan.objects.filter(id=unknown.id).update(status=PlanStatus.UNKNOWN)
    seen = 0
    for url in _pages(plan, unknown):
        response = rita.get(url)
        assert response.status_code == 200, url
        count, unlabelled = unlabelled_controls(response.content.decode())
        assert unlabelled == [], f"{url}: {unlabelled}"
        seen += count
    assert seen > 20  # the parser did find the filters, the decision and edit forms


def test_the_login_form_is_labelled(client):
    count, unlabelled = unlabelled_controls(client.get(reverse("login")).content.decode())
    assert count >= 3 and unlabelled == []  # username, password, the language


def test_the_checker_notices_an_unlabelled_control():
    html = '<label>Name <input name="a"></label><label for="b">B</label><input id="b" name="b">'
    assert unlabelled_controls(html + '<input name="c"><select name="d"></select>') == (
        4,
        ["<input name='c'>", "<select name='d'>"],
    )


def test_the_approve_page_cannot_be_framed(rita, make_plan):
    plan = make_plan()
    for response in (
        rita.get(reverse("approvals:plan-detail", args=[plan.id])),
        rita.post(
            reverse("approvals:plan-decide", args=[plan.id]),
            {"decision": "approve", "fingerprint": plan.fingerprint},
        ),
    ):
        assert response["X-Frame-Options"] == "DENY"
        policy = response["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in policy
        assert "script-src 'self'" in policy and "'unsafe-inline'" not in policy


def test_keyboard_focus_is_visible():
    css = (ROOT / "static" / "css" / "app.css").read_text()
    assert ":focus-visible" in css
    rule = css[css.index(":focus-visible") :].split("}", 1)[0]
    assert "outline:" in rule and "outline: none" not in rule and "outline: 0" not in rule
    assert "outline: none" not in css and "outline:none" not in css
