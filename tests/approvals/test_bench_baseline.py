"""The baseline endpoint of `make bench` exists only in bench runs, never in production."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.urls import Resolver404, resolve

from demo.processes import ROOT

PATH = "/bench/baseline/plans"

PROBE = """
import json, django
django.setup()
from django.conf import settings
from django.urls import Resolver404, resolve
try:
    resolve("/bench/baseline/plans")
    mounted = True
except Resolver404:
    mounted = False
print(json.dumps({"setting": settings.COUNTERSIGN_BENCH, "mounted": mounted}))
"""


def test_absent_by_default(client, db):
    assert settings.COUNTERSIGN_BENCH is False
    with pytest.raises(Resolver404):
        resolve(PATH)
    response = client.post(PATH, data="{}", content_type="application/json")
    assert response.status_code == 404


def _probe(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    clean.update(env, DJANGO_SETTINGS_MODULE="config.settings", DATABASE_URL="sqlite:///:memory:")
    clean["COUNTERSIGN_SECRET_KEY"] = "probe-" + "x" * 50
    clean["COUNTERSIGN_FERNET_KEYS"] = ",".join(settings.COUNTERSIGN_FERNET_KEYS)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=clean, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_production_never_mounts_it_even_when_asked():
    assert _probe(COUNTERSIGN_ENV="production", COUNTERSIGN_BENCH="1") == {
        "setting": False,
        "mounted": False,
    }


def test_mounted_for_a_bench_run():
    assert _probe(COUNTERSIGN_ENV="test", COUNTERSIGN_BENCH="1") == {
        "setting": True,
        "mounted": True,
    }
