"""The vault lock: while on, every execution is refused and nothing is sent."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from actions.lib.models import AuditEvent
from actions.models import VaultState
from actions.services import vault_set_locked
from approvals.models import Attempt, Plan, PlanStatus
from executors import services as executor_services


def fresh(plan) -> Plan:
    return Plan.objects.get(pk=plan.pk)


def test_a_locked_vault_refuses_at_claim(upstream, approved, run, executor_key):
    plan = approved()
    vault_set_locked(locked=True, actor="user:admin", reason="incident 42")
    assert run(plan) == "skipped:refused"
    plan = fresh(plan)
    assert plan.status == PlanStatus.REFUSED
    assert "the vault is locked" in plan.outcome_detail
    assert upstream.writes() == []
    event = AuditEvent.objects.filter(plan=plan, kind="execution.refused").get()
    assert event.data["reason"] == "the vault is locked"
    assert not Attempt.objects.filter(plan=plan).exists()


def test_a_lock_engaged_between_claim_and_send_stops_the_send(
    upstream, approved, run, executor_key, monkeypatch
):
    plan = approved()
    original = executor_services._revalidate

    def revalidate_then_lock(claim):
        result = original(claim)
        vault_set_locked(locked=True, actor="user:admin")
        return result

    monkeypatch.setattr(executor_services, "_revalidate", revalidate_then_lock)
    assert run(plan) == PlanStatus.REFUSED
    plan = fresh(plan)
    assert plan.status == PlanStatus.REFUSED
    assert plan.outcome_detail == "refused before sending: the vault is locked"
    attempt = Attempt.objects.get(plan=plan)
    assert attempt.state == Attempt.State.NOT_SENT
    assert attempt.sent_at is None
    assert upstream.writes() == []


def test_unlocking_lets_new_work_run(upstream, approved, run, executor_key):
    vault_set_locked(locked=True, actor="user:admin")
    vault_set_locked(locked=False, actor="user:admin")
    assert not VaultState.is_locked()
    assert run(approved()) == PlanStatus.COMPLETED
    assert len(upstream.writes()) == 1


def test_the_command_locks_unlocks_and_reports(db, capsys):
    call_command("vault", "status")
    assert "vault: unlocked" in capsys.readouterr().out
    call_command("vault", "lock", "--reason", "key leak", "--actor", "alice")
    assert "LOCKED" in capsys.readouterr().out
    assert VaultState.is_locked()
    call_command("vault", "unlock", "--actor", "alice")
    assert "vault: unlocked" in capsys.readouterr().out
    events = list(
        AuditEvent.objects.filter(kind__startswith="vault.").values_list("kind", "actor", "data")
    )
    assert events == [
        ("vault.locked", "cli:alice", {"reason": "key leak", "was_locked": False}),
        ("vault.unlocked", "cli:alice", {"reason": "", "was_locked": True}),
    ]


def test_the_admin_locks_and_unlocks(db, client):
    admin = get_user_model().objects.create_superuser("root", password="pw-root")
    client.force_login(admin)
    url = "/admin/actions/vaultstate/"
    assert client.get(url).status_code == 200  # creates the singleton row
    response = client.post(url, {"action": "lock_vault", "_selected_action": ["1"]})
    assert response.status_code == 302
    assert VaultState.is_locked()
    assert AuditEvent.objects.filter(kind="vault.locked", actor="user:root").exists()
    client.post(url, {"action": "unlock_vault", "_selected_action": ["1"]})
    assert not VaultState.is_locked()
    assert AuditEvent.objects.filter(kind="vault.unlocked", actor="user:root").exists()


def test_only_one_vault_state_row_can_exist(db):
    from django.db import IntegrityError, transaction

    VaultState.objects.get_or_create(id=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        VaultState.objects.create(id=2)
