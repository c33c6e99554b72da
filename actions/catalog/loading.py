"""A validated catalog written in one transaction: connectors, actions (a new version
when a definition changed), decision rules and policies, each change audited."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth.models import Group
from django.db import transaction

from actions.lib.audit import audit_record

from ..lib.canonical import digest, normalize
from ..models import Action, ActionVersion, Connector, DecisionRule
from ..policy.reviewers import section_rules
from ..policy.sources import MAX_TEXT_CHARS, PARTS, part_text
from ..policy.versions import policy_set_replace, policy_version_current
from ..text import localized
from ..toolpins import confirm_action_tools
from .parsing import line_in_text, line_of, parse_catalog_text
from .problems import CatalogError, CatalogProblem
from .validation import validate_catalog


@dataclass
class LoadReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    connectors: list[str] = field(default_factory=list)
    # The decision rules now in force, when the file has a ``reviewers:`` section (None:
    # it has none, and the rules in force were left as they were).
    decision_rules: list[str] | None = None
    groups_created: list[str] = field(default_factory=list)
    # The policy set's version in force after the load, when the file has a
    # ``policies:`` section (None: it has none, and the set in force was left as it
    # was); ``policies_changed``: the load made that version.
    policies: int | None = None
    policies_changed: bool = False


def load_catalog(
    text: str,
    *,
    source: str = "<catalog>",
    base_urls: dict[str, str] | None = None,
    actor: str = "catalog",
    base_dir: Path | None = None,
) -> LoadReport:
    """Validate and apply a catalog file in one transaction.

    An action whose definition changed gets a new version (and digest): plans previewed
    under the old definition can no longer be approved or executed. ``base_dir``: the
    catalog file's directory, where the ``.cedar`` files its ``policies:`` names are.
    """
    return catalog_apply(
        catalog_document(text, source=source, base_urls=base_urls, base_dir=base_dir),
        actor=actor,
    )


def catalog_document(
    text: str,
    *,
    source: str = "<catalog>",
    base_urls: dict[str, str] | None = None,
    base_dir: Path | None = None,
) -> dict[str, Any]:
    """A catalog file parsed and validated (CatalogError with every problem, each with its
    line), ready for ``catalog_apply``; ``base_urls`` override the connectors' addresses.
    The ``.cedar`` files the ``policies:`` section names are read (from ``base_dir``) and
    put in the document as text: what is applied is exactly what was validated."""
    document = parse_catalog_text(text, source)
    for name, url in (base_urls or {}).items():
        document.setdefault("connectors", {}).setdefault(name, {})["base_url"] = url
    try:
        origins = _read_policy_files(document, base_dir, source)
        validate_catalog(document, source, policy_origins=origins)
    except CatalogError as exc:
        for problem in exc.problems:
            if problem.line:
                continue
            if problem.text_line:
                problem.line = line_in_text(text, problem.pointer, problem.text_line)
            else:
                problem.line = line_of(text, problem.pointer)
        raise
    return document


MAX_POLICY_FILES = 200


def _read_policy_files(
    document: dict[str, Any], base_dir: Path | None, source: str
) -> dict[tuple[str, int], str]:
    """Replace each ``{file: NAME}`` of the ``policies:`` section by ``{text: …}``, the
    file's content; returns the file each text came from. A file must be a ``.cedar``
    file inside the catalog file's directory. Without ``base_dir`` the items are left as
    they are (validation says the catalog must be loaded from its file)."""
    section = document.get("policies")
    origins: dict[tuple[str, int], str] = {}
    if not isinstance(section, dict) or base_dir is None:
        return origins
    problems: list[CatalogProblem] = []
    root = Path(base_dir).resolve()
    for part in PARTS:
        items = section.get(part)
        if not isinstance(items, list):
            continue
        for i, item in enumerate(items):
            if (
                not isinstance(item, dict)
                or set(item) != {"file"}
                or not isinstance(item["file"], str)
            ):
                continue  # the schema says what is wrong with it
            name = item["file"]
            pointer = f"/policies/{part}/{i}/file"
            path = (root / name).resolve()
            if (
                not name.endswith(".cedar")
                or ".." in Path(name).parts
                or not path.is_relative_to(root)
            ):
                problems.append(
                    CatalogProblem(
                        pointer, "a policy file is a .cedar file inside the catalog's directory"
                    )
                )
                continue
            if len(origins) >= MAX_POLICY_FILES:
                problems.append(CatalogProblem(pointer, f"at most {MAX_POLICY_FILES} policy files"))
                continue
            try:
                content = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
                problems.append(CatalogProblem(pointer, f"cannot read {name}: {why}"))
                continue
            if len(content) > MAX_TEXT_CHARS:
                problems.append(
                    CatalogProblem(pointer, f"{name} is longer than {MAX_TEXT_CHARS // 1024} KiB")
                )
                continue
            items[i] = {"text": content}
            origins[(part, i)] = name
    if problems:
        raise CatalogError(source, problems)
    return origins


def connector_fields(spec: dict[str, Any]) -> dict[str, Any]:
    """A connector's columns from its catalog entry: an HTTP API by its base URL, or an
    MCP server (``mcp:``) by how it is reached, its address the URL or, for a server
    started over stdio, ``stdio:`` and the hash of how it is started."""
    timeouts = spec.get("timeouts") or {}
    if "mcp" not in spec:
        return {
            "kind": "http",
            "server": {},
            "base_url": spec["base_url"].rstrip("/"),
            "connect_timeout": timeouts.get("connect", 3.0),
            "read_timeout": timeouts.get("read", 10.0),
        }
    mcp = spec["mcp"]
    if "url" in mcp:
        server = {"transport": "http", "url": mcp["url"], "headers": dict(mcp.get("headers") or {})}
        address = mcp["url"]
    else:
        server = {
            "transport": "stdio",
            "command": mcp["command"],
            "args": list(mcp.get("args") or []),
            "env": dict(mcp.get("env") or {}),
            "cwd": mcp.get("cwd", ""),
        }
        address = "stdio:" + digest(server)[:32]
    return {
        "kind": "mcp",
        "server": server,
        "base_url": address,
        "connect_timeout": timeouts.get("connect", 10.0),
        "read_timeout": timeouts.get("read", 30.0),
    }


def catalog_apply(document: dict[str, Any], *, actor: str = "catalog") -> LoadReport:
    """Store a document ``catalog_document`` validated, in one transaction."""
    report = LoadReport()
    with transaction.atomic():
        for name, spec in (document.get("connectors") or {}).items():
            Connector.objects.update_or_create(name=name, defaults=connector_fields(spec))
            report.connectors.append(name)
        unconfirmed = set(document.get("unconfirmed_classes") or [])
        for name, definition in (document.get("actions") or {}).items():
            # A file that says a class is unconfirmed keeps it so (an export of actions
            # imported and not yet reviewed); otherwise its writer has stated the class.
            _, change = action_define(
                name=name,
                definition=definition,
                actor=actor,
                class_confirmed=False if name in unconfirmed else None,
            )
            getattr(report, change).append(name)
        if "reviewers" in document:
            decision_rules_replace(document["reviewers"] or {}, actor=actor, report=report)
        if "policies" in document:
            policies_replace(document["policies"] or {}, actor=actor, report=report)
    return report


def policies_replace(section: dict[str, Any], *, actor: str, report: LoadReport) -> None:
    """Put a validated ``policies:`` section in force as a whole (its files already read
    into text): a new version when the text of either part changed, audited; declared
    groups that do not exist are made (empty, without permissions). Runs inside the
    caller's transaction."""
    for name in sorted(section.get("groups") or []):
        _group, made = Group.objects.get_or_create(name=name)
        if made and name not in report.groups_created:
            report.groups_created.append(name)
    texts = {part: part_text(item["text"] for item in section.get(part) or []) for part in PARTS}
    version = policy_set_replace(enforce=texts["enforce"], shadow=texts["shadow"], actor=actor)
    current = version or policy_version_current()
    report.policies = current.number if current else 0
    report.policies_changed = version is not None


def decision_rules_replace(
    section: dict[str, Any], *, actor: str, report: LoadReport | None = None
) -> list[str]:
    """Put a validated ``reviewers:`` section in force as a whole: rules it lacks are
    removed, declared groups that do not exist are made (empty, without permissions).
    Audited when anything changed. Runs inside the caller's transaction."""
    report = report if report is not None else LoadReport()
    for name in sorted(section.get("groups") or []):
        _group, made = Group.objects.get_or_create(name=name)
        if made:
            report.groups_created.append(name)
    rules = section_rules(section)
    stored = {r.name: r for r in DecisionRule.objects.select_for_update()}
    changed = bool(set(stored) - {r["name"] for r in rules}) or bool(report.groups_created)
    DecisionRule.objects.exclude(name__in=[r["name"] for r in rules]).delete()
    for position, rule in enumerate(rules):
        definition = normalize({k: v for k, v in rule.items() if k != "name"})
        rule_digest = digest(definition)
        old = stored.get(rule["name"])
        if old is not None and old.digest == rule_digest and old.position == position:
            continue
        changed = True
        DecisionRule.objects.update_or_create(
            name=rule["name"],
            defaults={
                "position": position,
                "definition": definition,
                "digest": rule_digest,
                "updated_by": actor,
            },
        )
    report.decision_rules = [r["name"] for r in rules]
    if changed:
        audit_record(
            kind="decision_rules.replaced",
            actor=actor,
            data={
                "rules": report.decision_rules,
                "digest": digest(normalize(section)),
                "groups_created": report.groups_created,
            },
        )
    return report.decision_rules


def action_define(
    *,
    name: str,
    definition: dict[str, Any],
    actor: str,
    source: str = "catalog",
    class_confirmed: bool | None = None,
    lint: list[dict[str, str]] | None = None,
) -> tuple[Action, str]:
    """Create or change one action from an already validated definition.

    Returns the action and ``"created"``, ``"updated"`` or ``"unchanged"``. A changed
    definition gets the next version number; every version is kept with who made it.
    """
    definition = normalize(definition)
    new_digest = digest(definition)
    connector = Connector.objects.get(name=definition["connector"])
    fields = {
        # The column holds the English title (search, the admin, the API).
        "title": localized(definition["title"]),
        "description": definition.get("description", ""),
        "connector": connector,
        "kind": definition["kind"],
        "consequence_class": definition["consequence_class"],
        "definition": definition,
        "digest": new_digest,
        "enabled": definition.get("enabled", True),
        "source": source,
        "class_confirmed": class_confirmed,
        "updated_by": actor,
    }
    if lint is not None:
        fields["lint"] = lint
    with transaction.atomic():
        existing = Action.objects.select_for_update().filter(name=name).first()
        if existing is not None and existing.digest == new_digest:
            return existing, "unchanged"
        if class_confirmed is None:
            # Loading a file never confirms a class nobody confirmed (an imported action
            # stays under review until someone confirms it in the admin).
            fields["class_confirmed"] = existing.class_confirmed if existing else True
        if fields["enabled"] and not fields["class_confirmed"]:
            raise CatalogError(
                name,
                [
                    CatalogProblem(
                        "/enabled",
                        "the consequence class must be confirmed by a person before the "
                        "action is enabled (admin: Confirm class and enable)",
                    )
                ],
            )
        if existing is None:
            action = Action.objects.create(name=name, version=1, **fields)
            change = "created"
        else:
            action = existing
            for key, value in fields.items():
                setattr(action, key, value)
            action.version = existing.version + 1
            action.save()
            change = "updated"
        ActionVersion.objects.create(
            action=action,
            version=action.version,
            definition=definition,
            digest=new_digest,
            changed_by=actor,
        )
        audit_record(
            kind=f"action.{change}",
            actor=actor,
            data={
                "action": name,
                "version": action.version,
                "digest": new_digest,
                "source": source,
            },
        )
    return action, change


def action_confirm_class(*, name: str, actor: str) -> Action:
    """A person confirms an action's consequence class (imported actions need this)."""
    with transaction.atomic():
        action = Action.objects.select_for_update().get(name=name)
        if not action.class_confirmed:
            Action.objects.filter(pk=action.pk).update(class_confirmed=True, updated_by=actor)
            action.class_confirmed = True
            audit_record(
                kind="action.class_confirmed",
                actor=actor,
                data={"action": name, "consequence_class": action.consequence_class},
            )
            # An imported MCP action's tools are pinned to what the import saw.
            confirm_action_tools(action, actor=actor)
    return action
