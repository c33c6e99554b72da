"""A catalog document checked as a whole: the schema, every action's definition, the
follow-ups, the decision rules and the policies (in the file, or in force against the
actions it changes). Nothing is written until all of it holds."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from django.contrib.auth.models import Group
from jsonschema import Draft202012Validator

from ..lib.canonical import escape_pointer_token
from ..models import Action, Connector
from ..policy.engine import catalog_types, policy_may_match
from ..policy.reviewers import reviewers_problems, section_groups
from ..policy.schema import action_types
from ..policy.sources import PARTS, check_texts
from ..policy.versions import policies_in_force, policy_version_current
from .definitions import check_action, check_follow_ups
from .problems import CatalogError, CatalogProblem

SCHEMA_PATH = Path(__file__).parent.with_name("catalog.schema.json")


def catalog_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


@functools.cache
def _catalog_validator() -> Draft202012Validator:
    """Built once a process: the schema file ships with the code."""
    return Draft202012Validator(catalog_schema())


def _pointer(path) -> str:
    return "".join(f"/{escape_pointer_token(p)}" for p in path)


def _closest(error):
    """For "none of the alternatives fit" (oneOf, anyOf), the alternative's own error that
    says most precisely what is wrong (``approvers: 0 is less than 1``, not "not valid
    under any of the given schemas")."""
    while error.validator in ("oneOf", "anyOf") and error.context:
        # The alternative that got furthest into the value is the one that was meant (a
        # mapping was not meant to be the string "none").
        error = max(error.context, key=lambda e: len(e.relative_path))
    return error


def validate_catalog(
    document: dict[str, Any],
    source: str,
    *,
    follow_up_targets: dict[str, dict[str, Any]] | None = None,
    policy_origins: dict[tuple[str, int], str] | None = None,
) -> None:
    """Raise CatalogError with every problem found; return quietly if the file is sound.

    ``follow_up_targets`` are definitions about to be stored beside this document (an
    import's proposed reads): a ``check_with`` may name one of them. ``policy_origins``:
    the ``.cedar`` file each policy text came from (``catalog_document`` reads them),
    by (part, position), so a problem names the file and its line."""
    problems: list[CatalogProblem] = []
    validator = _catalog_validator()
    for error in sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path)):
        error = _closest(error)
        problems.append(CatalogProblem(_pointer(error.absolute_path), error.message))
    if problems:
        raise CatalogError(source, problems)

    known_connectors = set(document.get("connectors", {})) | set(
        Connector.objects.values_list("name", flat=True)
    )
    mcp_connectors = {
        name for name, spec in (document.get("connectors") or {}).items() if "mcp" in spec
    } | (
        set(Connector.objects.filter(kind="mcp").values_list("name", flat=True))
        - set(document.get("connectors") or {})
    )
    for name, action in (document.get("actions") or {}).items():
        base = f"/actions/{escape_pointer_token(name)}"
        problems.extend(check_action(base, action, known_connectors, mcp_connectors))
    actions = document.get("actions") or {}
    problems.extend(check_follow_ups(document, follow_up_targets or {}))
    if "reviewers" in document:
        problems.extend(_check_reviewers(document, known_connectors))
    if "policies" in document:
        problems.extend(_check_policies(document, policy_origins or {}))
    elif actions:
        problems.extend(_check_policies_in_force(document))
    for i, name in enumerate(document.get("unconfirmed_classes") or []):
        if name not in actions:
            problems.append(
                CatalogProblem(f"/unconfirmed_classes/{i}", f"{name!r} is no action of this file")
            )
        elif actions[name].get("enabled", True):
            problems.append(
                CatalogProblem(
                    f"/actions/{escape_pointer_token(name)}/enabled",
                    "an action whose class is unconfirmed cannot be enabled",
                )
            )
    if problems:
        raise CatalogError(source, problems)


def _check_reviewers(document: dict[str, Any], connectors: set[str]) -> list[CatalogProblem]:
    """The ``reviewers:`` section against this file's actions and the stored ones, and the
    groups there are (actions/policy/reviewers.py)."""
    section = document["reviewers"] or {}
    actions = dict(Action.objects.values_list("name", "definition"))
    actions.update(document.get("actions") or {})
    wanted = section_groups(section)
    existing = set(Group.objects.filter(name__in=wanted).values_list("name", flat=True))
    return [
        CatalogProblem(pointer, message)
        for pointer, message in reviewers_problems(
            section, actions=actions, connectors=connectors, groups_existing=existing
        )
    ]


def _merged_actions(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The stored actions' definitions, with this file's over them."""
    actions = dict(Action.objects.values_list("name", "definition"))
    actions.update(document.get("actions") or {})
    return actions


def _check_policies(
    document: dict[str, Any], origins: dict[tuple[str, int], str]
) -> list[CatalogProblem]:
    """The ``policies:`` section against this file's actions and the stored ones, and
    the groups there are or will be (actions/policy/sources.py): each problem with its
    line, in the file it came from or in the catalog."""
    section = document["policies"] or {}
    out: list[CatalogProblem] = []
    texts = []
    for part in PARTS:
        for i, item in enumerate(section.get(part) or []):
            if "text" not in item:
                out.append(
                    CatalogProblem(
                        f"/policies/{part}/{i}/file",
                        "policy files are read relative to the catalog file: load the "
                        "catalog from its file (manage.py load_catalog FILE)",
                    )
                )
                continue
            texts.append((part, i, item["text"], origins.get((part, i), "")))
    if out:
        return out
    declared = set(section.get("groups") or [])
    declared |= set(((document.get("reviewers") or {}).get("groups")) or [])

    def groups_existing(wanted: set[str]) -> set[str]:
        return declared | set(Group.objects.filter(name__in=wanted).values_list("name", flat=True))

    checked = check_texts(
        texts, types=catalog_types(_merged_actions(document)), groups_existing=groups_existing
    )
    for problem in checked.problems:
        if problem.origin:
            where = (
                f"{problem.origin}, line {problem.line}: "
                if problem.line
                else f"{problem.origin}: "
            )
            out.append(
                CatalogProblem(
                    f"/policies/{problem.part}/{problem.item}/file", where + problem.message
                )
            )
        else:
            out.append(
                CatalogProblem(
                    f"/policies/{problem.part}/{problem.item}/text",
                    problem.message,
                    text_line=problem.line,
                )
            )
    return out


# What of an action the policies' types are made of.
_TYPED_KEYS = ("kind", "consequence_class", "input_schema", "document")


def _check_policies_in_force(document: dict[str, Any]) -> list[CatalogProblem]:
    """A file without ``policies:`` leaves the set in force as it is: the actions it
    defines must not break it (a field a policy reads, removed from a document). Only
    when they could: an action whose types are unchanged, or a new one no policy's scope
    can reach, is not checked again (an import proposes hundreds)."""
    current = policy_version_current()
    if current is None or not (current.enforce.strip() or current.shadow.strip()):
        return []
    stored = dict(Action.objects.values_list("name", "definition"))
    touched = {
        name: definition
        for name, definition in (document.get("actions") or {}).items()
        if name not in stored
        or any(stored[name].get(key) != definition.get(key) for key in _TYPED_KEYS)
    }
    if not touched:
        return []
    compiled = policies_in_force()
    if not compiled.problem and compiled.version == current.number:
        changed = [n for n in touched if n in stored]
        new = [action_types(n, touched[n]) for n in touched if n not in stored]
        reached = any(
            policy_may_match(policy.est, action)
            for policy in compiled.policies.values()
            for action in new
        )
        if not changed and not reached:
            return []
    checked = check_texts(
        [(part, None, getattr(current, part), "") for part in PARTS],
        types=catalog_types({**stored, **(document.get("actions") or {})}),
    )
    return [
        CatalogProblem(
            "",
            f"the policies in force (version {current.number}) would not hold with these "
            f"actions: {p.part}, line {p.line}: {p.message} (load a policies: section that "
            "fits them)",
        )
        for p in checked.problems
    ]


def validate_action_definition(
    name: str,
    definition: dict[str, Any],
    *,
    follow_up_targets: dict[str, dict[str, Any]] | None = None,
) -> list[CatalogProblem]:
    """Every check the file loader makes, for one action (the admin and importers use it).

    Pointers are relative to the action (``/input_schema/...``). ``follow_up_targets``:
    read actions stored with this one, which its ``check_with`` may name.
    """
    document = {"version": 1, "actions": {name: definition}}
    try:
        validate_catalog(document, name, follow_up_targets=follow_up_targets)
    except CatalogError as exc:
        prefix = f"/actions/{escape_pointer_token(name)}"
        return [CatalogProblem(p.pointer.removeprefix(prefix), p.message) for p in exc.problems]
    return []
