from __future__ import annotations

import base64
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from actions.lib.checkpoints import (
    audit_verify,
    checkpoints_export,
    read_export,
    verify_export,
    verify_keys,
)


class Command(BaseCommand):
    help = (
        "Verify the audit trail: every event against the signed checkpoints, and each "
        "checkpoint against the one before it; report every problem at its position. "
        "--copy compares the database with an exported copy of the checkpoints, "
        "--offline verifies an export without the database, --export writes one."
    )

    def add_arguments(self, parser):
        parser.add_argument("--offline", metavar="FILE", help="verify an export on its own")
        parser.add_argument("--copy", metavar="FILE", help="an export kept elsewhere")
        parser.add_argument("--export", metavar="FILE", help="write the checkpoints here")
        parser.add_argument(
            "--public-key",
            action="append",
            default=[],
            metavar="KEY_OR_FILE",
            help="a public key (base64, or a file holding it) besides the configured ones",
        )

    def handle(self, *args, offline, copy, export, public_key, **options):
        try:
            keys = verify_keys([_key(value) for value in public_key])
        except (ValueError, OSError) as exc:
            raise CommandError(f"not a public key: {exc}") from None
        if not keys:
            raise CommandError("no audit public key (COUNTERSIGN_AUDIT_PUBLIC_KEY or --public-key)")
        if export:
            count = checkpoints_export(export)
            self.stdout.write(f"{count} checkpoints written to {export}")
            return
        try:
            if offline:
                report = verify_export(offline, keys)
            else:
                report = audit_verify(keys=keys, copy=read_export(copy) if copy else None)
        except (OSError, ValueError, KeyError) as exc:
            raise CommandError(f"cannot read the export: {exc}") from None
        for problem in report.problems:
            self.stderr.write(str(problem))
        if report.problems:
            raise CommandError(f"audit trail NOT intact: {len(report.problems)} problems")
        if offline:
            self.stdout.write(
                f"export intact: {report.checkpoints} checkpoints, {report.sealed} events"
            )
        else:
            self.stdout.write(
                f"audit trail intact: {report.events} events, {report.sealed} sealed in "
                f"{report.checkpoints} checkpoints, {report.unsealed} not sealed yet"
            )


def _key(value: str) -> str:
    path = Path(value)
    if path.is_file():
        value = path.read_text().strip()
    if len(base64.b64decode(value, validate=True)) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    return value
