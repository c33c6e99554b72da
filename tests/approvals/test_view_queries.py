"""Query counts: every page and partial runs the same number of queries whether it shows
3 rows or 30 (no N+1 as the queue, the audit log or a plan's decisions grow)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from actions.lib.models import AuditEvent
from approvals.models import Approval, Plan

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def rita(client, reviewer):
    client.force_login(reviewer)
    return client


@pytest.fixture
def more_plans(make_plan, other_agent):
    """Add plans until there are ``total``: two agents, two actions, two targets."""

    def more(total: int) -> None:
        for i in range(Plan.objects.count(), total):
            if i % 2:
                make_plan(
                    "update_invoice_memo",
                    {"invoice_id": "inv-2001", "memo": f"memo {i}"},
                    by=other_agent[0],
                )
            else:
                make_plan(input={"contact_id": "c-1001", "email": f"ada{i}@new.example"})

    return more


def queries(client, url: str, **headers) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, **headers)
    assert response.status_code == 200
    return len(captured)


@pytest.mark.parametrize(
    "url,headers",
    [
        ("/plans/?per_page=50", {}),
        ("/plans/?per_page=50", HTMX),  # the poll's fragment
        ("/plans/?per_page=50&status=any&sort=urgent", {}),
        ("/plans/audit/", {}),
        ("/plans/audit/?agent=other-agent", {}),
        ("/plans/dashboard/", {}),
    ],
)
def test_list_pages_do_not_grow_with_rows(rita, more_plans, url, headers):
    more_plans(3)
    queries(rita, url, **headers)  # warm up (sessions, permissions, content types)
    few = queries(rita, url, **headers)
    more_plans(30)
    assert AuditEvent.objects.count() >= 30
    many = queries(rita, url, **headers)
    assert many == few, f"{url}: {few} queries with 3 plans, {many} with 30"


def test_who_decided_costs_no_query_per_row(rita, more_plans, reviewer, second_reviewer):
    """The "decided by" column names the people of each row with one query a page."""

    def decided(total: int) -> None:
        more_plans(total)
        for plan in Plan.objects.filter(decided_at__isnull=True):
            for person in (reviewer, second_reviewer):
                Approval.objects.create(
                    plan=plan,
                    reviewer=person,
                    decision="approve",
                    fingerprint=plan.fingerprint,
                    expires_at=plan.expires_at,
                )
        Plan.objects.filter(decided_at__isnull=True).update(
            status="completed", decided_at=timezone.now()
        )

    url = "/plans/?view=all&per_page=50"
    decided(3)
    queries(rita, url)
    few = queries(rita, url)
    decided(30)
    many = queries(rita, url)
    assert many == few, f"{few} queries with 3 decided plans, {many} with 30"
    page = rita.get(url).content.decode()
    assert page.count('<span class="by-person">sam</span>') == 30


def test_the_queue_shows_all_thirty(rita, more_plans):
    more_plans(30)
    page = rita.get("/plans/?per_page=50").content.decode()
    assert page.count('class="plan-row') == 30


def _decisions(plan: Plan, count: int) -> None:
    """Decisions recorded straight in the table (the service would close the plan after
    the first deny): the page must list them all at the same cost."""
    users = get_user_model().objects
    start = plan.approvals.count()
    for i in range(start, count):
        user = users.create_user(username=f"reviewer-{i}", password="x")
        Approval.objects.create(
            plan=plan,
            reviewer=user,
            decision="deny" if i % 2 else "approve",
            fingerprint=plan.fingerprint,
            comment=f"comment {i}",
            expires_at=timezone.now() + timedelta(minutes=5),
        )


@pytest.mark.parametrize("headers", [{}, HTMX])
def test_the_plan_page_does_not_grow_with_decisions(rita, make_plan, headers):
    plan = make_plan()
    url = reverse("approvals:plan-detail", args=[plan.id])
    _decisions(plan, 3)
    queries(rita, url, **headers)
    few = queries(rita, url, **headers)
    _decisions(plan, 30)
    many = queries(rita, url, **headers)
    assert many == few, f"{few} queries with 3 decisions, {many} with 30"
    if not headers:
        assert rita.get(url).content.decode().count("reviewer-") == 30
