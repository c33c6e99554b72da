from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from actions.vault import VaultError, read_secrets_rotate
from executors.vault import load_private_key, load_public_key, write_secrets_reseal


class Command(BaseCommand):
    help = (
        "Re-encrypt credentials under new keys, without downtime. Always: every read "
        "secret under the first key of COUNTERSIGN_FERNET_KEYS (put the new key first, "
        "keep the old ones after it until this has run). With --new-worker-key and "
        "--old-worker-key (run on a worker, where the old private key is): re-seal every "
        "write secret to the new worker public key."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--new-worker-key", metavar="FILE", help="the NEW worker public key (worker.pub)"
        )
        parser.add_argument(
            "--old-worker-key",
            metavar="FILE",
            action="append",
            default=[],
            help="an OLD worker private key file (repeatable)",
        )

    def handle(self, *args, new_worker_key: str | None, old_worker_key: list[str], **options):
        if bool(new_worker_key) != bool(old_worker_key):
            raise CommandError("--new-worker-key and --old-worker-key go together")
        try:
            rotated = read_secrets_rotate(actor="cli:rotate_keys")
            self.stdout.write(f"read secrets re-encrypted under the newest key: {rotated}")
            if new_worker_key:
                resealed = write_secrets_reseal(
                    old_keys=[load_private_key(p) for p in old_worker_key],
                    new_public=load_public_key(new_worker_key),
                    actor="cli:rotate_keys",
                )
                self.stdout.write(f"write secrets re-sealed to the new worker key: {resealed}")
        except VaultError as exc:
            raise CommandError(str(exc)) from None
