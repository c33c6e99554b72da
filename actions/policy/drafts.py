"""A draft policy set, read to be tried before it is loaded: by ``manage.py
policy_test`` (its cases) and ``manage.py policy_backtest`` (the stored plans).

A draft is given as

* ``.cedar`` files, or directories of them (each directory's ``*.cedar`` files in name
  order, not recursive): together, the enforce part;
* one catalog file (``.yaml``/``.yml``): its ``policies:`` section, with the ``.cedar``
  files it names beside it, checked with the whole file as ``load_catalog`` checks it
  (its actions as the file would define them);
* text (the admin's backtest page): the enforce part.

It is checked as a load checks it — Cedar, the annotations, the catalog's types — and
refused with every problem, each with the file and line it is on (``DraftRefused``).
For a backtest (``check_groups``) the groups an ``@require`` names are checked too, as a
load checks them: one that does not exist is refused with the load's message (a catalog
file may declare it in ``policies.groups``, and is always checked so). ``policy_test``
leaves them unchecked, so that a policy's cases run in CI on an empty database.

``policy_set_changes`` says what a draft changes against the set in force: the policies
added, removed and changed, by id, in each part the draft gives (a catalog file gives
both; ``.cedar`` files and text give the enforce part only).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth.models import Group

from ..catalog import CatalogError, catalog_document
from ..models import Action
from .engine import CompiledPolicies, PolicySetInvalid, catalog_types, policies_compile
from .sources import (
    ENFORCE,
    MAX_TEXT_CHARS,
    PARTS,
    SHADOW,
    Policy,
    Problem,
    check_texts,
    part_text,
)
from .versions import policies_in_force

CATALOG_SUFFIXES = (".yaml", ".yml")
MAX_DRAFT_FILES = 200  # as a catalog's policies: section


class DraftRefused(Exception):
    """A draft that cannot be tried: a heading, then each problem (file, line, reason)."""

    def __init__(self, heading: str, problems: Sequence[str] = ()) -> None:
        self.heading = heading
        self.problems = list(problems)
        super().__init__("\n".join([heading, *(f"  {p}" for p in self.problems)]))


@dataclass(frozen=True)
class Draft:
    compiled: CompiledPolicies
    # The actions it was checked against (name -> definition): the stored ones, with a
    # catalog file's own in their place.
    actions: Mapping[str, Mapping[str, Any]]
    source: str  # what it was read from, for people
    # The parts it gives: a catalog file both, .cedar files the enforce part only.
    parts: tuple[str, ...] = (ENFORCE,)

    @property
    def hash(self) -> str:
        return self.compiled.hash


def stored_actions() -> dict[str, dict[str, Any]]:
    return dict(Action.objects.values_list("name", "definition"))


def groups_existing(wanted: set[str]) -> set[str]:
    """The groups of ``wanted`` that exist (what a load checks an ``@require`` against)."""
    return set(Group.objects.filter(name__in=wanted).values_list("name", flat=True))


def problem_text(problem: Problem) -> str:
    where = problem.origin or f"the {problem.part} part"
    return (
        f"{where}, line {problem.line}: {problem.message}"
        if problem.line
        else (f"{where}: {problem.message}")
    )


def draft_read(
    paths: Sequence[str | Path], *, actions: Mapping | None = None, check_groups: bool = False
) -> Draft:
    """The draft in ``paths``: ``.cedar`` files and directories of them, or one catalog
    file. DraftRefused when it cannot be read or does not hold (``check_groups``: nor
    when an ``@require`` names a group that does not exist)."""
    stored = stored_actions() if actions is None else dict(actions)
    paths = [Path(p) for p in paths]
    if not paths:
        raise DraftRefused("no draft: give .cedar files, a directory of them, or a catalog file")
    catalogs = [p for p in paths if p.suffix in CATALOG_SUFFIXES]
    if catalogs:
        if len(paths) > 1:
            raise DraftRefused(
                "a catalog file is a draft on its own: give it alone, or give .cedar files"
            )
        return draft_from_catalog(catalogs[0], actions=stored)
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.glob("*.cedar") if p.is_file())
            if not found:
                raise DraftRefused(f"{path}: no .cedar file in this directory")
            files += found
        elif path.suffix == ".cedar" or path.is_file():
            files.append(path)
        else:
            raise DraftRefused(f"cannot read {path}: no such file or directory")
    if len(files) > MAX_DRAFT_FILES:
        raise DraftRefused(f"at most {MAX_DRAFT_FILES} policy files in a draft")
    texts = [(str(p), _read(p)) for p in files]
    return Draft(
        compiled=draft_compile(texts, actions=stored, check_groups=check_groups),
        actions=stored,
        source=", ".join(str(p) for p in paths),
    )


def draft_compile(
    texts: Sequence[tuple[str, str]],
    *,
    actions: Mapping[str, Mapping[str, Any]],
    check_groups: bool = False,
) -> CompiledPolicies:
    """The enforce part made of ``texts`` ((origin, Cedar text), in order), checked
    against ``actions`` (and, with ``check_groups``, the groups there are) with each
    problem's origin and line, and compiled."""
    for origin, text in texts:
        if len(text) > MAX_TEXT_CHARS:
            raise DraftRefused(
                "the policies are refused:", [f"{origin}: longer than {MAX_TEXT_CHARS // 1024} KiB"]
            )
    checked = check_texts(
        [(ENFORCE, i, text, origin) for i, (origin, text) in enumerate(texts)],
        types=catalog_types(actions),
        groups_existing=groups_existing if check_groups else None,
    )
    if checked.problems:
        raise DraftRefused("the policies are refused:", [problem_text(p) for p in checked.problems])
    return _compile({ENFORCE: part_text(t for _, t in texts), SHADOW: ""}, actions)


def draft_from_catalog(path: str | Path, *, actions: Mapping | None = None) -> Draft:
    """The ``policies:`` section of the catalog file at ``path``, checked with the whole
    file (nothing is loaded)."""
    path = Path(path)
    stored = stored_actions() if actions is None else dict(actions)
    try:
        document = catalog_document(_read(path), source=str(path), base_dir=path.parent)
    except CatalogError as exc:
        raise DraftRefused(
            f"{exc.source}: the catalog is refused:", [str(p) for p in exc.problems]
        ) from None
    if "policies" not in document:
        raise DraftRefused(f"{path}: the catalog has no policies: section")
    actions = {**stored, **(document.get("actions") or {})}
    section = document["policies"] or {}
    texts = {p: part_text(item["text"] for item in section.get(p) or []) for p in PARTS}
    return Draft(compiled=_compile(texts, actions), actions=actions, source=str(path), parts=PARTS)


def _compile(texts: Mapping[str, str], actions: Mapping) -> CompiledPolicies:
    try:
        return policies_compile(enforce=texts[ENFORCE], shadow=texts[SHADOW], actions=actions)
    except PolicySetInvalid as exc:
        raise DraftRefused(
            "the policies are refused:", [problem_text(p) for p in exc.problems]
        ) from None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise DraftRefused(f"cannot read {path}: {why}") from None


# --- what a draft changes against the set in force -----------------------------------------


def _kind(policy: Policy) -> str:
    if policy.effect == "forbid":
        return "forbid"
    return "approve" if policy.approve else "require"


def _members(enforce: str, shadow: str) -> dict[str, dict[str, tuple[str, str]]]:
    """{part: {id: (kind, the policy's canonical JSON)}}, each policy where it is
    evaluated (an ``@shadow`` policy of the enforce part in the shadow part). Read without
    the catalog's types: a set in force that no longer holds with the catalog is still
    compared; comments, spacing and order change nothing."""
    checked = check_texts([(ENFORCE, 0, enforce, ""), (SHADOW, 0, shadow, "")], types={})
    out: dict[str, dict[str, tuple[str, str]]] = {ENFORCE: {}, SHADOW: {}}
    for policy in checked.policies:
        if not policy.id:
            continue
        part = SHADOW if policy.part == SHADOW or policy.shadow else ENFORCE
        out[part][policy.id] = (_kind(policy), json.dumps(policy.est, sort_keys=True))
    return out


def policy_set_changes(
    draft: CompiledPolicies, *, parts: Sequence[str] = (ENFORCE,)
) -> dict[str, Any]:
    """What ``draft`` changes against the set in force, by id, for each part in
    ``parts`` (the others: None, the draft does not give them): ``added``, ``removed``
    and ``changed`` (each ``{"id", "kind"}``: forbid, approve or require; the draft's
    kind, or the removed one's), and how many are ``unchanged``."""
    current = policies_in_force()
    before = _members(current.enforce_text, current.shadow_text)
    after = _members(draft.enforce_text, draft.shadow_text)
    compared: dict[str, Any] = {}
    for part in PARTS:
        if part not in parts:
            compared[part] = None
            continue
        old, new = before[part], after[part]
        compared[part] = {
            "added": [{"id": i, "kind": new[i][0]} for i in sorted(new.keys() - old.keys())],
            "removed": [{"id": i, "kind": old[i][0]} for i in sorted(old.keys() - new.keys())],
            "changed": [
                {"id": i, "kind": new[i][0]}
                for i in sorted(old.keys() & new.keys())
                if old[i] != new[i]
            ],
            "unchanged": sum(1 for i in old.keys() & new.keys() if old[i] == new[i]),
        }
    in_force = bool(current.enforce_text.strip() or current.shadow_text.strip())
    return {
        "against": {"version": current.version, "hash": current.hash} if in_force else None,
        **compared,
    }
