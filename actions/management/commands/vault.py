from __future__ import annotations

from django.core.management.base import BaseCommand

from actions.models import VaultState
from actions.services import vault_set_locked


class Command(BaseCommand):
    help = (
        "Lock, unlock or show the vault. While locked, every execution is refused before "
        "anything is sent (plans end `refused`: the vault is locked)."
    )

    def add_arguments(self, parser):
        parser.add_argument("command", choices=["lock", "unlock", "status"])
        parser.add_argument("--reason", default="", help="recorded in the audit trail")
        parser.add_argument("--actor", default="cli", help="who is doing this (audited)")

    def handle(self, *args, command: str, reason: str, actor: str, **options):
        if command != "status":
            vault_set_locked(locked=command == "lock", actor=f"cli:{actor}", reason=reason)
        state = VaultState.objects.filter(id=VaultState.SINGLETON_ID).first()
        if state is None or not state.locked:
            self.stdout.write("vault: unlocked")
        else:
            self.stdout.write(
                f"vault: LOCKED since {state.changed_at:%Y-%m-%d %H:%M:%S %Z} "
                f"by {state.changed_by}" + (f" ({state.reason})" if state.reason else "")
            )
