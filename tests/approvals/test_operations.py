"""/healthz, /readyz, /metrics, manage.py healthcheck and the log lines' context, in this
process (tests/e2e/test_operations.py runs them across real processes)."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from actions.lib import dispatch, logcontext
from actions.lib.checkpoints import audit_seal
from actions.lib.models import AuditEvent
from actions.models import VaultState
from approvals.models import Heartbeat, Plan
from approvals.ops.heartbeats import worker_heartbeat_name

CHECKS = ["database", "broker", "migrations", "sweeper", "workers"]


def beat(name: str, kind: str, age: float = 0.0) -> None:
    at = timezone.now() - timedelta(seconds=age)
    Heartbeat.objects.update_or_create(
        name=name, defaults={"kind": kind, "at": at, "started_at": at}
    )


@pytest.fixture
def alive(db):
    """A fresh sweeper run and one fresh worker of this deployment's queue."""
    beat("sweeper", Heartbeat.Kind.SWEEPER)
    beat(worker_heartbeat_name("w1@host"), Heartbeat.Kind.WORKER)


def samples(text: str) -> dict[tuple[str, tuple], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


# --- /healthz, /readyz -----------------------------------------------------------------


def test_healthz_needs_nothing(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "alive"}
    assert client.post("/healthz").status_code == 405


def test_readyz_is_ready_with_fresh_heartbeats(client, alive):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ready"
    assert [c["name"] for c in body["checks"]] == CHECKS
    assert all(c["ok"] for c in body["checks"])
    assert response["Cache-Control"].startswith("max-age=0")


def test_readyz_names_what_is_missing(client, db, settings):
    beat("sweeper", Heartbeat.Kind.SWEEPER, age=3 * settings.COUNTERSIGN_SWEEP_SECONDS + 1)
    # A fresh worker of another queue (another deployment on this database) does not count.
    beat("worker:another-queue:w1@host", Heartbeat.Kind.WORKER)
    response = client.get("/readyz")
    assert response.status_code == 503
    checks = {c["name"]: c for c in response.json()["checks"]}
    assert checks["database"]["ok"] and checks["broker"]["ok"] and checks["migrations"]["ok"]
    assert checks["sweeper"] == {
        "name": "sweeper",
        "ok": False,
        "detail": "stale",
        "value": pytest.approx(3 * settings.COUNTERSIGN_SWEEP_SECONDS + 1, abs=1),
    }
    assert checks["workers"]["ok"] is False and checks["workers"]["value"] == 0


def test_readyz_without_a_broker_names_no_host(client, alive, settings):
    from celery import current_app

    previous = current_app.conf.broker_read_url
    current_app.conf.broker_read_url = "redis://127.0.0.1:1/0"  # nothing listens there
    try:
        response = client.get("/readyz")
    finally:
        current_app.conf.broker_read_url = previous
    assert response.status_code == 503
    checks = {c["name"]: c for c in response.json()["checks"]}
    assert checks["broker"] == {"name": "broker", "ok": False, "detail": "unreachable"}
    text = response.content.decode()
    assert "127.0.0.1" not in text and "redis" not in text


def test_readyz_body_never_names_hosts_or_databases(client, alive, settings):
    text = client.get("/readyz").content.decode()
    name = settings.DATABASES["default"]["NAME"]
    for secret_ish in (name, "127.0.0.1", "postgres", settings.SECRET_KEY):
        assert secret_ish not in text


def test_readyz_with_migrations_pending(client, alive, monkeypatch):
    import approvals.ops.health

    assert approvals.ops.health.unapplied_migrations() == 0  # this database: all applied
    monkeypatch.setattr(approvals.ops.health, "_migrated", False)
    monkeypatch.setattr(
        approvals.ops.health.MigrationExecutor, "migration_plan", lambda self, targets: [1, 2]
    )
    response = client.get("/readyz")
    assert response.status_code == 503
    checks = {c["name"]: c for c in response.json()["checks"]}
    assert checks["migrations"] == {
        "name": "migrations",
        "ok": False,
        "detail": "not applied",
        "value": 2,
    }


def test_readyz_is_rate_limited_per_address(client, alive, settings):
    settings.COUNTERSIGN_HEALTH_RATE_LIMIT = "2/minute"
    # Addresses of this test run's own (the counters live in the shared Redis).
    address, other = ({"REMOTE_ADDR": f"fd00::{uuid.uuid4().hex[:4]}"} for _ in range(2))
    assert [client.get("/readyz", **address).status_code for _ in range(3)] == [200, 200, 429]
    limited = client.get("/readyz", **address)
    assert limited.status_code == 429 and int(limited["Retry-After"]) >= 1
    # Another address is not limited by this one.
    assert client.get("/readyz", **other).status_code == 200


def test_healthcheck_command_exit_status(db, capsys, settings):
    with pytest.raises(SystemExit) as exited:
        call_command("healthcheck")
    assert exited.value.code == 1
    out = capsys.readouterr().out
    assert "FAIL workers" in out and out.strip().endswith("not ready")
    beat("sweeper", Heartbeat.Kind.SWEEPER)
    beat(worker_heartbeat_name("w1@host"), Heartbeat.Kind.WORKER)
    call_command("healthcheck", "--json")  # no SystemExit: ready
    assert json.loads(capsys.readouterr().out)["status"] == "ready"


# --- /metrics --------------------------------------------------------------------------


def test_metrics_are_off_without_a_token_or_allow_list(client, db, settings):
    settings.COUNTERSIGN_METRICS_TOKEN = ""
    settings.COUNTERSIGN_METRICS_ALLOW = []
    assert client.get("/metrics").status_code == 404


def test_metrics_need_the_token_or_an_allowed_address(client, db, settings):
    settings.COUNTERSIGN_METRICS_TOKEN = "scrape-" + uuid.uuid4().hex
    settings.COUNTERSIGN_METRICS_ALLOW = ["10.1.0.0/16"]
    outsider = {"REMOTE_ADDR": "192.0.2.7"}
    denied = client.get("/metrics", **outsider)
    assert denied.status_code == 401 and denied["WWW-Authenticate"].startswith("Bearer")
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope", **outsider)
    assert wrong.status_code == 401
    token = settings.COUNTERSIGN_METRICS_TOKEN
    ok = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}", **outsider)
    assert ok.status_code == 200
    assert ok["Content-Type"].startswith("text/plain; version=0.0.4")
    assert token not in ok.content.decode()
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200


def test_metrics_read_the_database_when_scraped(client, make_plan, settings, alive, sealer_key):
    settings.COUNTERSIGN_METRICS_ALLOW = ["127.0.0.1/32"]
    old = make_plan()
    make_plan(input={"contact_id": "c-1002", "email": "b@new.example"})
    Plan.objects.filter(id=old.id).update(created_at=timezone.now() - timedelta(minutes=10))
    VaultState.objects.update_or_create(id=VaultState.SINGLETON_ID, defaults={"locked": True})
    found = samples(client.get("/metrics").content.decode())
    assert found[("countersign_plans_awaiting_decision", ())] == 2
    assert found[("countersign_oldest_awaiting_plan_age_seconds", ())] >= 600
    assert 0 < found[("countersign_awaiting_plan_soonest_expiry_seconds", ())] <= 3600
    assert found[("countersign_vault_locked", ())] == 1
    assert found[("countersign_workers_alive", ())] == 1
    assert found[("countersign_sweeper_lag_seconds", ())] < 3 * settings.COUNTERSIGN_SWEEP_SECONDS
    assert found[("countersign_database_up", ())] == 1
    assert found[("countersign_broker_up", ())] == 1
    # The proposals' audit events wait for the sealer (none runs here); once sealed, 0.
    found = samples(client.get("/metrics").content.decode())
    oldest = AuditEvent.objects.order_by("id").values_list("at", flat=True).first()
    age = found[("countersign_audit_unsealed_age_seconds", ())]
    assert 0 < age <= (timezone.now() - oldest).total_seconds()
    assert audit_seal()["events"] >= 2
    found = samples(client.get("/metrics").content.decode())
    assert found[("countersign_audit_unsealed_age_seconds", ())] == 0
    # Counters are there with their labels, and no label holds a plan id or target.
    text = client.get("/metrics").content.decode()
    assert "countersign_upstream_requests_total" in text
    assert str(old.id) not in text and "c-1001" not in text


# --- log lines -------------------------------------------------------------------------


def _record(message: str = "hello") -> logging.LogRecord:
    record = logging.LogRecord("approvals.test", logging.INFO, __file__, 1, message, (), None)
    logcontext.ContextFilter().filter(record)
    return record


def test_json_lines_carry_the_bound_plan():
    with logcontext.scope(plan_id="p-1", correlation_id="c-1", agent="a-1", action="send"):
        line = logcontext.JsonFormatter().format(_record("plan moved"))
    entry = json.loads(line)
    assert entry["message"] == "plan moved" and entry["level"] == "INFO"
    assert {k: entry[k] for k in logcontext.FIELDS} == {
        "plan_id": "p-1",
        "correlation_id": "c-1",
        "agent": "a-1",
        "action": "send",
    }
    assert "\n" not in line
    assert "plan_id" not in json.loads(logcontext.JsonFormatter().format(_record()))


def test_plain_lines_append_the_fields():
    with logcontext.scope(plan_id="p-1", correlation_id="c-1"):
        line = logcontext.PlainFormatter().format(_record("plan moved"))
    assert line.endswith(" INFO approvals.test [plan_id=p-1 correlation_id=c-1] plan moved")


def test_a_submission_logs_with_the_plan_s_correlation_id(make_plan, caplog):
    with caplog.at_level(logging.INFO):
        plan = make_plan()
    proposed = [r for r in caplog.records if "proposed" in r.getMessage()]
    assert proposed and proposed[0].correlation_id == str(plan.correlation_id)
    assert proposed[0].plan_id == str(plan.id) and proposed[0].agent == str(plan.agent_id)


def test_published_tasks_carry_the_context_in_their_headers(monkeypatch):
    from celery import current_app

    sent = {}
    monkeypatch.setattr(current_app, "send_task", lambda name, **kw: sent.update(kw))
    with logcontext.scope(plan_id="p-9", correlation_id="c-9"):
        assert dispatch.publish(dispatch.EXECUTE_PLAN, "p-9")
    assert sent["headers"] == {logcontext.HEADER: {"plan_id": "p-9", "correlation_id": "c-9"}}
    dispatch.publish(dispatch.EXECUTE_PLAN, "p-9")
    assert sent["headers"] is None


def test_the_deployment_examples_name_only_metrics_that_exist(client, alive, settings, make_plan):
    """The alert rules, the scrape example and the Grafana dashboard under docs/deploy/
    use only series /metrics serves (a renamed metric would silently never alert)."""
    import re

    from demo.processes import ROOT

    settings.COUNTERSIGN_METRICS_ALLOW = ["127.0.0.1/32"]
    make_plan()  # a plan awaiting a decision: its expiry gauge is there
    text = client.get("/metrics").content.decode()
    served = set()
    for family in text_string_to_metric_families(text):
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}
        served |= {family.name + s for s in suffixes.get(family.type, [""])}
    deploy = ROOT / "docs" / "deploy"
    used = set()
    for path in [*deploy.rglob("*.yml"), *deploy.rglob("*.json")]:
        used |= set(re.findall(r"\bcountersign_[a-z_]+", path.read_text()))
    used = {name for name in used if not name.endswith("_")}
    assert used and used <= served, sorted(used - served)
