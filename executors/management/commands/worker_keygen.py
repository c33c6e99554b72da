from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from executors.vault import generate_keypair


class Command(BaseCommand):
    help = (
        "Generate the worker's key pair. The private key opens write credentials and "
        "belongs to workers only; the public key is given to web processes."
    )

    def add_arguments(self, parser):
        parser.add_argument("--private", default=str(settings.VAR_DIR / "worker.key"))
        parser.add_argument("--public", default=str(settings.VAR_DIR / "worker.pub"))
        parser.add_argument(
            "--if-missing", action="store_true", help="do nothing if the key exists"
        )

    def handle(self, *args, private: str, public: str, if_missing: bool, **options):
        private_path, public_path = Path(private), Path(public)
        if private_path.exists():
            if if_missing:
                self.stdout.write(f"worker key exists: {private_path}")
                return
            raise CommandError(f"{private_path} exists; refusing to overwrite a worker key")
        private_path.parent.mkdir(parents=True, exist_ok=True)
        secret, pub = generate_keypair()
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secret + "\n")
        public_path.write_text(pub + "\n")
        self.stdout.write(f"worker private key written to {private_path} (mode 600)")
        self.stdout.write(f"public key: {pub}")
