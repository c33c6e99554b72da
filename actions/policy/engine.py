"""Evaluating policies over a plan: what the policies say, and the floor under it.

A plan is put to Cedar as one request:

* **principal** ``Agent::"<name>"``: ``name``, ``registrar`` (who registered it, or
  ""), the agent's attributes as tags (strings; other values as canonical JSON), and
  ``on_behalf_of``, when a person's token came with the plan: ``Person::"<iss> <sub>"``,
  a member of ``Group::"<name>"`` for each of their groups;
* **action** the catalog action, ``Action::"send_invoice"``, a member of
  ``Action::"class:<consequence class>"`` and ``Action::"kind:<change kind>"``;
* **resource** ``Target::"<connector> <path>"`` with ``connector`` and ``path``;
* **context**, typed per action (schema.py): ``input``, ``before`` and ``after``,
  ``lower`` (their text fields lower-cased), ``changed`` (the changed pointers),
  ``deltas`` (pointer → after − before, for the document's numeric fields that
  changed), ``email_domains`` (pointer → the domain of an e-mail field before and
  after), ``text`` (what changed in a text document: lines added and removed, counted
  and as text, capped; actions/textdiff.py), ``rate`` (``hour``, ``day``: the agent's
  plans for this action, as the caller counted them) and ``time`` (``hour``,
  ``minute``, ``weekday`` "mon"…"sun", in COUNTERSIGN_POLICY_TIMEZONE).

Every derived value comes from exactly the value that is written, parsed strictly: an
e-mail's domain from actions/lib/formats.py's parse (as written, A-Z lower-cased only),
a number from its JSON number or plain decimal string, a lower-cased text from the
string itself. A value that does not parse strictly gives no attribute, and is an error
of the plan's evaluation, so no policy approves the plan (the floor below).

The outcome (``PolicyResult.outcome``):

1. a satisfied ``forbid`` → ``refuse``, with its ``@reason``;
2. otherwise a satisfied ``@require`` permit → ``review``, its clauses added to the
   plan's requirement, even if an ``@approve`` matched too (more people, never fewer);
3. otherwise a satisfied ``@approve`` permit → ``approve``, unless the floor says no;
4. otherwise ``review``, with the decision rules' requirement alone.

The floor: an irreversible plan is never approved by policy; a policy that fails to
evaluate never leads to ``approve`` (any error, and the outcome is at least
``review``, with the errors in the result), nor does a derived value whose source did
not parse strictly; an erroring ``forbid`` is not a refusal
(Cedar skips it) and not a yes either; an erroring ``@require`` adds its clause
anyway. Nothing a plan holds makes evaluation raise: a value that does not fit its
type, or anything else that stops the request being built, is an error of the plan's
evaluation, so ``review``.

Pure: no database, no app. The set in force is loaded and cached by versions.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cedarpy

from .requests import PlanFacts, PolicyFailure, plan_request_checked
from .reviewers import requirement_from_clauses
from .schema import ActionTypes, Misfit, action_types, cedar_schema, class_group, kind_group
from .sources import ENFORCE, PARTS, SHADOW, Policy, Problem, check_texts, set_hash

REFUSE = "refuse"
APPROVE = "approve"
REVIEW = "review"
MAX_ERROR_CHARS = 300
FLOOR_IRREVERSIBLE = "irreversible plans are never approved by policy"
FLOOR_ERRORS = "a policy failed to evaluate, so no policy approves this plan"


class PolicySetInvalid(Exception):
    """A policy set that cannot be put in force: every problem, each with its line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(_problem_text(p) for p in problems))


def _problem_text(problem: Problem) -> str:
    where = problem.origin or problem.part
    if problem.line:
        where += f", line {problem.line}"
    return f"{where}: {problem.message}"


@dataclass(frozen=True)
class PolicyResult:
    outcome: str  # REFUSE | APPROVE | REVIEW
    # The policies that decided: the satisfied forbids (refuse), the @approve permits
    # (approve), the @require permits whose clauses were added (review), or none.
    policies: tuple[str, ...] = ()
    reason: str = ""  # for a refusal: the forbids' @reason
    # Added to the decision rules' requirement ({} when nothing is): {"rules":
    # ["policy:<id>", …], "all_of": [{"any_of": [{"group", "count"}]}]}.
    requirement: Mapping[str, Any] = field(default_factory=dict)
    errors: tuple[PolicyFailure, ...] = ()
    # Why a satisfied @approve did not approve (FLOOR_IRREVERSIBLE, FLOOR_ERRORS), or "".
    floor: str = ""
    # Every policy whose conditions held (a refusal names only its forbids: Cedar stops
    # looking at permits once a forbid holds).
    matched: tuple[str, ...] = ()
    set_hash: str = ""
    version: int = 0
    part: str = ENFORCE

    def as_dict(self) -> dict[str, Any]:
        """As stored with a plan or sent in an answer (JSON)."""
        return {
            "outcome": self.outcome,
            "policies": list(self.policies),
            "reason": self.reason,
            "requirement": dict(self.requirement),
            "errors": [{"policy": e.policy, "message": e.message} for e in self.errors],
            "floor": self.floor,
            "matched": list(self.matched),
            "set_hash": self.set_hash,
            "version": self.version,
            "part": self.part,
        }


# --- a compiled set ------------------------------------------------------------------------


@dataclass(frozen=True)
class CompiledPolicies:
    """A policy set ready to evaluate: parsed once, with the catalog's types and Cedar
    schema. ``sets[(part, action)]`` holds only the policies whose scope can match that
    action (None: none can), so an evaluation looks at the policies that concern it."""

    version: int
    hash: str
    enforce_text: str
    shadow_text: str
    types: Mapping[str, ActionTypes]
    schema: Any  # cedarpy.Schema
    policies: Mapping[tuple[str, str], Policy]  # (part, id) -> policy
    sets: Mapping[tuple[str, str], Any]  # (part, action) -> cedarpy.PolicySet | None
    # Not "": the set does not hold with the catalog it is evaluated against (a change
    # made around the loader); every evaluation is then an error, so a review.
    problem: str = ""

    def ids(self, part: str = ENFORCE) -> list[str]:
        return sorted(i for p, i in self.policies if p == part)

    @property
    def empty(self) -> bool:
        return not self.policies


def catalog_types(actions: Mapping[str, Mapping[str, Any]]) -> dict[str, ActionTypes]:
    return {name: action_types(name, definition) for name, definition in actions.items()}


def policies_compile(
    *,
    enforce: str,
    shadow: str = "",
    actions: Mapping[str, Mapping[str, Any]],
    version: int = 0,
    groups_existing: set[str] | None = None,
) -> CompiledPolicies:
    """Check and compile a set (the texts of its two parts) against ``actions`` (name →
    definition). Raises PolicySetInvalid with every problem. ``groups_existing``: the
    groups ``@require`` may name (None: not checked, as for the set already in force,
    whose groups the submission checks)."""
    types = catalog_types(actions)
    schema_json = json.dumps(cedar_schema(types))
    schema = cedarpy.Schema.from_json_str(schema_json)
    checked = check_texts(
        [(ENFORCE, None, enforce, ""), (SHADOW, None, shadow, "")],
        types=types,
        groups_existing=groups_existing,
        schema=schema,
    )
    if checked.problems:
        raise PolicySetInvalid(checked.problems)
    return _compile(
        checked.policies,
        types=types,
        schema=schema,
        version=version,
        enforce=enforce,
        shadow=shadow,
    )


def policies_uncompiled(
    *, enforce: str, shadow: str, version: int, problem: str = ""
) -> CompiledPolicies:
    """A set with nothing to evaluate: no policy at all (``problem`` empty), or a set in
    force that no longer holds (every evaluation is then an error, so a review)."""
    return CompiledPolicies(
        version=version,
        hash=set_hash(enforce, shadow),
        enforce_text=enforce,
        shadow_text=shadow,
        types={},
        schema=None,
        policies={},
        sets={},
        problem=problem,
    )


def policies_broken(*, enforce: str, shadow: str, version: int, problem: str) -> CompiledPolicies:
    """A set in force that no longer holds: every evaluation is an error (a review)."""
    return policies_uncompiled(enforce=enforce, shadow=shadow, version=version, problem=problem)


def _compile(
    policies: list[Policy],
    *,
    types: Mapping[str, ActionTypes],
    schema: Any,
    version: int,
    enforce: str,
    shadow: str,
) -> CompiledPolicies:
    members: dict[str, list[Policy]] = {
        ENFORCE: [p for p in policies if p.part == ENFORCE and not p.shadow],
        SHADOW: [p for p in policies if p.part == SHADOW or p.shadow],
    }
    by_id = {(part, p.id): p for part in PARTS for p in members[part]}
    sets: dict[tuple[str, str], Any] = {}
    for part in PARTS:
        for name, action in types.items():
            chosen = {p.id: p.est for p in members[part] if policy_may_match(p.est, action)}
            sets[(part, name)] = (
                cedarpy.PolicySet.from_json_str(
                    json.dumps({"staticPolicies": chosen, "templates": {}, "templateLinks": []})
                )
                if chosen
                else None
            )
    return CompiledPolicies(
        version=version,
        hash=set_hash(enforce, shadow),
        enforce_text=enforce,
        shadow_text=shadow,
        types=types,
        schema=schema,
        policies=by_id,
        sets=sets,
    )


def policy_may_match(est: Mapping[str, Any], action: ActionTypes) -> bool:
    """Can the policy's action scope match plans of ``action``? Leaving out a policy
    that cannot changes no answer: its scope would be false, and nothing else of it
    would be evaluated."""
    scope = est.get("action") or {}
    own = {action.name, class_group(action.consequence_class), kind_group(action.kind)}
    op = scope.get("op")
    if op == "All":
        return True
    if op == "==":
        return (scope.get("entity") or {}).get("id") == action.name
    if op == "in":
        entities = scope.get("entities") or ([scope["entity"]] if "entity" in scope else [])
        return any((e or {}).get("id") in own for e in entities)
    return True  # a form not known here: keep it, Cedar decides


# --- evaluating ----------------------------------------------------------------------------

_POLICY_ERROR = re.compile(r"error while evaluating policy `([^`]+)`: (.*)", re.DOTALL)


def _bounded(message: str) -> str:
    message = " ".join(str(message).split())
    return message if len(message) <= MAX_ERROR_CHARS else message[: MAX_ERROR_CHARS - 1] + "…"


def _failed(policies: CompiledPolicies, part: str, message: str) -> PolicyResult:
    return PolicyResult(
        outcome=REVIEW,
        errors=(PolicyFailure("", _bounded(message)),),
        set_hash=policies.hash,
        version=policies.version,
        part=part,
    )


def _decide(
    policies: CompiledPolicies,
    part: str,
    types: ActionTypes,
    satisfied: Iterable[str],
    errors: list[PolicyFailure],
) -> PolicyResult:
    held = [
        policies.policies[(part, i)]
        for i in sorted(set(satisfied))
        if (part, i) in policies.policies
    ]
    errored = [policies.policies.get((part, e.policy)) for e in errors]
    common = {
        "errors": tuple(errors),
        "matched": tuple(p.id for p in held),
        "set_hash": policies.hash,
        "version": policies.version,
        "part": part,
    }
    forbids = [p for p in held if p.effect == "forbid"]
    if forbids:
        return PolicyResult(
            outcome=REFUSE,
            policies=tuple(p.id for p in forbids),
            reason="; ".join(p.refusal for p in forbids),
            **common,
        )
    # An erroring @require still adds its clause: asking more people, never fewer.
    requiring = sorted(
        {
            p.id: p
            for p in held + [e for e in errored if e is not None]
            if p.effect == "permit" and p.require
        }.values(),
        key=lambda p: p.id,
    )
    if requiring:
        requirement = requirement_from_clauses(
            [f"policy:{p.id}" for p in requiring],
            [clause for p in requiring for clause in p.require],
        )
        return PolicyResult(
            outcome=REVIEW,
            policies=tuple(p.id for p in requiring),
            requirement=requirement,
            **common,
        )
    approving = [p for p in held if p.effect == "permit" and p.approve]
    if approving:
        if types.consequence_class == "irreversible":
            return PolicyResult(outcome=REVIEW, floor=FLOOR_IRREVERSIBLE, **common)
        if errors:
            return PolicyResult(outcome=REVIEW, floor=FLOOR_ERRORS, **common)
        return PolicyResult(outcome=APPROVE, policies=tuple(p.id for p in approving), **common)
    return PolicyResult(outcome=REVIEW, **common)


# What went wrong, in fixed words: Cedar's own text quotes the values it evaluated (an
# overflow names both operands, a bad decimal its string), which are the plan's data and
# must reach no log line, audit record, page or report. Matched in order; the first wins.
ERROR_CATEGORIES = (
    ("overflow", "integer overflow"),
    ("extension function", "an extension function (decimal, ip, datetime) refused its argument"),
    ("does not have the attribute", "an attribute the policy reads is absent"),
    ("does not have the tag", "a tag the policy reads is absent"),
    ("type error", "a value of an unexpected type"),
    ("unexpected type", "a value of an unexpected type"),
)
OTHER_ERROR = "the policy failed to evaluate"


def error_category(message: str) -> str:
    """Cedar's evaluation error as one of a few fixed texts, never quoting a value."""
    lowered = str(message).lower()
    for needle, category in ERROR_CATEGORIES:
        if needle in lowered:
            return category
    return OTHER_ERROR


def _errors(
    policies: CompiledPolicies,
    types: ActionTypes,
    raw: list[str],
    unparsed: Sequence[PolicyFailure] = (),
) -> list[PolicyFailure]:
    out = list(unparsed)
    for message in raw:
        found = _POLICY_ERROR.match(message)
        if found:
            out.append(PolicyFailure(found.group(1), error_category(found.group(2))))
        elif message.startswith("failed to build request"):
            # Cedar's text repeats the whole context: the plan's data, not for a log line.
            out.append(
                PolicyFailure("", f"the plan does not fit the policies' types for {types.name}")
            )
        else:
            out.append(PolicyFailure("", error_category(message)))
    return sorted(set(out), key=lambda e: (e.policy, e.message))


def policy_evaluate(
    facts: PlanFacts, policies: CompiledPolicies, *, part: str = ENFORCE
) -> PolicyResult:
    """What ``policies`` say of one plan (``part``: the enforced set, or the shadow one)."""
    return policy_evaluate_batch([facts], policies, part=part)[0]


def policy_evaluate_batch(
    plans: Sequence[PlanFacts], policies: CompiledPolicies, *, part: str = ENFORCE
) -> list[PolicyResult]:
    """What ``policies`` say of each plan, in order; plans of one action go to Cedar
    together (``is_authorized_batch``). Never raises on a plan's content."""
    results: list[PolicyResult | None] = [None] * len(plans)
    pending: dict[str, list[tuple[int, dict, list[dict]]]] = {}
    # Derived values a plan's content could not give: errors of its evaluation.
    unparsed: dict[int, list[PolicyFailure]] = {}
    for i, facts in enumerate(plans):
        if policies.problem:
            results[i] = _failed(policies, part, policies.problem)
            continue
        types = policies.types.get(facts.action)
        if types is None:
            results[i] = _failed(
                policies, part, f"no action {facts.action!r} in the catalog these policies know"
            )
            continue
        if policies.sets.get((part, facts.action)) is None:
            results[i] = _decide(policies, part, types, (), [])
            continue
        try:
            request, entities, failures = plan_request_checked(facts, types)
        except Misfit as exc:
            results[i] = _failed(
                policies, part, f"the plan does not fit the policies' types: {exc}"
            )
            continue
        except Exception as exc:  # hostile content must never raise here
            results[i] = _failed(
                policies, part, f"the plan could not be put to the policies ({type(exc).__name__})"
            )
            continue
        if failures:
            unparsed[i] = failures
        pending.setdefault(facts.action, []).append((i, request, entities))
    for action, items in pending.items():
        types = policies.types[action]
        policy_set = policies.sets[(part, action)]
        for batch, entities in _batches(items):
            try:
                answers = cedarpy.is_authorized_batch(
                    [request for _, request, _ in batch],
                    policy_set,
                    entities,
                    schema=policies.schema,
                )
            except Exception as exc:  # e.g. a string Cedar's parser refuses
                # Its text may quote the plan's values: the kind of failure only.
                for i, _, _ in batch:
                    results[i] = _failed(
                        policies,
                        part,
                        f"Cedar could not evaluate the plan ({error_category(str(exc))})",
                    )
                continue
            for (i, _, _), answer in zip(batch, answers, strict=True):
                diagnostics = answer.diagnostics
                results[i] = _decide(
                    policies,
                    part,
                    types,
                    diagnostics.reasons,
                    _errors(policies, types, diagnostics.errors, unparsed.get(i, [])),
                )
    return [r for r in results if r is not None]


def _batches(items: list[tuple[int, dict, list[dict]]]):
    """Requests whose entities agree, with their entities: one agent name or target id
    with different attributes in two plans goes to separate batches."""
    if len(items) == 1:
        yield items, items[0][2]
        return
    batch: list[tuple[int, dict, list[dict]]] = []
    known: dict[tuple[str, str], dict] = {}
    for item in items:
        mine = {(e["uid"]["type"], e["uid"]["id"]): e for e in item[2]}
        if any(uid in known and known[uid] != entity for uid, entity in mine.items()):
            yield batch, list(known.values())
            batch, known = [], {}
        batch.append(item)
        for uid, entity in mine.items():
            known.setdefault(uid, entity)
    if batch:
        yield batch, list(known.values())
