"""The core speaks to upstreams only through the connector kinds' interface: nothing
HTTP-specific appears in the preview or the executor (status-code literals, conditional
or retry headers, the HTTP clients), and the import contracts that keep the kinds apart
name every kind there is."""

from __future__ import annotations

import io
import re
import tokenize
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = sorted([ROOT / "actions" / "preview.py", *(ROOT / "executors").glob("*.py")])
KINDS = ROOT / "actions" / "connectors"

# Names that belong to the HTTP kind (and actions/lib/http.py) only.
HTTP_WORDS = re.compile(
    r"If-Match|If-None-Match|Retry-After|\bhttpx\b|\bWriteClient\b|\bReadOnlyClient\b"
    r"|\bread_client\b|actions\.lib\.http|actions\.clients|actions\.connectors\.http",
    re.IGNORECASE,
)
STRING_TOKENS = {tokenize.STRING, tokenize.FSTRING_MIDDLE}


def _is_constant_line(line: str) -> bool:
    """A module-level constant (``NAME = …``): a count or a delay, named for what it is."""
    return re.match(r"[A-Z][A-Z0-9_]* = ", line) is not None


def http_specifics(source: str) -> list[str]:
    """Where ``source`` names something HTTP-specific: a status-code literal (an integer
    from 100 to 599 outside a named module constant, or a three-digit code in a string),
    a conditional or retry header, an HTTP client or the HTTP kind."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        row, line = token.start[0], token.line
        if token.type == tokenize.NUMBER and re.fullmatch(r"[1-5]\d\d", token.string):
            if not _is_constant_line(line):
                found.append(f"{row}: status-like literal {token.string}")
        elif token.type in STRING_TOKENS and re.search(
            r"(?<![\w.])[1-5]\d\d(?![\w.])", token.string
        ):
            found.append(f"{row}: status code in text {token.string!r}")
        if token.type in (tokenize.NAME, tokenize.COMMENT, *STRING_TOKENS):
            if HTTP_WORDS.search(token.string):
                found.append(f"{row}: {token.string!r}")
    imports = re.finditer(r"^\s*(?:from|import)\s+([\w.]+)", source, re.MULTILINE)
    for match in imports:
        if HTTP_WORDS.search(match.group(1)):
            found.append(f"imports {match.group(1)}")
    return found


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_core_names_nothing_http(path):
    assert http_specifics(path.read_text()) == []


def test_the_check_finds_what_it_looks_for():
    """The check itself: each kind of HTTP specific is found, a named constant is not."""
    source = (
        "import httpx\n"
        "from actions.lib.http import WriteClient\n"
        "BATCH = 500\n"
        "def f(response):\n"
        "    if response.status == 412:\n"
        "        headers = {'If-Match': 'x'}\n"
        "    return f'answered 429 {response.status}'\n"
    )
    found = http_specifics(source)
    assert "5: status-like literal 412" in found
    assert any("If-Match" in hit for hit in found)
    assert any("429" in hit for hit in found)
    assert "imports httpx" in found and "imports actions.lib.http" in found
    assert not any("500" in hit for hit in found)


def _contract(name: str) -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["name"] == name]
    return contract


def test_the_contracts_name_every_kind():
    kinds = sorted(
        f"actions.connectors.{path.name}"
        for path in KINDS.iterdir()
        if path.is_dir() and (path / "__init__.py").exists()
    )
    assert kinds, "the HTTP kind is a package under actions/connectors"
    apart = _contract("No connector kind imports another")
    assert sorted(apart["modules"]) == kinds
    core = _contract("The core imports no connector kind, only its base and the registry")
    assert sorted(core["forbidden_modules"]) == kinds
    assert {"executors", "approvals", "actions.preview"} <= set(core["source_modules"])


def test_every_kind_is_registered_by_dotted_path():
    from django.utils.module_loading import import_string

    from actions.connectors.base import ConnectorKind
    from actions.connectors.registry import KINDS as REGISTERED
    from actions.connectors.registry import UnknownKind, kind_named

    for name, path in REGISTERED.items():
        kind = kind_named(name)
        assert isinstance(kind, ConnectorKind) and kind.name == name
        assert type(kind) is import_string(path)
    with pytest.raises(UnknownKind):
        kind_named("smtp")


# --- the contracts would catch an import against them ---------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of the product, to break (as tests/test_layers.py does)."""
    import shutil

    from tests.test_layers import PACKAGES

    where = tmp_path_factory.mktemp("tree")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, where / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", where / "pyproject.toml")
    return where


def _broken(where: Path) -> list[str]:
    from tests.test_layers import lint_imports

    done = lint_imports(where)
    assert done.returncode != 0, done.stdout[-2000:]
    return [row for row in done.stdout.splitlines() if row.endswith("BROKEN")]


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("executors/reconciliation.py", "from actions.connectors.http import HTTPKind"),
        ("actions/preview.py", "from actions.connectors.http.writing import set_pointer"),
        # Indirectly: the core imports a module that imports a kind.
        ("actions/connectors/registry.py", "from actions.connectors.http import outcomes"),
    ],
)
def test_the_core_importing_a_kind_breaks_the_contract(tree, module, line):
    path = tree / module
    original = path.read_text()
    try:
        path.write_text(original + f"\n{line}  # noqa\n")
        broken = _broken(tree)
    finally:
        path.write_text(original)
    assert any("imports no connector kind" in row for row in broken), broken


def test_a_kind_importing_another_breaks_the_contract(tree):
    """A second kind, listed as each new kind is, that reaches into the first."""
    second = tree / "actions" / "connectors" / "second"
    pyproject = tree / "pyproject.toml"
    original = pyproject.read_text()
    # The contract's list of kinds, whichever kinds it holds by now.
    listed = re.search(
        r'name = "No connector kind imports another"\ntype = "independence"\nmodules = \[[^\]]*\]',
        original,
    )
    assert listed is not None and '"actions.connectors.http"' in listed.group(0)
    try:
        second.mkdir()
        (second / "__init__.py").write_text("from actions.connectors.http import reading\n")
        pyproject.write_text(
            original.replace(
                listed.group(0), listed.group(0)[:-1] + ', "actions.connectors.second"]'
            )
        )
        broken = _broken(tree)
    finally:
        pyproject.write_text(original)
        (second / "__init__.py").unlink()
        second.rmdir()
    assert any("No connector kind imports another" in row for row in broken), broken
