"""Screenshots of the reviewer pages for the README: the queue, a plan page and the audit
log, each on a desktop (1280 px wide) and on a phone (390 px).

    .venv/bin/python bench/screenshots.py [--out docs/screenshots] [--language en] [--every-kind]
    make screenshots

``--every-kind`` also writes the plan page of one plan of each change kind, at both sizes
(``plan-<action>.png``, ``plan-<action>-phone.png``), the first viewport only.

Needs nothing but the virtualenv and Chromium (/usr/bin/chromium): the product runs in
embedded mode (SQLite and keys in a scratch directory, removed afterwards) against the
demo upstream, with the demo catalog. A few plans are proposed through the same service
the agent API calls, then a real uvicorn serves the pages and Chromium captures them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
PASSWORD = "pw-screenshots"
DECISION_GROUPS = ("billing-approvers", "support-leads")
# (age in minutes, action, input, reason), oldest first. The oldest is close to expiring,
# so the queue shows its warning; SUBJECT is the plan page the README shows.
SUBJECT = "delete_contact"
PLANS = [
    (
        52,
        "update_contact_email",
        {"contact_id": "c-1001", "email": "ada@new.example"},
        "The customer asked by phone to use her new address.",
    ),
    (26, "send_invoice", {"invoice_id": "inv-2001"}, "Month-end billing run."),
    (12, "delete_contact", {"contact_id": "c-1002"}, "Duplicate of c-1001, merged last week."),
    (
        5,
        "update_invoice_memo",
        {"invoice_id": "inv-2001", "memo": "Thank you for your order."},
        "Memo requested by accounts.",
    ),
    (
        2,
        "replace_note",
        {
            "note_id": "n-1",
            "title": "Runbook",
            "body": "Restart the worker, then check the queue and the sweeper's log for "
            "anything it re-enqueued.",
        },
        "The runbook missed the sweeper step during last night's incident.",
    ),
    (
        1,
        "create_contact",
        {
            "contact_id": "c-1004",
            "name": "Katherine Johnson",
            "email": "katherine@example.test",
            "workspace": "ws-blue",
        },
        "New contact from the conference sign-up sheet.",
    ),
    (
        1,
        "send_reminder",
        {
            "customer_id": "cus-77",
            "channel": "email",
            "send_at": "2030-01-15T09:00:00Z",
            "message": "Hello! Invoice **inv-2001** (120.00 EUR) is due on 31 January.\n\n"
            "- pay by card on the portal\n- or reply to this message",
        },
        "The customer asked to be reminded a week before the due date.",
    ),
]


def prepare(upstream_url: str) -> dict[str, str]:
    """Migrate, load the demo catalog, add a reviewer and an agent, propose the plans.
    Returns the plans' ids by action."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission
    from django.core.management import call_command
    from django.db.models import F

    from actions.catalog import load_catalog
    from actions.models import Agent, Credential
    from actions.services import agent_create, credential_set
    from approvals.models import Plan
    from approvals.services import plan_submit
    from demo.upstream import DEFAULT_READ_TOKEN

    call_command("migrate", verbosity=0)
    catalog = (ROOT / "demo" / "catalog.yaml").read_text()
    load_catalog(catalog, base_urls={"demo": upstream_url}, base_dir=ROOT / "demo")
    from actions.models import Connector

    # Previews read with the read credential; nothing is executed, so no write one.
    credential_set(
        connector=Connector.objects.get(name="demo"),
        role=Credential.Role.READ,
        secret={"token": DEFAULT_READ_TOKEN},
    )
    # The groups the demo catalog's decision rules name, with two people in each: a plan
    # nobody could decide would be refused (a deletion needs two different people).
    for username in ("rita", "sam"):
        user = get_user_model().objects.create_user(username=username, password=PASSWORD)
        user.user_permissions.add(Permission.objects.get(codename="review_plan"))
        for name in DECISION_GROUPS:
            user.groups.add(Group.objects.get_or_create(name=name)[0])
    names = [action for _, action, _, _ in PLANS]
    agent, _ = agent_create(name="billing-assistant", action_names=names, active=True)
    Agent.objects.filter(pk=agent.pk).update(attributes={"workspace": "ws-blue"})
    agent.refresh_from_db()
    ids = {}
    for minutes, action, data, reason in PLANS:
        plan, _ = plan_submit(agent=agent, action_name=action, input=data, reason=reason)
        # As if proposed a while ago (ages and countdowns as a reviewer would meet them).
        ago = timedelta(minutes=minutes)
        Plan.objects.filter(id=plan.id).update(
            created_at=F("created_at") - ago, expires_at=F("expires_at") - ago
        )
        ids[action] = str(plan.id)
    return ids


def _log_in(browser, url: str, viewport: dict, language: str):
    context = browser.new_context(base_url=url, viewport=viewport, locale=language)
    page = context.new_page()
    page.goto("/accounts/login/")
    page.locator("input[name=username]").fill("rita")
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("form button.primary").click()
    page.wait_for_url("**/plans/")
    return page


def capture(
    url: str, ids: dict[str, str], out: Path, language: str, every_kind: bool = False
) -> list[Path]:
    from playwright.sync_api import sync_playwright

    shots = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
        )
        page = _log_in(browser, url, VIEWPORT, language)
        page.wait_for_timeout(1200)  # countdown.js has ticked: "in 59m 58s"
        shots.append(out / "queue.png")
        page.screenshot(path=str(shots[-1]))
        page.goto(f"/plans/{ids[SUBJECT]}/")
        page.wait_for_timeout(1200)
        shots.append(out / "plan.png")
        page.screenshot(path=str(shots[-1]), full_page=True)
        page.goto("/plans/audit/")
        shots.append(out / "audit.png")
        page.screenshot(path=str(shots[-1]))
        phone = _log_in(browser, url, PHONE, language)
        phone.wait_for_timeout(1200)
        shots.append(out / "queue-phone.png")
        phone.screenshot(path=str(shots[-1]))
        phone.goto(f"/plans/{ids[SUBJECT]}/")
        phone.wait_for_timeout(1200)
        shots.append(out / "plan-phone.png")
        phone.screenshot(path=str(shots[-1]))
        phone.goto("/plans/audit/")
        shots.append(out / "audit-phone.png")
        phone.screenshot(path=str(shots[-1]))
        if every_kind:
            for action, plan_id in ids.items():
                for suffix, where in (("", page), ("-phone", phone)):
                    where.goto(f"/plans/{plan_id}/")
                    shots.append(out / f"plan-{action}{suffix}.png")
                    where.screenshot(path=str(shots[-1]))
        browser.close()
    return shots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--language", default="en", help="the browser's locale, e.g. pt-BR")
    parser.add_argument(
        "--every-kind", action="store_true", help="also each plan's first viewport, both sizes"
    )
    args = parser.parse_args()
    if not shutil.which(CHROMIUM):
        raise SystemExit(f"needs Chromium at {CHROMIUM}")
    args.out.mkdir(parents=True, exist_ok=True)

    scratch = Path(tempfile.mkdtemp(prefix="countersign-screenshots-"))
    for name in list(os.environ):
        if name.startswith(("COUNTERSIGN_", "DATABASE_URL", "CELERY_", "REDIS_URL")):
            del os.environ[name]
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "COUNTERSIGN_ENV": "embedded",
            "COUNTERSIGN_VAR_DIR": str(scratch),
        }
    )
    import django

    django.setup()
    from django.db import connections

    from demo.processes import start_web
    from demo.upstream import DemoUpstream

    upstream = DemoUpstream().start()
    web = None
    try:
        ids = prepare(upstream.url)
        connections.close_all()  # SQLite: the web server writes sessions next
        web, url = start_web(dict(os.environ), scratch)
        for shot in capture(url, ids, args.out, args.language, args.every_kind):
            print(f"wrote {shot.relative_to(ROOT) if shot.is_relative_to(ROOT) else shot}")
    finally:
        if web is not None:
            web.stop()
        upstream.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
