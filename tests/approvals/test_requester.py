"""On behalf of a person, in the services: the requester in the plan and its fingerprint
(and a plan without one exactly as before), the floor in the decide service and again in
the worker's claim. The token's verification against the real provider is in
tests/e2e/test_on_behalf_of.py."""

from __future__ import annotations

import pytest
from django.utils import timezone

from actions.fingerprint import fingerprint, plan_fingerprint_document, plan_fingerprint_matches
from approvals.decisions.requester import Requester, RequesterMayNotApprove

pytestmark = pytest.mark.django_db

ISSUER = "https://id.example.test"
ADA = Requester(
    issuer=ISSUER,
    subject="ada-123",
    groups=("reviewers", "billing"),
    name="Ada Lovelace",
    email="ada@example.test",
)
# Every key of the fingerprinted document before on-behalf-of existed.
DOCUMENT_KEYS = {
    "fingerprint_version",
    "action",
    "agent",
    "target",
    "input",
    "after",
    "precondition",
    "policy",
    "write",
}


def link(user, subject: str = ADA.subject, issuer: str = ISSUER):
    """``user`` is the person who signs in as (issuer, subject)."""
    from approvals.models import OidcIdentity

    OidcIdentity.objects.create(user=user, issuer=issuer, subject=subject)
    return user


def test_a_plan_the_agent_proposed_alone_keeps_the_fingerprint_it_always_had(make_plan):
    plan = make_plan()
    assert plan.requester is None
    document = plan_fingerprint_document(plan)
    # The same document as a plan stored before this column existed: its stored
    # fingerprint still verifies when the executor recomputes it from the columns.
    assert set(document) == DOCUMENT_KEYS
    assert plan_fingerprint_matches(plan)
    old_style = {k: v for k, v in document.items()}
    assert fingerprint(old_style) == (plan.canonical, plan.fingerprint)


def test_the_person_is_stored_and_fingerprinted(make_plan):
    alone = make_plan()
    plan = make_plan(requester=ADA)
    assert plan.requester == {
        "iss": ISSUER,
        "sub": "ada-123",
        "groups": ["billing", "reviewers"],
        "name": "Ada Lovelace",
        "email": "ada@example.test",
    }
    # Not the agent's awaiting plan given back: for someone, it is another plan.
    assert plan.id != alone.id and plan.fingerprint != alone.fingerprint
    assert plan_fingerprint_document(plan)["requester"] == {
        "iss": ISSUER,
        "sub": "ada-123",
        "groups": ["billing", "reviewers"],
    }
    assert plan_fingerprint_matches(plan)
    # Whom it is for cannot be changed after the fact: the worker's check fails.
    plan.requester = {**plan.requester, "sub": "someone-else"}
    assert not plan_fingerprint_matches(plan)
    plan.requester = {**ADA.stored(), "groups": ["billing", "reviewers", "security"]}
    assert not plan_fingerprint_matches(plan)
    # The display name and e-mail are not fingerprinted (the provider may change them).
    plan.requester = {**ADA.stored(), "name": "Ada King"}
    assert plan_fingerprint_matches(plan)


def test_the_person_a_plan_is_for_cannot_approve_it_and_another_reviewer_can(
    make_plan, reviewer, second_reviewer
):
    from actions.lib.models import AuditEvent
    from approvals.models import Approval, PlanStatus
    from approvals.services import approval_record

    link(reviewer)
    plan = make_plan(requester=ADA)
    with pytest.raises(RequesterMayNotApprove) as refused:
        approval_record(
            plan_id=plan.id,
            reviewer=reviewer,
            decision="approve",
            fingerprint_seen=plan.fingerprint,
        )
    assert refused.value.status == 403
    assert "on your behalf" in refused.value.detail
    assert not Approval.objects.filter(plan=plan).exists()
    event = AuditEvent.objects.get(kind="approval.requester_refused")
    assert event.actor == "user:rita" and event.plan_id == plan.id
    assert "requested" in event.data["reason"]

    # Someone with another identity (or none) decides it.
    link(second_reviewer, subject="sam-456")
    plan = approval_record(
        plan_id=plan.id,
        reviewer=second_reviewer,
        decision="approve",
        fingerprint_seen=plan.fingerprint,
    )
    assert plan.status == PlanStatus.APPROVED


def test_the_same_subject_at_another_issuer_is_someone_else(make_plan, reviewer):
    from approvals.models import PlanStatus
    from approvals.services import approval_record

    link(reviewer, issuer="https://other-id.example.test")
    plan = make_plan(requester=ADA)
    plan = approval_record(
        plan_id=plan.id, reviewer=reviewer, decision="approve", fingerprint_seen=plan.fingerprint
    )
    assert plan.status == PlanStatus.APPROVED


def test_the_person_may_still_deny_their_own_request(make_plan, reviewer):
    from approvals.models import PlanStatus
    from approvals.services import approval_record

    link(reviewer)
    plan = make_plan(requester=ADA)
    plan = approval_record(
        plan_id=plan.id, reviewer=reviewer, decision="deny", fingerprint_seen=plan.fingerprint
    )
    assert plan.status == PlanStatus.DENIED


def test_the_worker_refuses_an_approval_by_the_person_written_past_the_service(make_plan, reviewer):
    from datetime import timedelta

    from approvals.models import Approval, Plan, PlanStatus
    from executors.services import _refusal_reason

    plan = make_plan(requester=ADA)
    # An approval row the decide service never saw (written straight into the table),
    # by a user linked to the requester's identity.
    link(reviewer)
    Approval.objects.create(
        plan=plan,
        reviewer=reviewer,
        decision="approve",
        fingerprint=plan.fingerprint,
        expires_at=timezone.now() + timedelta(minutes=10),
    )
    Plan.objects.filter(id=plan.id).update(status=PlanStatus.APPROVED)
    plan = Plan.objects.select_related("action").get(id=plan.id)
    assert _refusal_reason(plan, timezone.now()) == (
        "an approval is by the person the plan was requested for"
    )


def test_a_revision_is_still_for_the_same_person(make_plan, reviewer, upstream):
    from approvals.services import plan_edit

    plan = make_plan(requester=ADA)
    revision = plan_edit(
        plan_id=plan.id,
        reviewer=reviewer,
        input={"contact_id": "c-1001", "email": "ada@newer.example"},
    )
    assert revision.requester == plan.requester


def test_a_grant_the_person_made_does_not_approve_their_request(
    make_plan, reviewer, agent, monkeypatch
):
    from approvals.grants import grant_create
    from approvals.models import PlanStatus

    monkeypatch.setattr("actions.lib.dispatch.publish", lambda *a, **k: None)
    grant_create(
        creator=reviewer, agent=agent, action_names=["update_invoice_memo"], duration_seconds=600
    )
    memo = {"invoice_id": "inv-2001", "memo": "hello"}
    # The grant works for the agent alone.
    assert make_plan("update_invoice_memo", memo).status == PlanStatus.APPROVED
    link(reviewer)
    plan = make_plan("update_invoice_memo", {**memo, "memo": "for Ada"}, requester=ADA)
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert plan.policy["mode"] == "per_call" and "grant" not in plan.policy
