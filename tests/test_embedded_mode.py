"""The embedded mode (`make run`: SQLite, no external services) runs a plan from
proposal to effect with the same code: the catalog generation's SQLite triggers, the
audit trail numbered by SQLite (no gaps) and sealed, the plain-SQL vault check and sending
fence. Run in a subprocess, since this suite's own database is PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import json, pathlib, sys, django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from actions.catalog import load_catalog
from demo.upstream import DemoUpstream
from actions.models import Connector, Credential, VaultState
from actions.services import agent_create, agent_revoke, agent_authenticate, credential_set
from actions.lib.checkpoints import audit_seal, audit_verify
from approvals.services import approval_record, plan_submit
from executors.services import execution_run

upstream = DemoUpstream(read_token="r-token-embedded", write_token="w-token-embedded").start()
try:
    catalog = pathlib.Path(sys.argv[1])
    load_catalog(catalog.read_text(), base_urls={"demo": upstream.url}, base_dir=catalog.parent)
    demo = Connector.objects.get(name="demo")
    credential_set(connector=demo, role=Credential.Role.READ, secret={"token": "r-token-embedded"})
    credential_set(connector=demo, role=Credential.Role.WRITE, secret={"token": "w-token-embedded"})
    agent, token = agent_create(name="a", action_names=["update_contact_email"], active=True)
    reviewer = get_user_model().objects.create_user(username="rita")
    reviewer.user_permissions.add(Permission.objects.get(codename="review_plan"))
    reviewer = get_user_model().objects.get(pk=reviewer.pk)
    out = {}
    for n in range(2):  # the second round runs with this process's cache warm
        plan, _ = plan_submit(
            agent=agent_authenticate(token),
            action_name="update_contact_email",
            input={"contact_id": "c-1001", "email": f"embedded{n}@new.example"},
        )
        approval_record(plan_id=plan.id, reviewer=reviewer, decision="approve",
                        fingerprint_seen=plan.fingerprint)
        out[f"run{n}"] = execution_run(plan_id=plan.id)
    # The agent's rate as the policies count it (plain SQL, on SQLite too).
    from django.utils import timezone
    from approvals.decisions.policies import agent_rate
    out["rate"] = agent_rate(agent_id=agent.pk, action_id=plan.action_id, now=timezone.now())
    # A locked vault refuses at claim; a revoked agent is refused at once.
    plan, _ = plan_submit(agent=agent, action_name="update_contact_email",
                          input={"contact_id": "c-1001", "email": "locked@new.example"})
    approval_record(plan_id=plan.id, reviewer=reviewer, decision="approve",
                    fingerprint_seen=plan.fingerprint)
    VaultState.objects.update_or_create(id=1, defaults={"locked": True})
    out["locked"] = execution_run(plan_id=plan.id)
    agent_revoke(name="a")
    out["revoked_token"] = agent_authenticate(token) is None
    out["email"] = upstream.state()["contacts"]["c-1001"]["email"]
    sealed = audit_seal()
    report = audit_verify()
    out["audit"] = report.ok and report.events == report.sealed == sealed["events"] > 0
    # Readiness and metrics on SQLite, the metrics in one process (no multiprocess dir).
    from approvals.ops.health import readiness
    from approvals.ops.monitoring import metrics_text
    ready, body = readiness()
    out["checks"] = {c["name"]: c["ok"] for c in body["checks"]}
    text = metrics_text().decode()
    out["metrics"] = [line for line in text.splitlines() if line.startswith((
        'countersign_outcomes_total{state="completed"}', "countersign_vault_locked ",
        "countersign_plans_awaiting_decision ",
    ))]
finally:
    upstream.stop()
print(json.dumps(out))
"""


def test_a_plan_runs_end_to_end_on_sqlite(tmp_path, worker_keys, audit_keys):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COUNTERSIGN_", "CELERY_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        CELERY_BROKER_URL="memory://",
        COUNTERSIGN_ENV="test",
        COUNTERSIGN_SECRET_KEY="embedded-" + "x" * 50,
        COUNTERSIGN_FERNET_KEYS=",".join(settings.COUNTERSIGN_FERNET_KEYS),
        COUNTERSIGN_WORKER_PUBLIC_KEY=worker_keys["public"],
        COUNTERSIGN_WORKER_KEY_FILE=worker_keys["private_file"],
        COUNTERSIGN_AUDIT_PUBLIC_KEY=audit_keys["public"],
        COUNTERSIGN_AUDIT_KEY_FILE=audit_keys["private_file"],
        COUNTERSIGN_RATE_LIMIT="",
    )
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT / "demo" / "catalog.yaml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "run0": "completed",
        "run1": "completed",
        "rate": [2, 2],
        "locked": "skipped:refused",
        "revoked_token": True,
        "email": "embedded1@new.example",
        "audit": True,
        # No worker and no sweeper ran here: not ready, and it says why.
        "checks": {
            "database": True,
            "broker": True,
            "migrations": True,
            "sweeper": False,
            "workers": False,
        },
        "metrics": [
            'countersign_outcomes_total{state="completed"} 2.0',
            "countersign_plans_awaiting_decision 0.0",
            "countersign_vault_locked 1.0",
        ],
    }
