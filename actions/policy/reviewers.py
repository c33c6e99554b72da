"""The catalog's ``reviewers:`` section: named rules saying who may decide which plans.

A rule matches plans by action, connector, kind, consequence class and comparisons
(actions/rules.py) over the target as read (``before``) and over the input, and gives a
**requirement**: thresholds over groups, ``any_of`` (one threshold suffices) or
``all_of`` (every one). The rules that match a plan combine as all-of, so a plan's
requirement is a list of clauses, each satisfied by any one of its thresholds::

    {"rules": ["invoices", "large-invoices"],
     "all_of": [{"any_of": [{"group": "billing-approvers", "count": 1}]},
                {"any_of": [{"group": "finance-leads", "count": 1}]}]}

A plan no rule matches has the empty requirement ``{}``: its class default applies
(approvals.decisions). Approvers are distinct and one approval counts toward one
threshold only, so whether approvals meet a requirement is a matching of people to
threshold places (``requirement_assess``), not a count per group.

A rule may **escalate**: ``escalate_after: 30m`` and ``escalate_to: finance-leads`` add to
each of its clauses a threshold of that group with ``after`` (seconds from the plan's
submission): its members may fill that threshold only once the plan has waited that
long, and an approval counts for it only if it was given after that time. The time is
part of the requirement, so of the fingerprint: the worker checks it from the stored
times alone.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..cache import cached
from ..lib.canonical import escape_pointer_token
from ..models import DecisionRule
from ..rules import rule_decides, rule_problem

# Past this many ways of choosing one threshold per clause, a requirement is refused at
# submission rather than searched (bounded time): rules that each offer eight
# alternatives and all match one plan are not a requirement a person can read anyway.
MAX_COMBINATIONS = 4096
# What a break-glass approval is counted as: a member of every group, at any time. No
# group can have this name (the catalog's group names start with a letter or digit).
EVERY_GROUP = "*"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str) -> int:
    """``45s``, ``30m``, ``2h``, ``1d`` as seconds (the catalog schema checked the form)."""
    return int(text[:-1]) * _UNITS[text[-1]]


def rule_groups(rule: dict[str, Any]) -> set[str]:
    """Every group a rule names: its thresholds' and the one it escalates to."""
    groups = {t["group"] for t in (rule.get("any_of") or []) + (rule.get("all_of") or [])}
    if rule.get("escalate_to"):
        groups.add(rule["escalate_to"])
    return groups


def rules_keeping(requirement: dict[str, Any], rules: Iterable[dict[str, Any]]) -> list[dict]:
    """The decision rules behind ``requirement`` that keep its plans for their groups:
    ``[{"rule": name, "groups": [...]}]``, sorted by name; ``[]`` when every one of them
    lets policies approve (``policies_may_approve: true``) or no rule gave it.

    A rule is an ownership claim: the groups it names own the plans it matches, and a
    policy's @approve (written by whoever may load policies) does not take a plan from
    them unless the rule says it may. A rule named in the requirement but missing from
    ``rules`` keeps its plans too (the safe reading of a rule that changed meanwhile).
    What a policy's ``@require`` added (``policy:<id>``) is no owner: a plan with one is
    never approved by a policy anyway."""
    by_name = {rule["name"]: rule for rule in rules}
    keeping = []
    for name in sorted(requirement.get("rules") or []):
        if name.startswith("policy:"):
            continue
        rule = by_name.get(name)
        if rule is not None and rule.get("policies_may_approve") is True:
            continue
        groups = rule_groups(rule) if rule is not None else requirement_groups(requirement)
        keeping.append({"rule": name, "groups": sorted(groups)})
    return keeping


# --- validation --------------------------------------------------------------------------


def reviewers_problems(
    section: dict[str, Any],
    *,
    actions: dict[str, dict[str, Any]],
    connectors: set[str],
    groups_existing: set[str],
) -> list[tuple[str, str]]:
    """(pointer, message) for each thing wrong in a ``reviewers:`` section already valid
    under the catalog schema. ``actions``: every action definition the rules may name
    (the file's and the stored ones); ``groups_existing``: the Django groups there are.

    A group must exist or be declared in ``groups:`` (loading creates declared groups,
    empty): a misspelt group is refused here rather than making plans nobody can
    decide."""
    out: list[tuple[str, str]] = []
    declared = set(section.get("groups") or [])
    known_groups = declared | groups_existing
    for name, rule in (section.get("rules") or {}).items():
        base = f"/reviewers/rules/{escape_pointer_token(name)}"

        def problem(where: str, message: str, base: str = base, name: str = name) -> None:
            out.append((base + where, f"rule {name!r}: {message}"))

        has_any, has_all = "any_of" in rule, "all_of" in rule
        if has_any == has_all:
            problem("", "give exactly one of any_of or all_of")
        seen_all = {t["group"] for t in (rule.get("any_of") or []) + (rule.get("all_of") or [])}
        for key in ("any_of", "all_of"):
            seen: set[str] = set()
            for i, threshold in enumerate(rule.get(key) or []):
                group = threshold["group"]
                if group not in known_groups:
                    problem(
                        f"/{key}/{i}/group",
                        f"unknown group {group!r} (create it, or declare it in reviewers.groups)",
                    )
                if group in seen:
                    problem(f"/{key}/{i}/group", f"{group!r} is named twice")
                seen.add(group)
        if ("escalate_after" in rule) != ("escalate_to" in rule):
            problem("", "give escalate_after and escalate_to together")
        escalation = rule.get("escalate_to")
        if escalation is not None:
            if escalation not in known_groups:
                problem(
                    "/escalate_to",
                    f"unknown group {escalation!r} (create it, or declare it in reviewers.groups)",
                )
            if escalation in seen_all:
                problem("/escalate_to", f"{escalation!r} already decides under this rule")
        match = rule.get("match") or {}
        for i, action_name in enumerate(match.get("actions") or []):
            if action_name not in actions:
                problem(f"/match/actions/{i}", f"no action named {action_name!r}")
        for i, connector in enumerate(match.get("connectors") or []):
            if connector not in connectors:
                problem(f"/match/connectors/{i}", f"unknown connector {connector!r}")
        named = [actions[a] for a in match.get("actions") or [] if a in actions]
        for i, comparison in enumerate(match.get("before") or []):
            if (why := rule_problem(comparison)) is not None:
                problem(f"/match/before/{i}", why)
        for i, comparison in enumerate(match.get("input") or []):
            where = f"/match/input/{i}"
            if (why := rule_problem(comparison)) is not None:
                problem(where, why)
                continue
            field_name = comparison["pointer"].split("/")[1].replace("~1", "/").replace("~0", "~")
            candidates = named or list(actions.values())
            if not any(
                field_name in ((a.get("input_schema") or {}).get("properties") or {})
                for a in candidates
            ):
                which = "the actions it matches" if named else "any action"
                problem(f"{where}/pointer", f"{field_name!r} is no input field of {which}")
            elif named:
                lacking = sorted(
                    a_name
                    for a_name in match["actions"]
                    if a_name in actions
                    and field_name
                    not in ((actions[a_name].get("input_schema") or {}).get("properties") or {})
                )
                if lacking:
                    problem(f"{where}/pointer", f"{field_name!r} is no input field of {lacking[0]}")
    return out


def section_rules(section: dict[str, Any]) -> list[dict[str, Any]]:
    """The section's rules by name, each with its name (their order means nothing: the
    rules that match a plan combine as all-of)."""
    return [{"name": name, **rule} for name, rule in sorted((section.get("rules") or {}).items())]


def section_groups(section: dict[str, Any]) -> set[str]:
    """Every group the section declares or its rules name (the groups of a requester a
    rule matches on are the identity provider's, not groups that decide: not these)."""
    groups = set(section.get("groups") or [])
    for rule in (section.get("rules") or {}).values():
        groups |= rule_groups(rule)
    return groups


# --- the rules in force ------------------------------------------------------------------


def rules_in_force() -> list[dict[str, Any]]:
    """The stored rules, in order, as of the current catalog generation."""
    return cached(
        "decision_rules",
        None,
        lambda: [
            {"name": name, **definition}
            for name, definition in DecisionRule.objects.order_by("position", "name").values_list(
                "name", "definition"
            )
        ],
    )


# --- matching ----------------------------------------------------------------------------


def plan_subject(
    *,
    action: str,
    connector: str,
    kind: str,
    consequence_class: str,
    before: Any,
    input: dict[str, Any],
    requester_groups: Iterable[str] | None = None,
) -> dict[str, Any]:
    """What a rule looks at, for one plan. ``requester_groups``: the groups of the person
    the plan is on behalf of (None: on behalf of nobody)."""
    return {
        "action": action,
        "connector": connector,
        "kind": kind,
        "consequence_class": consequence_class,
        "before": before,
        "input": input,
        "requester_groups": None if requester_groups is None else frozenset(requester_groups),
    }


def rule_matches(rule: dict[str, Any], subject: dict[str, Any]) -> bool:
    """Does ``rule`` apply to the plan ``subject`` describes?

    A comparison that cannot be decided (its field is missing, or a bound meets a value
    that is no number) counts as matching: a rule that cannot tell applies, since
    applying it asks more people, never fewer."""
    match = rule.get("match") or {}
    for key, listed in (
        ("action", "actions"),
        ("connector", "connectors"),
        ("kind", "kinds"),
        ("consequence_class", "consequence_classes"),
    ):
        if listed in match and subject[key] not in match[listed]:
            return False
    if "requester_groups" in match:
        theirs = subject.get("requester_groups")
        if not theirs or not theirs & set(match["requester_groups"]):
            return False
    for part in ("before", "input"):
        for comparison in match.get(part) or []:
            if rule_decides(comparison, subject[part], {}) is False:
                return False
    return True


def requirement_for(subject: dict[str, Any], rules: list[dict[str, Any]]) -> dict[str, Any]:
    """The requirement the matching rules give a plan: ``{}`` when none matches.

    Clauses repeated by several rules are kept once: the same thing asked twice is
    asked once (two rules each wanting one billing approver want one, not two)."""
    applied: list[str] = []
    clauses: list[dict[str, Any]] = []
    for rule in rules:
        if not rule_matches(rule, subject):
            continue
        applied.append(rule["name"])
        if "any_of" in rule:
            new = [{"any_of": [dict(t) for t in rule["any_of"]]}]
        else:
            new = [{"any_of": [dict(t)]} for t in rule["all_of"]]
        if rule.get("escalate_to"):
            after = duration_seconds(rule["escalate_after"])
            for clause in new:
                count = min(t["count"] for t in clause["any_of"])
                clause["any_of"] = [
                    *clause["any_of"],
                    {"group": rule["escalate_to"], "count": count, "after": after},
                ]
        clauses.extend(new)
    return requirement_from_clauses(applied, clauses)


def requirement_from_clauses(
    sources: Iterable[str], clauses: Iterable[dict[str, Any]]
) -> dict[str, Any]:
    """A requirement from what asked for it (rule names, ``policy:<id>``) and their
    clauses: ``{}`` when nothing did. Clauses repeated are kept once, and everything is in
    a canonical order, so the same rules give the same requirement (and so the same
    fingerprint) whatever order a file lists them in."""
    sources = sorted(set(sources))
    if not sources:
        return {}
    unique: dict[str, dict[str, Any]] = {}
    for clause in clauses:
        canonical = {
            "any_of": sorted(
                (
                    {"group": t["group"], "count": t["count"]}
                    | ({"after": t["after"]} if t.get("after") else {})
                    for t in clause["any_of"]
                ),
                key=_threshold_order,
            )
        }
        # Keyed and ordered by its JSON text (groups, counts and times only: plain ASCII
        # names and integers, so the text is canonical): the same clauses always come in
        # the same order, by group name.
        unique.setdefault(json.dumps(canonical, sort_keys=True), canonical)
    return {"rules": sources, "all_of": [unique[k] for k in sorted(unique)]}


def requirement_merge(*requirements: dict[str, Any]) -> dict[str, Any]:
    """Several requirements as one: every clause of each (the decision rules' and what
    policies add), each asked once."""
    return requirement_from_clauses(
        [s for r in requirements for s in r.get("rules") or []],
        [c for r in requirements for c in r.get("all_of") or []],
    )


def _threshold_order(threshold: dict[str, Any]) -> tuple[str, int, int]:
    return (threshold["group"], threshold["count"], threshold.get("after", 0))


def requirement_for_rule(name: str, definition: dict[str, Any]) -> dict[str, Any]:
    """The requirement one rule gives the plans it matches."""
    rule = {"name": name, **definition, "match": {}}
    return requirement_for({}, [rule])


def requirement_groups(requirement: dict[str, Any], *, elapsed: float | None = None) -> set[str]:
    """The groups that decide under ``requirement``; with ``elapsed`` (seconds since the
    plan was submitted), only those eligible by then (an escalation's group once its
    time has come)."""
    return {
        t["group"]
        for clause in requirement.get("all_of") or []
        for t in clause["any_of"]
        if elapsed is None or elapsed >= t.get("after", 0)
    }


def requirement_escalations(requirement: dict[str, Any]) -> list[tuple[str, int]]:
    """(group, after) for each escalation in ``requirement``, sorted, once each."""
    return sorted(
        {
            (t["group"], t["after"])
            for clause in requirement.get("all_of") or []
            for t in clause["any_of"]
            if t.get("after")
        }
    )


def requirement_within(requirement: dict[str, Any], seconds: float) -> dict[str, Any]:
    """``requirement`` without the escalations that come at or after ``seconds`` (a plan
    expires before they do, so they can never help decide it)."""
    if not requirement:
        return requirement
    return {
        **requirement,
        "all_of": [
            {"any_of": [t for t in clause["any_of"] if t.get("after", 0) < seconds]}
            for clause in requirement.get("all_of") or []
        ],
    }


def requirement_combinations(requirement: dict[str, Any]) -> int:
    total = 1
    for clause in requirement.get("all_of") or []:
        total *= len(clause["any_of"])
    return total


# --- meeting a requirement ---------------------------------------------------------------


@dataclass
class Assessment:
    """How far some approvals go toward a requirement.

    ``filled[c][t]``: approvals counted toward threshold ``t`` of clause ``c`` (in the
    best assignment found); ``counted_for``: each approver's key -> the group it counted
    for; ``met``: every clause has a threshold fully filled by distinct approvers."""

    met: bool
    filled: list[list[int]] = field(default_factory=list)
    counted_for: dict[Any, str] = field(default_factory=dict)


Approver = tuple  # (key, groups, elapsed): see requirement_assess


def _fits(threshold: dict[str, Any], groups: frozenset[str], elapsed: float | None) -> bool:
    """May an approver in ``groups``, who approved ``elapsed`` seconds after the plan was
    submitted, fill a place of ``threshold``?"""
    if EVERY_GROUP in groups:
        return True
    if threshold["group"] not in groups:
        return False
    after = threshold.get("after", 0)
    return not after or (elapsed is not None and elapsed >= after)


def _assign(
    slots: list[dict[str, Any]], approvers: list[tuple[Any, frozenset[str], float | None]]
) -> dict[int, int]:
    """Maximum matching of places to approvers (Kuhn's augmenting paths): place index ->
    approver index, each approver in at most one place, only in a place they fit."""
    owner: dict[int, int] = {}  # approver -> place
    place_of: dict[int, int] = {}  # place -> approver

    def augment(place: int, visited: set[int]) -> bool:
        for a, (_, groups, elapsed) in enumerate(approvers):
            if a in visited or not _fits(slots[place], groups, elapsed):
                continue
            visited.add(a)
            if a not in owner or augment(owner[a], visited):
                owner[a] = place
                place_of[place] = a
                return True
        return False

    for place in range(len(slots)):
        augment(place, set())
    return place_of


def requirement_assess(requirement: dict[str, Any], approvers: Iterable[Approver]) -> Assessment:
    """Do the ``approvers`` meet it? Each is ``(key, groups)`` or ``(key, groups,
    elapsed)``: the requirement's groups they were in when they approved
    (``EVERY_GROUP`` for a break-glass approval) and how many seconds after the plan's
    submission they did (None: unknown, which fills no escalation's place).

    Each way of choosing one threshold per clause is tried (at most MAX_COMBINATIONS; a
    larger requirement is refused at submission, so none is stored); the first that
    distinct approvers fill completely meets it, else the one filled furthest is
    reported."""
    clauses = requirement.get("all_of") or []
    people = [
        (entry[0], frozenset(entry[1]), entry[2] if len(entry) > 2 else None) for entry in approvers
    ]
    best: Assessment | None = None
    best_score = -1
    for n, choice in enumerate(itertools.product(*[range(len(c["any_of"])) for c in clauses])):
        if n >= MAX_COMBINATIONS:
            break
        slots: list[dict[str, Any]] = []
        slot_of: list[tuple[int, int]] = []
        for c, t in enumerate(choice):
            threshold = clauses[c]["any_of"][t]
            slots += [threshold] * threshold["count"]
            slot_of += [(c, t)] * threshold["count"]
        assigned = _assign(slots, people)
        filled = [[0] * len(c["any_of"]) for c in clauses]
        counted: dict[Any, str] = {}
        for place, a in assigned.items():
            c, t = slot_of[place]
            filled[c][t] += 1
            counted[people[a][0]] = slots[place]["group"]
        if len(assigned) == len(slots):
            return Assessment(met=True, filled=filled, counted_for=counted)
        if len(assigned) > best_score:
            best_score = len(assigned)
            best = Assessment(met=False, filled=filled, counted_for=counted)
    return best or Assessment(met=not clauses, filled=[])


def requirement_summary(
    requirement: dict[str, Any],
    assessment: Assessment | None = None,
    *,
    elapsed: float | None = None,
) -> dict[str, Any]:
    """What an agent or a page is told: the rules that applied, each clause's thresholds
    with how many approvals count toward them, and what is missing. Groups and counts,
    never people. An escalation's threshold carries ``after`` (seconds from submission)
    and, given ``elapsed``, whether it is ``escalated`` yet; ``missing`` names only the
    thresholds that can be filled now."""
    if not requirement:
        return {}
    clauses = requirement.get("all_of") or []
    filled = assessment.filled if assessment and assessment.filled else None
    out_clauses = []
    missing = []
    for c, clause in enumerate(clauses):
        thresholds = []
        for i, t in enumerate(clause["any_of"]):
            entry = {"group": t["group"], "count": t["count"]}
            entry["approved"] = filled[c][i] if filled else 0
            if t.get("after"):
                entry["after"] = t["after"]
                entry["escalated"] = elapsed is not None and elapsed >= t["after"]
            thresholds.append(entry)
        met = any(t["approved"] >= t["count"] for t in thresholds)
        out_clauses.append({"any_of": thresholds, "met": met})
        if not met:
            missing.append(
                {
                    "any_of": [
                        {"group": t["group"], "count": t["count"]}
                        for t in thresholds
                        if "after" not in t or t["escalated"]
                    ]
                }
            )
    return {
        "rules": list(requirement.get("rules") or []),
        "all_of": out_clauses,
        "met": bool(assessment and assessment.met),
        "missing": missing,
    }


def duration_text(seconds: int) -> str:
    """``30 min``, ``2 h``, ``45 s``: how long an escalation waits, in the API's English."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def threshold_text(threshold: dict[str, Any]) -> str:
    text = f"{threshold['count']} of {threshold['group']}"
    if threshold.get("after"):
        text += f" after {duration_text(threshold['after'])}"
    return text


def requirement_text(requirement: dict[str, Any]) -> str:
    """One line a person reads: ``1 of billing-approvers and 1 of support-leads``; an
    escalation reads ``1 of finance-leads after 30 min``."""
    parts = []
    for clause in requirement.get("all_of") or []:
        parts.append(" or ".join(threshold_text(t) for t in clause["any_of"]))
    return " and ".join(f"({p})" if " or " in p and len(parts) > 1 else p for p in parts)
