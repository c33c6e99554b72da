"""What the worker sends upstream, and what it records, for a set of plans across change
kinds, version kinds and fault cases, byte for byte as the files under
tests/executors/golden/ say.

Each case runs through the worker's own code path (claim, re-read, fence, send, classify,
verify, reconcile) against the demo upstream, a real HTTP server that logs every request it
receives. The file holds every request the upstream received (method, path, the headers
that matter, body, the status it answered) and what Countersign recorded: the plan's
state, detail, verified flag and result, the attempt's state, answer status, sends,
recorded request and notes, and the plan's audit event kinds in order. The credentials'
values, idempotency keys and the upstream's address are replaced by placeholders.

Any change in what is sent or recorded fails here. When the change is meant, write the
files again and read the diff:

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/executors/test_golden_requests.py -q
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from actions.lib.models import AuditEvent
from actions.models import Agent, Connector, Credential
from approvals.models import Attempt, Plan
from executors.reconciliation import pending_follow, reconcile
from tests.conftest import READ_TOKEN, WRITE_TOKEN
from tests.executors.test_execution import NEW_CONTACT, REMINDER

pytestmark = pytest.mark.usefixtures("executor_key")

GOLDEN = Path(__file__).with_name("golden")
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
EMAIL = {"contact_id": "c-1001", "email": "ada@new.example"}
# The request headers whose values shape what the upstream does.
HEADERS = ("authorization", "content-type", "idempotency-key", "if-match", "if-none-match")


@dataclass
class Case:
    action: str
    input: dict[str, Any]
    # Before the worker runs (the plan is approved): faults, a changed target.
    before: Callable[[Any], Any] = lambda upstream: None
    # After: the looks a worker would take next, by name.
    then: list[str] = field(default_factory=list)
    # The connector's read timeout, for a case that needs one to expire.
    read_timeout: float | None = None
    # The action's definition, changed for this case (merged into ``write`` / set whole).
    write: dict[str, Any] | None = None
    status: dict[str, Any] | None = None


def _fault(**kw):
    return lambda upstream: upstream.add_fault(**kw)


def _mutate(path: str, patch: dict[str, Any]):
    return lambda upstream: upstream.mutate(path, patch)


CASES: dict[str, Case] = {
    # Change kinds and version kinds, answered as asked.
    "update-etag": Case("update_contact_email", EMAIL),
    "update-field": Case("update_invoice_memo", {"invoice_id": "inv-2001", "memo": "hi"}),
    "replace-hash": Case("replace_note", {"note_id": "n-1", "title": "T", "body": "B"}),
    "create-absent": Case("create_contact", NEW_CONTACT),
    "delete-etag": Case("delete_contact", {"contact_id": "c-1003"}),
    "invoke-keyed": Case("send_reminder", REMINDER),
    "invoke-accepted": Case(
        "start_deployment", {"service": "api", "version": "v1.2.3"}, then=["follow", "follow"]
    ),
    "read": Case("get_contact", {"contact_id": "c-1001"}),
    # Faults.
    "stale-before-send": Case(
        "update_contact_email", EMAIL, before=_mutate("/contacts/c-1001", {"phone": "+1 555"})
    ),
    "412-target-unchanged": Case(
        "update_contact_email", EMAIL, before=_fault(method="PATCH", status=412)
    ),
    "409-conflict": Case("update_contact_email", EMAIL, before=_fault(method="PATCH", status=409)),
    "429-retry-after": Case(
        "send_reminder", REMINDER, before=_fault(method="POST", status=429, retry_after=0)
    ),
    "429-not-keyed": Case(
        "update_contact_email", EMAIL, before=_fault(method="PATCH", status=429, retry_after=0)
    ),
    "401-write-credential": Case(
        "update_contact_email", EMAIL, before=_fault(method="PATCH", status=401)
    ),
    "403-write-credential": Case(
        "update_contact_email", EMAIL, before=_fault(method="PATCH", status=403)
    ),
    "500-applied-then-reconciled": Case(
        "update_contact_email",
        EMAIL,
        before=_fault(method="PATCH", status=500, apply=True),
        then=["reconcile"],
    ),
    "503-keyed-resent": Case(
        "send_reminder", REMINDER, before=_fault(method="POST", status=503, apply=True)
    ),
    "timeout-after-send": Case(
        "update_contact_email",
        EMAIL,
        before=_fault(method="PATCH", delay=1.0, apply=True),
        read_timeout=0.3,
        then=["wait", "reconcile"],
    ),
    "dropped-not-applied": Case(
        "update_contact_email",
        EMAIL,
        before=_fault(method="PATCH", close=True),
        then=["reconcile"],
    ),
    "2xx-read-back-differs": Case(
        "update_contact_email", EMAIL, before=_fault(method="PATCH", ignore=True)
    ),
    "unknown-invoke-same-key": Case(
        "send_reminder",
        REMINDER,
        before=_fault(method="POST", status=503, apply=True),
        write={"retry": {"max_retries": 0}},
        then=["reconcile"],
    ),
    "unknown-invoke-status-request": Case(
        "start_deployment",
        {"service": "web", "version": "v2.0.0"},
        before=_fault(method="POST", status=503, apply=True),
        status={
            "path": "/deployments/dep-1",
            "done_when": {"pointer": "/status", "equals": "succeeded"},
            "failed_when": {"pointer": "/status", "equals": "failed"},
        },
        then=["reconcile", "reconcile"],
    ),
}


def _redefine(catalog, case: Case) -> None:
    from actions.catalog import action_define

    definition = dict(catalog[case.action].definition)
    if case.write is not None:
        definition["write"] = {**definition["write"], **case.write}
    if case.status is not None:
        definition["status"] = case.status
    action_define(name=case.action, definition=definition, actor="test")


class _Normal:
    """Values that differ from run to run, replaced by what they stand for."""

    def __init__(self, upstream, key: str) -> None:
        self.words = {
            READ_TOKEN: "<read-token>",
            WRITE_TOKEN: "<write-token>",
            upstream.url: "<upstream>",
        }
        if key:
            self.words[key] = "<idempotency-key>"

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            for word, name in self.words.items():
                value = value.replace(word, name)
            return value
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v) for v in value]
        return value


def observed(upstream, plan: Plan, results: list[str]) -> dict[str, Any]:
    plan = Plan.objects.get(pk=plan.pk)
    attempt = Attempt.objects.filter(plan=plan).first()
    normal = _Normal(upstream, attempt.idempotency_key if attempt else "")
    requests = [
        {
            "method": entry["method"],
            "path": entry["path"],
            "headers": {k: v for k, v in sorted(entry["headers"].items()) if k in HEADERS},
            "body": entry["body"],
            "status": entry["status"],
        }
        for entry in upstream.requests_log()
    ]
    recorded: dict[str, Any] = {
        "returned": results,
        "plan": {
            "status": plan.status,
            "outcome_detail": plan.outcome_detail,
            "upstream_status": plan.upstream_status,
            "verified": plan.verified,
            "result": plan.result,
            "precondition": plan.precondition,
            "write_request": plan.write_request,
        },
        "events": list(
            AuditEvent.objects.filter(plan=plan).order_by("id").values_list("kind", flat=True)
        ),
        "credential_flagged": Credential.objects.filter(flagged_at__isnull=False).exists(),
    }
    if attempt is not None:
        reconciliation = dict(attempt.reconciliation or {})
        reconciliation.pop("at", None)
        recorded["attempt"] = {
            "state": attempt.state,
            "response_status": attempt.response_status,
            "response_class": (
                f"{attempt.response_status // 100}xx" if attempt.response_status else None
            ),
            "sends": attempt.sends,
            "request": attempt.request,
            "revalidation": attempt.revalidation,
            "error": attempt.error,
            "status_path": attempt.status_path,
            "reconciliation": reconciliation,
        }
    return normal({"requests": requests, **recorded})


def _until_answered(upstream, *, seconds: float = 10.0) -> None:
    """Wait until the upstream has answered every request it received (a delayed write
    has landed) before anyone reads the target back: the upstream logs a status once it
    has acted, before it sends the answer."""
    deadline = time.monotonic() + seconds
    while any(entry["status"] is None for entry in upstream.requests_log()):
        assert time.monotonic() < deadline, "the upstream never answered"
        time.sleep(0.05)


@pytest.mark.parametrize("name", sorted(CASES))
def test_requests_and_outcomes_match_the_golden_file(name, upstream, catalog, agent, approved, run):
    case = CASES[name]
    Agent.objects.filter(pk=agent.pk).update(attributes={"workspace": "ws-blue"})
    if case.write is not None or case.status is not None:
        _redefine(catalog, case)
    if case.read_timeout is not None:
        Connector.objects.filter(name="demo").update(read_timeout=case.read_timeout)
    plan = approved(case.action, case.input)
    case.before(upstream)
    results = [run(plan)]
    for step in case.then:
        if step == "wait":
            _until_answered(upstream)
        elif step == "follow":
            results.append(pending_follow(plan_id=plan.id))
        else:
            results.append(reconcile(plan_id=plan.id))
    text = json.dumps(observed(upstream, plan, results), indent=2, sort_keys=True) + "\n"
    path = GOLDEN / f"{name}.json"
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"no golden file for {name}: run with UPDATE_GOLDEN=1 and read it"
    assert text == path.read_text(), f"{name} differs from {path.name}"
