"""The releases recorded in CHANGELOG.md, newest first.

Tags may not travel with a clone, so the changelog is where each release's commit is
written down: a ``## <version> ...`` heading followed, once the release is cut, by a line
``Commit: <40 hex digits>``. The newest entry with a commit is the previous release, the
one a rolling deploy of the work since then runs beside.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
CHANGELOG = ROOT / "CHANGELOG.md"

_HEADING = re.compile(r"^## +\[?(?P<version>\d+\.\d+\.\d+)\]?(?P<rest>.*)$")
_COMMIT = re.compile(r"^Commit: +`?(?P<commit>[0-9a-f]{40})`?\s*$")


@dataclass(frozen=True)
class Release:
    version: str
    commit: str | None  # None while unreleased


def releases(text: str) -> list[Release]:
    """Every ``## <version>`` entry in the order written (newest first)."""
    found: list[Release] = []
    version: str | None = None
    commit: str | None = None
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            if version is not None:
                found.append(Release(version, commit))
            version, commit = heading.group("version"), None
            continue
        match = _COMMIT.match(line.strip())
        if match and version is not None and commit is None:
            commit = match.group("commit")
    if version is not None:
        found.append(Release(version, commit))
    return found


def previous_release(text: str | None = None) -> Release:
    """The newest entry that names its commit."""
    if text is None:
        text = CHANGELOG.read_text(encoding="utf-8")
    for release in releases(text):
        if release.commit:
            return release
    raise LookupError("CHANGELOG.md names no release commit (a 'Commit: <sha>' line)")
