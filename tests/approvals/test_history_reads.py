"""The pages B4 times (the queue, a plan page, an agent's read of its plan) read no more of
the history as it grows: each statement they run touches only the rows it shows, whatever
the number of settled plans beside them. A query that counts, sorts or filters the whole
history fails here, on two thousand plans, instead of showing at a million as a latency
that the machine's noise can hide (docs/benchmarks.md, B4)."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from demo.history import seed_plans

HISTORY = 2000
# The most rows of history one statement may touch: a queue page is 25 plans (and the
# one after them, which says whether there is another page).
MOST_ROWS = 100
HISTORY_TABLES = {"approvals_plan", "approvals_auditevent"}


def rows_touched(node: dict) -> dict[str, float]:
    """Rows each history table's scans in an EXPLAIN ANALYZE plan read: those returned
    and those read then thrown away by a filter, over every loop."""
    touched: dict[str, float] = {}
    table = node.get("Relation Name")
    if table in HISTORY_TABLES:
        read = (
            node.get("Actual Rows", 0)
            + node.get("Rows Removed by Filter", 0)
            + node.get("Rows Removed by Index Recheck", 0)
        )
        touched[table] = read * node.get("Actual Loops", 1)
    for child in node.get("Plans", []):
        for name, n in rows_touched(child).items():
            touched[name] = touched.get(name, 0) + n
    return touched


def statements(client, path: str, **headers) -> list[str]:
    client.get(path, **headers)  # warm: sessions, permissions, the catalog's lookups
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path, **headers)
    assert response.status_code == 200, (path, response.status_code)
    return [q["sql"] for q in captured.captured_queries]


def heaviest(sql: str) -> dict[str, float]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
        (document,) = cursor.fetchone()
    plan = json.loads(document) if isinstance(document, str) else document
    return rows_touched(plan[0]["Plan"])


@pytest.fixture
def pages(client, reviewer, make_plan, api_headers) -> dict[str, tuple[str, dict]]:
    plans = [
        make_plan(input={"contact_id": "c-1001", "email": f"ada{i}@new.example"}) for i in range(3)
    ]
    client.force_login(reviewer)
    return {
        "queue": ("/plans/", {}),
        "plan": (f"/plans/{plans[1].id}/", {}),
        "api": (f"/api/v1/plans/{plans[1].id}", api_headers),
    }


@pytest.mark.skipif(connection.vendor != "postgresql", reason="EXPLAIN ANALYZE's JSON")
def test_the_b4_pages_read_no_more_rows_as_history_grows(client, pages):
    seed_plans(10, events_per_plan=2)
    short = {name: statements(client, path, **h) for name, (path, h) in pages.items()}
    seed_plans(HISTORY, events_per_plan=2)
    with connection.cursor() as cursor:
        # As after a bulk load in production (and in B4): statistics that know the size.
        for table in sorted(HISTORY_TABLES):
            cursor.execute(f"ANALYZE {table}")
    for name, (path, headers) in pages.items():
        long = statements(client, path, **headers)
        assert len(long) == len(short[name]), (name, len(short[name]), len(long))
        for sql in long:
            if not sql.lstrip().upper().startswith("SELECT"):
                continue
            touched = heaviest(sql)
            assert all(n <= MOST_ROWS for n in touched.values()), (name, touched, sql)
