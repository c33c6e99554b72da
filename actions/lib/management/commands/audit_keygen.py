from __future__ import annotations

from actions.lib.checkpoints import generate_signing_key
from actions.lib.keygen import KeygenCommand


class Command(KeygenCommand):
    help = (
        "Generate the audit signing key (Ed25519). The private key signs the audit trail's "
        "checkpoints and belongs to the sealing workers only; the public key verifies them "
        "(COUNTERSIGN_AUDIT_PUBLIC_KEY) and can be given to anyone."
    )
    what, stem = "audit", "audit"
    generate = staticmethod(generate_signing_key)
