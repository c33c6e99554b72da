"""Looking again at an outcome that is not settled: following accepted work (``pending``)
with its status request, and reconciling an outcome that is ``unknown``.

A look is scheduled in the database (``Plan.next_check_at``) in the transaction that
makes the plan unsettled, and a message wakes a worker when it is due; the sweeper
publishes again any look whose message was lost. A look only reads, except the one
that repeats a keyed request with the same idempotency key (the upstream answers it
from its record, without acting twice), which only a worker can open the credential for.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from actions.connectors.registry import kind_of
from actions.lib import dispatch
from actions.lib.actors import EXECUTOR
from actions.lib.audit import audit_record
from actions.lib.canonical import escape_pointer_token, resolve_pointer
from actions.lib.exceptions import UpstreamError
from actions.models import Credential
from actions.preview import PreviewError
from actions.rules import rule_holds
from actions.vault import VaultError
from approvals.lifecycle import plan_transition
from approvals.models import Attempt, Plan, PlanStatus

from .results import merged, project
from .vault import open_write_secret

# Seconds before each automatic reconciliation of an unknown outcome; after the last one
# comes up inconclusive, the plan waits for a person ("check now" or resolve).
log = logging.getLogger(__name__)

RECONCILE_DELAYS = (2.0, 10.0, 60.0, 300.0, 1800.0)
# What a look finds when the action gives it nothing to ask (no read of the target, no
# status request, no idempotency key): looking again cannot find more, so none is
# scheduled and the plan waits for a person at once.
NO_WAY_TO_LOOK = "no way to look the outcome up: a person must check"
# The first status request of accepted work; then 1 s, 2 s, 4 s... up to a minute.
FIRST_FOLLOW_SECONDS = 1.0


def due(now, seconds: float | None):
    """When a look ``seconds`` from ``now`` is due (None: no look scheduled)."""
    return None if seconds is None else now + timedelta(seconds=seconds)


def wake_look(plan_id, status: str, *, countdown: float | None) -> None:
    """Publish the wake-up for a scheduled look once the transaction commits: the status
    request of accepted work, or the reconciliation of an unknown outcome."""
    task = dispatch.FOLLOW_PENDING if status == PlanStatus.PENDING else dispatch.RECONCILE
    dispatch.on_commit(task, plan_id, countdown=countdown)


# --- accepted work ----------------------------------------------------------------------


def pending_follow(*, plan_id) -> str:
    """Ask the upstream about accepted work once; settle the plan or schedule the next ask."""
    plan = Plan.objects.select_related("action", "action__connector").filter(id=plan_id).first()
    if plan is None or plan.status != PlanStatus.PENDING:
        return f"skipped:{plan.status if plan else 'missing'}"
    attempt = Attempt.objects.get(plan=plan)
    status = plan.action.spec.status
    if status is None or not attempt.status_path:
        return "skipped:no-status-request"
    result = plan.result
    connector = plan.action.connector
    kind = kind_of(connector)
    try:
        with kind.reader(connector) as reader:
            asked = kind.read_status(reader, attempt.status_path)
        body = asked.body
        if body is not None and not asked.answer.secret_echoed:
            # The accepted work's progress updates the fields its answer carries (a
            # deployment's status goes from queued to succeeded).
            result = merged(result, project(plan.action.spec.result, asked.answer)[0])
    except (UpstreamError, ValueError):
        body = None
    checks = attempt.status_checks + 1
    now = timezone.now()
    outcomes = [
        (status.done_when, PlanStatus.COMPLETED, "the accepted work finished"),
        (status.failed_when, PlanStatus.REJECTED, "the accepted work failed upstream"),
    ]
    with transaction.atomic():
        Attempt.objects.filter(pk=attempt.pk).update(status_checks=checks)
        for rule, state, detail in outcomes:
            if body is not None and rule and rule_holds(rule, body, {}):
                plan_transition(
                    plan,
                    to=state,
                    actor=EXECUTOR,
                    event=f"execution.{state}",
                    data={"via": "status request", "checks": checks},
                    finished_at=now,
                    outcome_detail=detail,
                    next_check_at=None,
                    result=result,
                )
                return state
        if checks >= status.max_checks:
            Plan.objects.filter(pk=plan.pk, status=PlanStatus.PENDING).update(
                outcome_detail=f"accepted by the upstream; still not finished after {checks} "
                "checks",
                next_check_at=None,
                result=result,
            )
            return "still-pending"
        countdown = min(2.0**checks * 0.5, 60.0)
        Plan.objects.filter(pk=plan.pk, status=PlanStatus.PENDING).update(
            next_check_at=due(now, countdown), result=result
        )
        wake_look(plan.id, PlanStatus.PENDING, countdown=countdown)
    return "following"


# --- unknown outcomes --------------------------------------------------------------------


def reconcile(*, plan_id, actor: str = EXECUTOR) -> str:
    """Find out what happened to a plan whose outcome is unknown (or accepted work).

    update/replace/create/delete: re-read the target and compare the fields the plan
    sets with their planned and previous values (``judge``, as the worker's verification
    does). invoke: the action's status request,
    or — where the upstream honours idempotency keys — the same request with the same
    key, which the upstream answers without doing the work twice. Anything else stays
    ``unknown``, with what was found recorded, and is looked at again a few times
    (RECONCILE_DELAYS) before it is left to a person.
    """
    plan = Plan.objects.select_related("action", "action__connector").filter(id=plan_id).first()
    if plan is None or plan.status not in PlanStatus.unsettled():
        return f"skipped:{plan.status if plan else 'missing'}"
    if plan.status == PlanStatus.PENDING:
        return pending_follow(plan_id=plan_id)
    attempt = Attempt.objects.filter(plan=plan).first()
    try:
        if plan.kind == "invoke":
            state, finding = _reconcile_invoke(plan, attempt)
        else:
            state, finding = read_back(plan)
    except (PreviewError, UpstreamError) as exc:
        state, finding = None, {"verdict": f"could not read the upstream: {exc}"}
        # The plan's fields are on the line (the task binds them); the text is ours
        # (fixed messages and filtered previews), never the upstream's raw answer.
        log.warning("reconciliation inconclusive: could not read the upstream (%s)", exc)
    except VaultError:
        # A worker without the worker key (misconfigured): it cannot repeat the request.
        state, finding = None, {"verdict": "the write credential cannot be opened here"}
    now = timezone.now()
    with transaction.atomic():
        checks = 1
        if attempt is not None:
            checks = attempt.reconcile_checks + 1
            Attempt.objects.filter(pk=attempt.pk).update(
                reconciliation={**finding, "at": now.isoformat(), "by": actor},
                reconcile_checks=checks,
            )
        if state is None:
            audit_record(kind="reconcile.inconclusive", actor=actor, plan=plan, data=finding)
            # Look again later, a few times, then leave it to a person.
            delay = RECONCILE_DELAYS[checks] if checks < len(RECONCILE_DELAYS) else None
            if finding.get("verdict") == NO_WAY_TO_LOOK:
                delay = None
            Plan.objects.filter(pk=plan.pk, status=PlanStatus.UNKNOWN).update(
                next_check_at=due(now, delay)
            )
            if delay is not None:
                wake_look(plan.id, PlanStatus.UNKNOWN, countdown=delay)
            return "unknown"
        # What the agent is told about the write comes from the attempt: the status of
        # the answer it got, or of the same key's answer when the request was repeated.
        status = finding.pop("upstream_status", None)
        if status is None and attempt is not None:
            status = attempt.response_status
        plan_transition(
            plan,
            to=state,
            actor=actor,
            event="reconcile.settled",
            data=finding,
            finished_at=now,
            outcome_detail=f"reconciled: {finding['verdict']}",
            upstream_status=status if status is not None else plan.upstream_status,
            next_check_at=None,
            # A read-back that shows the change is a verification; a repeated key is not.
            verified=finding.get("verdict") == "applied",
        )
    return state


def read_back(plan: Plan) -> tuple[str | None, dict[str, Any]]:
    """Re-read the target and decide: applied (completed), not applied (rejected), or
    neither (None: changed by someone else, or gone). The worker's verification of a 2xx
    and the reconciliation of an unknown outcome both ask this, so they never disagree."""
    connector = plan.action.connector
    kind = kind_of(connector)
    with kind.reader(connector) as reader:
        result = kind.read(reader, plan.action.spec, plan.input)
    return judge(plan, result.exists, result.body, version=result.version)


def judge(
    plan: Plan, exists: bool, current: Any, *, version: Any = None
) -> tuple[str | None, dict[str, Any]]:
    """What a read of the target says about the plan's write (see ``read_back``).

    Only the fields the plan sets are compared (``planned_fields``): the upstream's own
    fields (an id, a version, timestamps, a version tag) are expected to appear and to move. A
    field the plan sets that reads back with another value is a mismatch, whoever made
    it: another writer, or the upstream storing it differently (a lower-cased email).
    Countersign cannot tell the two apart, so it verifies neither and names the field.
    """
    kind = plan.kind
    finding: dict[str, Any] = {"exists": exists, "version": version}
    if kind == "delete":
        if not exists:
            return PlanStatus.COMPLETED, {**finding, "verdict": "applied"}
        if version == plan.precondition.get("expected"):
            return PlanStatus.REJECTED, {**finding, "verdict": "not applied"}
        return None, {**finding, "verdict": "changed by someone else"}
    if not exists:
        if kind == "create":
            return PlanStatus.REJECTED, {**finding, "verdict": "not applied"}
        return None, {**finding, "verdict": "the target is gone"}
    if kind == "replace":
        # A replace's removals are not checked: an upstream keeps its own fields (id,
        # created_at, version) through a PUT, and nothing says which those are. The
        # fields it kept are recorded, so a person can see them.
        kept = [
            c["path"]
            for c in plan.changes
            if c["op"] == "remove" and not holds(ABSENT, current, c["path"])
        ]
        if kept:
            finding["kept"] = kept[:MAX_LISTED]
    differs = [path for path, value in planned_fields(plan) if not holds(value, current, path)]
    if not differs:
        return PlanStatus.COMPLETED, {**finding, "verdict": "applied"}
    if kind != "create" and _unchanged(plan, current):
        return PlanStatus.REJECTED, {**finding, "verdict": "not applied"}
    return None, {**finding, "verdict": "changed by someone else", "differs": differs[:MAX_LISTED]}


# The most paths a finding lists (differing, kept): enough to act on, bounded in size.
MAX_LISTED = 20


class _Absent:
    """A field that is not there (distinct from a JSON null)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


def planned_fields(plan: Plan) -> list[tuple[str, Any]]:
    """The fields the plan sets, as (JSON pointer, planned value); ``ABSENT`` for a field
    it removes. A create sets each field of its body (its change is the whole record);
    an update sets and removes the fields its changes name; a replace sets the fields
    its changes name (its removals: see ``judge``)."""
    if plan.kind == "create":
        if isinstance(plan.after, dict):
            return [(f"/{escape_pointer_token(k)}", v) for k, v in plan.after.items()]
        return [("/", plan.after)]
    fields = []
    for change in plan.changes:
        if change["op"] != "remove":
            fields.append((change["path"], change["after"]))
        elif plan.kind == "update":
            fields.append((change["path"], ABSENT))
    return fields


def holds(planned: Any, document: Any, pointer: str = "/") -> bool:
    """Whether the value at ``pointer`` in ``document`` is the planned one. An object
    holds the planned object when every planned field holds (the upstream may add
    fields of its own, at any depth); an array when it has as many items, each holding
    the planned one; a null or ``ABSENT`` when the field is absent or null (a merge
    patch's null removes); anything else when it is the same JSON value."""
    return _same(planned, _at(document, pointer))


def _same(planned: Any, value: Any) -> bool:
    if planned is ABSENT or planned is None:
        return value is ABSENT or value is None
    if isinstance(planned, dict):
        return isinstance(value, dict) and all(
            _same(v, value.get(k, ABSENT)) for k, v in planned.items()
        )
    if isinstance(planned, list):
        return (
            isinstance(value, list)
            and len(value) == len(planned)
            and all(_same(p, v) for p, v in zip(planned, value, strict=True))
        )
    if isinstance(planned, bool) or isinstance(value, bool):
        return planned is value
    if isinstance(planned, int | float) and isinstance(value, int | float):
        return planned == value
    return type(planned) is type(value) and planned == value


def _unchanged(plan: Plan, current: Any) -> bool:
    """Every field the plan changes still has its value from before: the write did
    nothing. (A plan that changes nothing is never "not applied".)"""
    changes = [c for c in plan.changes if plan.kind == "update" or c["op"] != "remove"]
    return bool(changes) and all(
        _same(ABSENT if c["op"] == "add" else c["before"], _at(current, c["path"])) for c in changes
    )


def _at(document: Any, pointer: str) -> Any:
    if pointer in ("", "/"):
        return document
    try:
        return resolve_pointer(document, pointer)
    except KeyError:
        return ABSENT


def _reconcile_invoke(plan: Plan, attempt: Attempt | None) -> tuple[str | None, dict[str, Any]]:
    spec, connector = plan.action.spec, plan.action.connector
    kind = kind_of(connector)
    if spec.status is not None and spec.status.path:
        with kind.reader(connector) as reader:
            asked = kind.read_status(reader, spec.render_path(spec.status.path, plan.input))
        if asked.body is not None:
            if rule_holds(spec.status.done_when, asked.body, {}):
                return PlanStatus.COMPLETED, {"verdict": "applied (status request)"}
            if spec.status.failed_when and rule_holds(spec.status.failed_when, asked.body, {}):
                return PlanStatus.REJECTED, {"verdict": "failed upstream (status request)"}
        return None, {"verdict": f"status request {asked.said}"}
    if kind.features.can_key_writes and kind.keys_writes(spec) and attempt and attempt.sends:
        credential = connector.credential(Credential.Role.WRITE)
        if credential is None:
            return None, {"verdict": "no write credential to repeat the keyed request"}
        # Opened here, in the worker, and handed to the kind (it never opens one itself).
        auth = kind.authenticate(credential, open_write_secret(credential))
        with kind.writer(connector, spec, auth) as writer:
            response = writer.send(plan.write_request, key=attempt.idempotency_key)
        # Counted, not a state change: the attempt stays as it ended (lost or answered).
        Attempt.objects.filter(pk=attempt.pk).update(sends=attempt.sends + 1)
        verdict = kind.classify(spec, response, plan.precondition, repeat=True)
        if verdict.state in (
            PlanStatus.COMPLETED,
            PlanStatus.REJECTED,
            PlanStatus.ALREADY_IN_DESIRED_STATE,
        ):
            return PlanStatus(verdict.state), {
                "verdict": f"the upstream answered the same key with {response.status}",
                "upstream_status": response.status,
            }
        return None, {"verdict": f"the same key was answered {response.status}"}
    return None, {"verdict": NO_WAY_TO_LOOK}
