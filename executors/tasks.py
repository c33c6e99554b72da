"""Celery tasks: thin wrappers that take ids and call services. Their names are the
contract with the side that hands work over (actions/lib/dispatch.py), which never
imports this module.

A message is only a wake-up. Losing one delays work until the sweeper republishes it;
delivering one twice is harmless because execution claims the plan under a row lock.
"""

from __future__ import annotations

from celery import shared_task

from actions.lib import dispatch
from actions.lib.actors import EXECUTOR

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


@shared_task(name=dispatch.SWEEP, ignore_result=True)
def sweep_task() -> dict:
    return sweep()
