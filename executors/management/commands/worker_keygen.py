from __future__ import annotations

from actions.lib.keygen import KeygenCommand
from executors.vault import generate_keypair


class Command(KeygenCommand):
    help = (
        "Generate the worker's key pair. The private key opens write credentials and "
        "belongs to workers only; the public key is given to web processes."
    )
    what, stem = "worker", "worker"
    generate = staticmethod(generate_keypair)
