"""Verified effects against an upstream with fields of its own: a create gets an id, a
creation time and a version; every later write bumps the version and the update time.
The read-back compares the fields the plan sets, so those fields are expected and the
write is verified; a planned field the upstream did not store as planned is not.

The worker plays in this process (``executor_key``) against a real HTTP server on
127.0.0.1; the reconciliation of an unknown outcome makes the same comparison."""

from __future__ import annotations

import copy
import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from actions.catalog import action_define
from actions.lib.models import AuditEvent
from actions.models import Connector, Credential
from actions.services import agent_create, credential_set
from approvals.models import Attempt, Plan, PlanStatus
from approvals.services import plan_submit
from executors.reconciliation import ABSENT, holds, read_back, reconcile
from tests.conftest import READ_TOKEN, WRITE_TOKEN

pytestmark = pytest.mark.usefixtures("executor_key")

SEED = {
    "r-1": {
        "id": "r-1",
        "name": "Ada",
        "email": "ada@example.test",
        "nickname": "countess",
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "version": 3,
    }
}


class _Records(BaseHTTPRequestHandler):
    """Records under /records/{id}, versioned by a strong ETag ``"<version>"``. The
    server owns ``id``, ``created_at``, ``updated_at`` and ``version``. ``quirks`` makes
    it misbehave: ``drop`` (a field it silently does not store), ``lower`` (a field it
    lower-cases), ``ignore`` (a write answered 200 but not applied, though the record's
    version and update time still move), ``hang_up`` (a write applied, then the
    connection closed with no answer)."""

    records: dict[str, dict] = {}
    quirks: dict[str, str | bool] = {}
    clock = itertools.count(1)
    writes: list[str] = []

    def _now(self) -> str:
        return f"2026-02-01T00:00:{next(self.clock) % 60:02d}Z"

    def _answer(self, status: int, body: dict | None = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
            if "version" in body:
                self.send_header("ETag", f'"{body["version"]}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _id(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))

    def _stored(self, fields: dict) -> dict:
        """What the upstream keeps of the fields it was sent."""
        fields = {k: v for k, v in fields.items() if k != self.quirks.get("drop")}
        lower = self.quirks.get("lower")
        if lower in fields:
            fields[lower] = fields[lower].lower()
        return fields

    def _matches(self, current: dict) -> bool:
        return self.headers.get("If-Match") == f'"{current["version"]}"'

    def _commit(self, record_id: str, record: dict, status: int) -> None:
        current = self.records.get(record_id)
        if self.quirks.get("ignore") and current is not None:
            # Answers as if applied; only its own bookkeeping moves.
            record = {**current, "version": current["version"] + 1, "updated_at": self._now()}
        self.records[record_id] = record
        if self.quirks.get("hang_up"):
            self.close_connection = True
            return
        self._answer(status, record)

    def do_GET(self):  # noqa: N802 - the http.server interface
        record = self.records.get(self._id())
        self._answer(200, record) if record else self._answer(404, {"error": "not found"})

    def do_PUT(self):  # noqa: N802
        self.writes.append("PUT")
        record_id, body = self._id(), self._body()
        current = self.records.get(record_id)
        if self.headers.get("If-None-Match") == "*":
            if current is not None:
                return self._answer(412, {"error": "exists"})
            now = self._now()
            fields = self._stored(body)
            record = {**fields, "id": record_id, "created_at": now, "updated_at": now}
            return self._commit(record_id, {**record, "version": 1}, 201)
        if current is None or not self._matches(current):
            return self._answer(412, {"error": "precondition failed"})
        record = {
            **self._stored(body),
            "id": record_id,
            "created_at": current["created_at"],
            "updated_at": self._now(),
            "version": current["version"] + 1,
        }
        self._commit(record_id, record, 200)

    def do_PATCH(self):  # noqa: N802
        self.writes.append("PATCH")
        record_id, patch = self._id(), self._body()
        current = self.records.get(record_id)
        if current is None or not self._matches(current):
            return self._answer(412, {"error": "precondition failed"})
        record = copy.deepcopy(current)
        for key, value in self._stored(patch).items():
            if value is None:
                record.pop(key, None)
            else:
                record[key] = value
        record.update(updated_at=self._now(), version=current["version"] + 1)
        self._commit(record_id, record, 200)

    def do_DELETE(self):  # noqa: N802
        self.writes.append("DELETE")
        current = self.records.get(self._id())
        if current is None or not self._matches(current):
            return self._answer(412, {"error": "precondition failed"})
        del self.records[self._id()]
        self._answer(204)

    def log_message(self, *args):
        pass


def _action(kind: str, method: str, body: dict | None, required: list[str]) -> dict:
    properties = {
        "record_id": {"type": "string", "pattern": "^r-[0-9]{1,5}$", "maxLength": 10},
        "name": {"type": "string", "maxLength": 50},
        "email": {"type": "string", "maxLength": 100},
        "nickname": {"type": "string", "maxLength": 50},
    }
    write = {"method": method, "precondition": "if_none_match" if kind == "create" else "if_match"}
    if body is not None:
        write["body"] = {key: {"$input": value} for key, value in body.items()}
    return {
        "title": f"{kind} one record",
        "connector": "records",
        "kind": kind,
        "consequence_class": "reversible",
        "card": dict.fromkeys(["effect", "scope", "result", "consent", "retry"], "Said."),
        "input_schema": {
            "type": "object",
            "additionalProperties": False,
            "required": ["record_id", *required],
            "properties": {k: v for k, v in properties.items() if k in ("record_id", *required)},
        },
        "target": "/records/{record_id}",
        "version": {"source": "etag"},
        "write": write,
    }


ACTIONS = {
    "create_record": _action(
        "create",
        "PUT",
        {"name": "name", "email": "email", "nickname": "nickname"},
        ["name", "email", "nickname"],
    ),
    "update_record_email": _action("update", "PATCH", {"email": "email"}, ["email"]),
    "replace_record": _action(
        "replace", "PUT", {"name": "name", "email": "email"}, ["name", "email"]
    ),
    "delete_record": _action("delete", "DELETE", None, []),
}
NEW = {"record_id": "r-2", "name": "Grace", "email": "grace@example.test", "nickname": "amazing"}


@pytest.fixture
def records(db):
    _Records.records = copy.deepcopy(SEED)
    _Records.quirks = {}
    _Records.writes = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Records)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    connector = Connector.objects.create(
        name="records", base_url=f"http://127.0.0.1:{server.server_port}"
    )
    credential_set(connector=connector, role=Credential.Role.READ, secret={"token": READ_TOKEN})
    credential_set(connector=connector, role=Credential.Role.WRITE, secret={"token": WRITE_TOKEN})
    for name, definition in ACTIONS.items():
        action_define(name=name, definition=definition, actor="test")
    yield _Records
    server.shutdown()
    server.server_close()


@pytest.fixture
def propose(records, approve):
    agent, token = agent_create(name="recorder", action_names=list(ACTIONS), active=True)

    def propose(action: str, input: dict) -> Plan:
        plan, _ = plan_submit(agent=agent, action_name=action, input=input, reason="")
        return approve(plan)

    propose.headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    return propose


def settled(plan) -> Plan:
    return Plan.objects.get(pk=plan.pk)


def read_back_of(plan) -> dict:
    """What the worker's read-back found, as the audit trail records it."""
    event = AuditEvent.objects.get(plan_id=plan.pk, kind=f"execution.{settled(plan).status}")
    return event.data["read_back"]


# --- the upstream adds fields: verified ------------------------------------------------


def test_a_create_the_upstream_adds_fields_to_is_completed_and_verified(
    records, propose, run, client
):
    plan = propose("create_record", NEW)
    assert run(plan) == PlanStatus.COMPLETED
    stored = records.records["r-2"]
    # The upstream's own fields are there, and they are not the plan's.
    assert {"id", "created_at", "updated_at", "version"} <= set(stored) - set(plan.after)
    plan = settled(plan)
    assert plan.verified is True, plan.outcome_detail
    assert plan.outcome_detail == "applied, and reading the target back shows the change"
    outcome = client.get(f"/api/v1/plans/{plan.id}", **propose.headers).json()["outcome"]
    assert outcome["state"] == "completed" and outcome["verified"] is True
    # The same comparison, asked again, agrees.
    assert read_back(plan)[0] == PlanStatus.COMPLETED


def test_an_update_the_upstream_stamps_is_completed_and_verified(records, propose, run):
    plan = propose("update_record_email", {"record_id": "r-1", "email": "ada@new.test"})
    before = copy.deepcopy(records.records["r-1"])
    assert run(plan) == PlanStatus.COMPLETED
    after = records.records["r-1"]
    assert after["version"] == before["version"] + 1
    assert after["updated_at"] != before["updated_at"]
    assert settled(plan).verified is True, settled(plan).outcome_detail


def test_a_replace_keeping_the_upstreams_fields_is_verified_and_says_what_it_kept(
    records, propose, run
):
    plan = propose("replace_record", {"record_id": "r-1", "name": "Ada L.", "email": "a@l.test"})
    # The preview shows the fields the body leaves out as removed, the upstream's among them.
    removed = {c["path"] for c in plan.changes if c["op"] == "remove"}
    assert removed == {"/id", "/created_at", "/updated_at", "/version", "/nickname"}
    assert run(plan) == PlanStatus.COMPLETED
    assert "nickname" not in records.records["r-1"]
    assert settled(plan).verified is True, settled(plan).outcome_detail
    # The fields the upstream kept through the replace are named in the read-back.
    assert read_back_of(plan)["kept"] == ["/created_at", "/id", "/updated_at", "/version"]


def test_a_delete_is_verified_by_the_target_being_absent(records, propose, run):
    plan = propose("delete_record", {"record_id": "r-1"})
    assert run(plan) == PlanStatus.COMPLETED
    assert "r-1" not in records.records
    assert settled(plan).verified is True


# --- a planned field not as planned: not verified -----------------------------------------


def test_a_create_whose_field_the_upstream_did_not_store_is_not_verified(records, propose, run):
    records.quirks = {"drop": "nickname"}
    plan = propose("create_record", NEW)
    assert run(plan) == PlanStatus.COMPLETED  # the upstream said 201 and the record exists
    plan = settled(plan)
    assert plan.verified is False
    assert "/nickname differs from the plan" in plan.outcome_detail
    assert read_back_of(plan)["differs"] == ["/nickname"]
    assert records.writes == ["PUT"]  # never sent again


def test_an_update_answered_200_but_not_applied_is_not_applied_though_the_version_moved(
    records, propose, run
):
    records.quirks = {"ignore": True}
    plan = propose("update_record_email", {"record_id": "r-1", "email": "ada@new.test"})
    assert run(plan) == PlanStatus.NOT_APPLIED
    assert records.records["r-1"]["email"] == "ada@example.test"
    assert records.records["r-1"]["version"] == 4  # the upstream's bookkeeping moved anyway
    assert settled(plan).verified is False
    assert records.writes == ["PATCH"]


def test_a_value_the_upstream_normalises_is_reported_not_verified(records, propose, run):
    records.quirks = {"lower": "email"}
    plan = propose("create_record", {**NEW, "email": "Grace@Example.TEST"})
    assert run(plan) == PlanStatus.COMPLETED
    assert records.records["r-2"]["email"] == "grace@example.test"
    plan = settled(plan)
    assert plan.verified is False
    assert "/email differs from the plan" in plan.outcome_detail
    assert "store values differently" in plan.outcome_detail


# --- reconciliation makes the same comparison ----------------------------------------------


def test_an_unknown_create_is_reconciled_as_applied_and_verified(records, propose, run):
    records.quirks = {"hang_up": True}
    plan = propose("create_record", NEW)
    assert run(plan) == PlanStatus.UNKNOWN
    assert "r-2" in records.records  # applied, though nobody heard the answer
    records.quirks = {}
    assert reconcile(plan_id=plan.id) == PlanStatus.COMPLETED
    plan = settled(plan)
    assert plan.verified is True and plan.outcome_detail == "reconciled: applied"
    assert records.writes == ["PUT"]


def test_an_unknown_create_not_stored_as_planned_stays_unknown_and_names_the_field(
    records, propose, run
):
    records.quirks = {"hang_up": True, "drop": "nickname"}
    plan = propose("create_record", NEW)
    assert run(plan) == PlanStatus.UNKNOWN
    records.quirks = {}
    assert reconcile(plan_id=plan.id) == PlanStatus.UNKNOWN
    finding = Attempt.objects.get(plan_id=plan.pk).reconciliation
    assert finding["verdict"] == "changed by someone else"
    assert finding["differs"] == ["/nickname"]
    assert settled(plan).status == PlanStatus.UNKNOWN and not settled(plan).verified


# --- what "as planned" means -----------------------------------------------------------------


def test_a_planned_value_holds_with_the_upstreams_additions_and_only_then():
    doc = {
        "address": {"city": "Paris", "geo": {"lat": 48.8}},
        "tags": [{"name": "a", "id": 1}],
        "count": 1,
        "on": True,
        "gone": None,
    }
    # The upstream may add fields at any depth, inside array items too.
    assert holds({"city": "Paris"}, doc, "/address")
    assert holds([{"name": "a"}], doc, "/tags")
    # But not add or drop items, change a planned value, or change its JSON type.
    assert not holds([{"name": "a"}, {"name": "b"}], doc, "/tags")
    assert not holds({"city": "paris"}, doc, "/address")
    assert holds(1.0, doc, "/count") and not holds(True, doc, "/count")
    assert not holds(1, doc, "/on") and not holds("1", doc, "/count")
    # A removed field is absent or null; a planned field that is absent does not hold.
    assert holds(ABSENT, doc, "/missing") and holds(ABSENT, doc, "/gone")
    assert not holds(ABSENT, doc, "/count") and not holds("x", doc, "/missing")
