"""The one way a private key file is written: the worker's key and the audit signing key.

Both commands (``worker_keygen``, ``audit_keygen``) subclass ``KeygenCommand``: the
private half is created with mode 600 and never overwritten, the public half is printed
and written beside it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class KeygenCommand(BaseCommand):
    """Subclasses set ``what`` (e.g. "worker"), ``stem`` (the file name under var/) and
    ``generate`` (a function returning the private and public halves as text)."""

    what: str
    stem: str
    generate: Callable[[], tuple[str, str]]

    def add_arguments(self, parser):
        parser.add_argument("--private", default=str(settings.VAR_DIR / f"{self.stem}.key"))
        parser.add_argument("--public", default=str(settings.VAR_DIR / f"{self.stem}.pub"))
        parser.add_argument(
            "--if-missing", action="store_true", help="do nothing if the key exists"
        )

    def handle(self, *args, private: str, public: str, if_missing: bool, **options):
        private_path, public_path = Path(private), Path(public)
        if private_path.exists():
            if if_missing:
                self.stdout.write(f"{self.what} key exists: {private_path}")
                return
            raise CommandError(f"{private_path} exists; refusing to overwrite the {self.what} key")
        private_path.parent.mkdir(parents=True, exist_ok=True)
        secret, pub = self.generate()
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secret + "\n")
        public_path.write_text(pub + "\n")
        self.stdout.write(f"{self.what} private key written to {private_path} (mode 600)")
        self.stdout.write(f"public key: {pub}")
