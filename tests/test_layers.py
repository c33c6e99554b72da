"""The import contracts `make lint` runs (pyproject.toml, [tool.importlinter]) hold, and
would catch an import against the direction executors -> approvals -> actions ->
actions.lib, or across the sub-packages of approvals that are kept apart (the core, the
agent API, the pages, sign-in, operations): a copy of the tree with one such import fails
the contract it breaks."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["actions", "approvals", "executors", "config", "demo", "clients", "bench", "tests"]


def lint_imports(where: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("tree")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, where / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", where / "pyproject.toml")
    return where


def test_the_contracts_hold():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("approvals/selectors.py", "from executors import tasks", "point one way"),
        ("actions/preview.py", "from approvals.models import Plan", "point one way"),
        ("actions/lib/http.py", "from actions.models import Connector", "knows no app"),
        ("approvals/views/plan.py", "from demo.upstream import DemoUpstream", "never imports"),
        ("bench/report.py", "from tests.conftest import READ_TOKEN", "do not import each other"),
        ("actions/policy/__init__.py", "from approvals.models import Plan", "point one way"),
        ("approvals/lifecycle.py", "from approvals.api.endpoints import api", "no surface"),
        ("approvals/decisions/__init__.py", "from approvals.views import plan", "no surface"),
        ("approvals/services/deciding.py", "from approvals.ops import health", "no surface"),
        (
            "approvals/api/endpoints.py",
            "from approvals.views.pages import page_error",
            "API imports no",
        ),
        ("approvals/api/longpoll.py", "from approvals.mcp import http", "API imports no"),
        ("approvals/views/queue.py", "from approvals.api.endpoints import api", "pages import"),
        ("approvals/views/pages.py", "from approvals.api.schemas import PlanOut", "pages import"),
        ("approvals/identity/oidc.py", "from approvals.views import passkeys", "Sign-in imports"),
        ("approvals/identity/passkeys.py", "from approvals.ops import health", "Sign-in imports"),
        ("approvals/ops/health.py", "from approvals.api import longpoll", "Operations import"),
        ("approvals/ops/views.py", "from approvals.identity import login", "Operations import"),
    ],
)
def test_an_import_against_the_direction_breaks_them(copy, module, line, contract):
    path = copy / module
    original = path.read_text()
    try:
        path.write_text(original + f"\n{line}  # noqa\n")
        done = lint_imports(copy)
    finally:
        path.write_text(original)
    assert done.returncode != 0
    broken = [row for row in done.stdout.splitlines() if row.endswith("BROKEN")]
    assert any(contract in row for row in broken), done.stdout[-2000:]
