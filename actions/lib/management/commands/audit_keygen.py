from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from actions.lib.checkpoints import generate_signing_key


class Command(BaseCommand):
    help = (
        "Generate the audit signing key (Ed25519). The private key signs the audit trail's "
        "checkpoints and belongs to the sealing workers only; the public key verifies them "
        "(COUNTERSIGN_AUDIT_PUBLIC_KEY) and can be given to anyone."
    )

    def add_arguments(self, parser):
        parser.add_argument("--private", default=str(settings.VAR_DIR / "audit.key"))
        parser.add_argument("--public", default=str(settings.VAR_DIR / "audit.pub"))
        parser.add_argument(
            "--if-missing", action="store_true", help="do nothing if the key exists"
        )

    def handle(self, *args, private: str, public: str, if_missing: bool, **options):
        private_path, public_path = Path(private), Path(public)
        if private_path.exists():
            if if_missing:
                self.stdout.write(f"audit key exists: {private_path}")
                return
            raise CommandError(f"{private_path} exists; refusing to overwrite an audit key")
        private_path.parent.mkdir(parents=True, exist_ok=True)
        secret, pub = generate_signing_key()
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secret + "\n")
        public_path.write_text(pub + "\n")
        self.stdout.write(f"audit private key written to {private_path} (mode 600)")
        self.stdout.write(f"public key: {pub}")
