"""The canary over the database: every flow, errors included, runs with known secrets
(the static read and write tokens, an OAuth2 client id and secret, the access tokens the
demo upstream issues); afterwards no text, JSON or binary column of any table holds one.
Secrets exist at rest only as ciphertext, and ciphertext does not contain them.

The autouse canary (tests/conftest.py) watches every HTTP response and log record of the
same run."""

from __future__ import annotations

import base64
import time
from urllib.parse import quote_plus

import pytest
from django.db import connection
from django.utils import timezone

from actions.models import Connector, Credential
from actions.services import credential_set, vault_set_locked
from approvals.models import Plan, PlanStatus
from approvals.services import approval_record
from executors.reconciliation import reconcile
from tests.conftest import (
    OAUTH_CLIENT_ID,
    OAUTH_CLIENT_SECRET,
    READ_TOKEN,
    WRITE_TOKEN,
    known_secrets,
)

PLANS = "/api/v1/plans"
TEXT_TYPES = ("text", "character varying", "character", "json", "jsonb", "bytea", "ARRAY")


def needles(tokens) -> list[tuple[bytes, str]]:
    """Every secret as bytes, plus the forms a careless writer would store it in: the
    HTTP Basic encodings of the OAuth2 client and of a token."""
    found = [(value.encode(), what) for value, what in known_secrets(tokens)]
    basic = f"{quote_plus(OAUTH_CLIENT_ID)}:{quote_plus(OAUTH_CLIENT_SECRET)}".encode()
    found.append((base64.b64encode(basic), "the OAuth2 client's Basic credential"))
    found.append((base64.b64encode(basic).rstrip(b"="), "the OAuth2 client's Basic credential"))
    return found


def text_columns() -> list[tuple[str, str, str]]:
    """(table, column, type) of every column that can hold text or bytes, in every table of
    this database's schema: nothing is left out by name."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.table_name, c.column_name, c.data_type
            FROM information_schema.columns c
            JOIN information_schema.tables t
              ON t.table_schema = c.table_schema AND t.table_name = c.table_name
            WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
              AND c.data_type = ANY(%s)
            ORDER BY 1, 2
            """,
            [list(TEXT_TYPES)],
        )
        return cursor.fetchall()


def use_oauth2_credentials(*, write_client_auth: str = "basic") -> None:
    """Revoke the demo connector's credentials; store OAuth2 read and write ones instead."""
    connector = Connector.objects.get(name="demo")
    Credential.objects.update(revoked_at=timezone.now())
    for role in ("read", "write"):
        credential_set(
            connector=connector,
            role=role,
            secret={"client_id": OAUTH_CLIENT_ID, "client_secret": OAUTH_CLIENT_SECRET},
            scheme=Credential.Scheme.OAUTH2,
            token_url="/oauth/token",
            scope=role,
            client_auth=write_client_auth if role == "write" else "basic",
        )


def secret_hits(tokens=()) -> tuple[list[str], int]:
    """Where in the database a secret sits in clear; and how many columns were read."""
    hits: list[str] = []
    columns = text_columns()
    search = needles(tokens)
    with connection.cursor() as cursor:
        for table, column, data_type in columns:
            select = f'"{column}"' if data_type == "bytea" else f'"{column}"::text'
            cursor.execute(f'SELECT {select} FROM "{table}" WHERE "{column}" IS NOT NULL')
            for (value,) in cursor.fetchall():
                raw = bytes(value) if data_type == "bytea" else str(value).encode()
                hits += [f"{table}.{column}: {what}" for needle, what in search if needle in raw]
    return sorted(set(hits)), len(columns)


@pytest.fixture(autouse=True)
def _no_real_sleep(monkeypatch):
    monkeypatch.setattr("executors.services._sleep", lambda seconds: None)


@pytest.fixture
def decide(django_capture_on_commit_callbacks, reviewer, second_reviewer):
    def decide(plan_id, decision: str = "approve") -> Plan:
        plan = Plan.objects.get(pk=plan_id)
        for person in (reviewer, second_reviewer)[: plan.approvals_required]:
            with django_capture_on_commit_callbacks(execute=False):
                approval_record(
                    plan_id=plan.id,
                    reviewer=person,
                    decision=decision,
                    fingerprint_seen=plan.fingerprint,
                )
            if decision == "deny":
                break
        return Plan.objects.get(pk=plan_id)

    return decide


def test_no_secret_reaches_any_column_of_any_table(
    client, api_headers, upstream, catalog, decide, run, executor_key, settings
):
    emails = iter(f"ada{i}@new.example" for i in range(100))

    def submit(action="update_contact_email", input=None) -> str:
        body = {"action": action, "input": input or {"contact_id": "c-1001", "email": next(emails)}}
        response = client.post(PLANS, body, content_type="application/json", **api_headers)
        assert response.status_code == 201, response.content
        return response.json()["id"]

    def execute(plan_id, expected) -> Plan:
        plan = decide(plan_id)
        assert run(plan) == expected, Plan.objects.get(pk=plan_id).outcome_detail
        client.get(f"{PLANS}/{plan_id}", **api_headers)  # what the agent sees is checked
        return Plan.objects.get(pk=plan_id)

    # --- static bearer credentials ---------------------------------------------------
    execute(submit(), PlanStatus.COMPLETED)
    # Upstream 500 that echoes every request header and the body, after applying.
    upstream.add_fault(
        method="PATCH", path_prefix="/contacts/", status=500, body="echo-request", apply=True
    )
    plan = execute(submit(), PlanStatus.UNKNOWN)
    assert reconcile(plan_id=plan.id) == PlanStatus.COMPLETED
    # 401 echoing the Authorization header, a stack trace and an internal URL.
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", status=401, body="echo")
    execute(submit(), PlanStatus.REJECTED)
    Credential.objects.update(flagged_at=None)
    # No answer in time: unknown, then reconciled.
    Connector.objects.filter(name="demo").update(read_timeout=0.3)
    upstream.add_fault(method="PATCH", path_prefix="/contacts/", delay=0.6)
    plan = execute(submit(), PlanStatus.UNKNOWN)
    Connector.objects.filter(name="demo").update(read_timeout=5)
    # The slow write still lands after the worker gave up: wait for it, or it would
    # change the contact under the next plan's preview (stale instead of completed).
    deadline = time.monotonic() + 10
    while upstream.state()["contacts"]["c-1001"]["email"] != plan.input["email"]:
        assert time.monotonic() < deadline, "the delayed write never landed"
        time.sleep(0.05)
    assert reconcile(plan_id=plan.id) in (PlanStatus.COMPLETED, PlanStatus.REJECTED, "unknown")
    # Denied, and refused while the vault is locked.
    assert decide(submit(), "deny").status == PlanStatus.DENIED
    vault_set_locked(locked=True, actor="test", reason="canary")
    execute(submit(), "skipped:refused")
    vault_set_locked(locked=False, actor="test")
    # An upstream read failure at submission (502 to the agent).
    upstream.add_fault(method="GET", path_prefix="/contacts/", status=500, body="echo-request")
    body = {"action": "update_contact_email", "input": {"contact_id": "c-1001", "email": "x@y.z"}}
    assert client.post(PLANS, body, content_type="application/json", **api_headers).status_code in (
        502,
        504,
    )

    # --- OAuth2 client credentials, read and write ---------------------------------
    use_oauth2_credentials(write_client_auth="body")
    execute(submit(), PlanStatus.COMPLETED)
    upstream.revoke_tokens()  # 401 with the cached tokens: fetched again once
    execute(submit(), PlanStatus.COMPLETED)
    upstream.add_fault(
        method="PATCH", path_prefix="/contacts/", status=500, body="echo-request", apply=True
    )
    plan = execute(submit(), PlanStatus.UNKNOWN)
    assert reconcile(plan_id=plan.id) == PlanStatus.COMPLETED
    # The token endpoint itself fails, echoing the form body with the client secret.
    from actions.oauth import forget_all

    forget_all()
    plan_id = submit()
    upstream.add_fault(path_prefix="/oauth/token", status=400, body="echo-request")
    assert decide(plan_id).status == PlanStatus.APPROVED
    assert run(Plan.objects.get(pk=plan_id)) == PlanStatus.REFUSED
    client.get(f"{PLANS}/{plan_id}", **api_headers)

    tokens = upstream.issued_tokens()
    assert len(tokens) >= 3
    # The upstream really did receive every secret (or the test proves nothing)...
    received = repr(upstream.requests_log())
    assert READ_TOKEN in received and WRITE_TOKEN in received
    assert all(token in received for token in tokens[-2:])
    # ...and none of them is anywhere in the database.
    hits, scanned = secret_hits(tokens)
    assert hits == []
    assert scanned > 50
    assert all(bytes(c.ciphertext) for c in Credential.objects.all())


def test_the_scan_finds_a_planted_secret(db, catalog):
    """The scan is not vacuous: a secret written anywhere is found."""
    from actions.lib.audit import audit_record

    audit_record(kind="test.planted", actor="test", data={"oops": f"Bearer {WRITE_TOKEN}"})
    Credential.objects.filter(role="read").update(flag_reason=OAUTH_CLIENT_SECRET)
    hits, _ = secret_hits()
    assert "approvals_auditevent.data: the upstream write token" in hits
    assert "actions_credential.flag_reason: the OAuth2 client secret" in hits
