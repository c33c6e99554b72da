"""Celery tasks: thin wrappers that take ids and call services. Their names are the
contract with the side that hands work over (actions/lib/dispatch.py), which never
imports this module.

A message is only a wake-up. Losing one delays work until the sweeper republishes it;
delivering one twice is harmless because execution claims the plan under a row lock.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from actions.lib import dispatch
from actions.lib.actors import EXECUTOR
from actions.lib.checkpoints import (
    SealerError,
    SealingKeyUnavailable,
    audit_seal,
    checkpoint_witness,
)

from .reconciliation import pending_follow, reconcile
from .services import execution_run
from .sweeper import sweep


@shared_task(name=dispatch.EXECUTE_PLAN, bind=True, acks_late=True, ignore_result=True)
def execute_plan_task(self, plan_id: str) -> str:
    return execution_run(plan_id=plan_id)


@shared_task(name=dispatch.FOLLOW_PENDING, acks_late=True, ignore_result=True)
def follow_pending_task(plan_id: str) -> str:
    return pending_follow(plan_id=plan_id)


@shared_task(name=dispatch.RECONCILE, acks_late=True, ignore_result=True)
def reconcile_task(plan_id: str, actor: str = EXECUTOR) -> str:
    return reconcile(plan_id=plan_id, actor=actor)


log = logging.getLogger(__name__)


@shared_task(name=dispatch.SEAL_AUDIT, ignore_result=True)
def seal_audit_task() -> dict:
    """Sign checkpoints of the audit trail (one sealer at a time, by lease). A worker not
    given the audit key says so and does nothing: another worker seals."""
    try:
        return audit_seal()
    except SealingKeyUnavailable as exc:
        log.warning("audit not sealed here: %s", exc)
        return {"leased": False}
    except SealerError as exc:
        # The dashboard's sealing line turns to an alarm; verify_audit says where.
        log.error("audit not sealed: %s", exc)
        return {"leased": True, "error": str(exc)}


# Seconds before retry n of a checkpoint the witness did not take: 10 s, 60 s, 5 min, ...
WITNESS_BACKOFF = (10, 60, 300, 900)


@shared_task(name=dispatch.WITNESS_CHECKPOINT, bind=True, acks_late=True, ignore_result=True)
def witness_checkpoint_task(self, checkpoint_id: int) -> str:
    outcome = checkpoint_witness(checkpoint_id=checkpoint_id)
    if outcome != "failed":
        return outcome
    tries = self.request.retries + 1
    if tries >= max(1, int(settings.COUNTERSIGN_WEBHOOK_MAX_TRIES)):
        log.warning("audit witness: checkpoint %s given up after %s tries", checkpoint_id, tries)
        return "gave-up"
    countdown = WITNESS_BACKOFF[min(self.request.retries, len(WITNESS_BACKOFF) - 1)]
    raise self.retry(countdown=countdown, max_retries=None)


@shared_task(name=dispatch.SWEEP, ignore_result=True)
def sweep_task() -> dict:
    return sweep()
