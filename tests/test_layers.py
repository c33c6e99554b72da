"""The import contracts `make lint` runs (pyproject.toml, [tool.importlinter]) hold, and
would catch an import against the direction executors -> approvals -> actions ->
actions.lib, or across the sub-packages of approvals that are kept apart (the core, the
agent API, the pages, sign-in, operations): a copy of the tree with one such import fails
the contract it breaks. And no file comes back to itself through its imports
(config/release/check_cycles.py, also run by `make lint`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
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
            "approvals/services/deciding.py",
            "from approvals.identity import requester",
            "no surface",
        ),
        ("approvals/lifecycle.py", "from approvals.identity.oidc import _groups", "no surface"),
        ("approvals/decisions/requester.py", "from approvals.identity import login", "no surface"),
        (
            "approvals/grants.py",
            "from approvals.identity.provider import provider_json",
            "no surface",
        ),
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


def test_the_core_may_import_of_sign_in_only_the_passkeys():
    """The core's contract names every module of approvals.identity but the passkeys (a
    new sign-in module is forbidden to the core until it is listed, or this fails)."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    core = next(c for c in contracts["contracts"] if "no surface" in c["name"])
    identity = ROOT / "approvals" / "identity"
    modules = {
        f"approvals.identity.{path.stem if path.is_file() else path.name}"
        for path in identity.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()
    }
    assert "approvals.identity.requester" in modules
    assert modules - set(core["forbidden_modules"]) == {"approvals.identity.passkeys"}


# --- circles between files ------------------------------------------------------------------


def check_cycles(where: Path, *packages: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "config.release.check_cycles", "--root", str(where), *packages],
        # The product's packages from the tree checked (the check is in config); a small
        # package of a test's own beside the real tree.
        cwd=ROOT if packages else where,
        capture_output=True,
        text=True,
        timeout=120,
    )


def ring(where: Path, back: str) -> Path:
    """A package ``ring``: a.py imports b, b imports sub/c inside a function, and c
    imports a back with ``back``."""
    (where / "ring" / "sub").mkdir(parents=True)
    (where / "ring" / "__init__.py").write_text("")
    (where / "ring" / "a.py").write_text("from .b import B\n\nA = 1\n")
    (where / "ring" / "b.py").write_text(
        "B = 2\n\n\ndef later():\n    from ring.sub import c\n\n    return c\n"
    )
    (where / "ring" / "sub" / "__init__.py").write_text("")
    (where / "ring" / "sub" / "c.py").write_text(back)
    return where


def test_the_tree_has_no_circles_between_files():
    done = check_cycles(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No circles of imports" in done.stdout


def test_lint_runs_the_circle_check():
    done = subprocess.run(
        ["make", "-n", "lint"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "-m config.release.check_cycles" in done.stdout


@pytest.mark.parametrize(
    ("back", "line"),
    [
        ("from .. import a\n", "from .. import a"),
        ("import ring.a\n", "import ring.a"),
        ("def f():\n    from ..a import A\n\n    return A\n", "from ..a import A"),
    ],
)
def test_a_circle_between_files_is_refused_as_a_chain(tmp_path, back, line):
    """Relative imports resolved, an import inside a function counted, and the chain
    printed file by file with the line that imports the next."""
    done = check_cycles(ring(tmp_path, back), "ring")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    at = lines.index("  ring/a.py:1  from .b import B")
    c_line = 2 if line.startswith("from ..a") else 1
    assert lines[at : at + 4] == [
        "  ring/a.py:1  from .b import B",
        "    -> ring/b.py:5  from ring.sub import c",
        f"    -> ring/sub/c.py:{c_line}  {line}",
        "    -> ring/a.py",
    ]
    assert lines[0] == "Circles of imports between files in ring (1):"


def test_an_import_for_type_checking_only_is_no_circle(tmp_path):
    back = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .. import a\n"
    done = check_cycles(ring(tmp_path, back), "ring")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No circles of imports between the 5 files of ring." in done.stdout


def test_a_circle_put_back_in_the_tree_is_refused(copy):
    """The first circle this check was written for: the policies importing the lifecycle
    (inside a function), which imports them through the decision rules."""
    path = copy / "approvals" / "decisions" / "policies.py"
    original = path.read_text()
    try:
        path.write_text(
            original + "\n\ndef _back():\n    from ..lifecycle import plan_transition  # noqa\n"
        )
        done = check_cycles(copy)
    finally:
        path.write_text(original)
    assert done.returncode == 1, done.stdout + done.stderr
    chain = [row.strip() for row in done.stdout.splitlines() if row.startswith(" ")]
    assert chain[0].startswith("approvals/decisions/policies.py:")
    assert chain[0].endswith("from ..lifecycle import plan_transition  # noqa")
    assert chain[1].startswith("-> approvals/lifecycle.py:")
    assert chain[2].startswith("-> approvals/decisions/requirements.py:")
    assert chain[3] == "-> approvals/decisions/policies.py"
