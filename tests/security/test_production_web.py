"""A web process started with the production settings cannot decrypt a write credential.

Not a setting flipped inside the test process: a real ``python`` started with
COUNTERSIGN_ENV=production and the environment a web server gets (database, shared
read keys, the worker's *public* key, no COUNTERSIGN_WORKER_KEY_FILE) loads the stored
credentials through the vault API. Read secrets open there; write secrets, static and
OAuth2, do not. (``manage.py check --deploy`` under the same settings is
tests/security/test_web.py::test_check_deploy_is_clean_in_production.)
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from actions.models import Connector, Credential
from actions.services import credential_set
from demo.processes import database_url
from tests.conftest import OAUTH_CLIENT_ID, OAUTH_CLIENT_SECRET, READ_TOKEN

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import hashlib, json
import django
django.setup()
from django.conf import settings
from actions.models import Credential
from actions.vault import open_read_secret
from executors.vault import WriteKeyUnavailable, open_write_secret

result = {
    "production": settings.PRODUCTION,
    "debug": settings.DEBUG,
    "key_file": settings.COUNTERSIGN_WORKER_KEY_FILE,
    "read": [],
    "write": [],
}
for credential in Credential.objects.order_by("created_at"):
    if credential.role == "read":
        token = open_read_secret(credential)["token"]
        result["read"].append(hashlib.sha256(token.encode()).hexdigest())
        continue
    try:
        open_write_secret(credential)
        result["write"].append("opened")
    except WriteKeyUnavailable as exc:
        result["write"].append(f"{type(exc).__name__}: {exc}")
print(json.dumps(result))
"""


@pytest.mark.django_db(transaction=True)  # the child process must see the rows
def test_a_production_web_process_cannot_open_write_credentials(catalog, worker_keys, tmp_path):
    connector = Connector.objects.get(name="demo")
    credential_set(
        connector=connector,
        role=Credential.Role.WRITE,
        secret={"client_id": OAUTH_CLIENT_ID, "client_secret": OAUTH_CLIENT_SECRET},
        scheme=Credential.Scheme.OAUTH2,
        token_url="/oauth/token",
        scope="write",
    )
    # The worker's private key even sits where an embedded install would keep it: a
    # production web process still does not pick it up.
    (tmp_path / "worker.key").write_text(Path(worker_keys["private_file"]).read_text())
    env = {
        "PATH": os.environ.get("PATH", ""),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "COUNTERSIGN_ENV": "production",
        "COUNTERSIGN_SECRET_KEY": secrets.token_urlsafe(60),
        "COUNTERSIGN_FERNET_KEYS": ",".join(settings.COUNTERSIGN_FERNET_KEYS),
        "COUNTERSIGN_WORKER_PUBLIC_KEY": worker_keys["public"],
        "COUNTERSIGN_ALLOWED_HOSTS": "countersign.example.com",
        "DATABASE_URL": database_url(connection.settings_dict),
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "COUNTERSIGN_VAR_DIR": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["production"] is True and found["debug"] is False
    assert found["key_file"] == ""
    # A working web process: it opens the read secret with the shared keys...
    assert found["read"] == [hashlib.sha256(READ_TOKEN.encode()).hexdigest()]
    # ...and neither write secret (the static token, the OAuth2 client).
    assert found["write"] == [
        "WriteKeyUnavailable: this process holds no worker private key",
        "WriteKeyUnavailable: this process holds no worker private key",
    ]
    assert OAUTH_CLIENT_SECRET not in result.stdout + result.stderr
