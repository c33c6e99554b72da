"""What a decision and the worker's claim read of the people behind a plan's approvals
(``approvals_read``, SQL built once per connection in approvals/decisions/
standing_query.py) is what the ORM query of the page's queue reads
(``_reviewer_facts``): active, superuser, allowed to review (directly or through a
group), and which of the requirement's groups they are in now. Each change to a person
shows at the very next read, and voids their approval for the reason it should."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, Permission
from django.utils import timezone

from approvals.decisions.standing import (
    VOID_DEACTIVATED,
    VOID_NOT_REVIEWER,
    VOID_NOT_SUPERUSER,
    _reviewer_facts,
    approvals_read,
    approvals_standing,
)
from approvals.models import Approval
from tests.approvals.test_decision_rules import load_rules, person, send_invoice_plan

BILLING, FINANCE = "billing-approvers", "finance-leads"


def review_permission() -> Permission:
    return Permission.objects.get(content_type__app_label="approvals", codename="review_plan")


def member(username: str, *groups: str, direct: bool = True, **flags):
    """A person in ``groups``, with the review permission on them (``direct``) or not."""
    user = person(username, *groups)
    if not direct:
        user.user_permissions.clear()
    type(user).objects.filter(pk=user.pk).update(**flags)
    return type(user).objects.get(pk=user.pk)


def approve(plan, user, *, groups=(), break_glass=False, **kw) -> Approval:
    values = {"expires_at": timezone.now() + timedelta(minutes=15), **kw}
    return Approval.objects.create(
        plan=plan,
        reviewer=user,
        decision="approve",
        fingerprint=plan.fingerprint,
        groups=list(groups),
        break_glass=break_glass,
        comment="break-glass reason" if break_glass else "",
        **values,
    )


@pytest.fixture
def plan(make_plan, catalog):
    """A plan whose requirement names two groups; a billing member so it can be decided."""
    load_rules(
        {
            "groups": [BILLING, FINANCE, "other"],
            "rules": {
                "invoices": {
                    "match": {"actions": ["send_invoice"]},
                    "any_of": [{"group": BILLING, "count": 1}, {"group": FINANCE, "count": 1}],
                }
            },
        }
    )
    person("bob", BILLING)
    return send_invoice_plan(make_plan)


@pytest.fixture
def reviewing_group():
    group = Group.objects.create(name="reviewers-by-group")
    group.permissions.add(review_permission())
    return group


def facts_of(plan, **kw) -> dict:
    return {a.reviewer_id: a.reviewer_facts for a in approvals_read(plan, **kw)}


def test_it_reads_what_the_orm_query_reads_of_every_kind_of_person(
    plan, make_plan, reviewing_group
):
    people = [
        member("both", BILLING, FINANCE, "other"),
        member("outside", "other"),
        member("nogroup"),
        member("inactive", BILLING, is_active=False),
        member("root", is_superuser=True, direct=False),
        member("bygroup", FINANCE, direct=False),
        member("noperm", BILLING, direct=False),
    ]
    people[5].groups.add(reviewing_group)
    for user in people:
        approve(plan, user, groups=[BILLING])
    read = facts_of(plan)
    names = {BILLING, FINANCE}
    assert read == _reviewer_facts({u.pk for u in people}, names)
    assert read[people[0].pk]["groups"] == names
    assert read[people[5].pk]["reviews"] and not read[people[6].pk]["reviews"]
    assert read[people[4].pk] == {
        "active": True,
        "superuser": True,
        "reviews": True,
        "groups": set(),
    }
    # A plan without a requirement reads no group.
    plain = make_plan()
    for user in people:
        approve(plain, user)
    assert facts_of(plain) == _reviewer_facts({u.pk for u in people}, set())


def test_it_reads_the_plans_approvals_of_its_fingerprint_and_the_claim_only_usable_ones(
    plan, make_plan
):
    ann, ben, cat, dan = (member(n, BILLING) for n in ("ann", "ben", "cat", "dan"))
    first = approve(plan, ann, groups=[BILLING])
    used = approve(plan, ben, groups=[BILLING], used_at=timezone.now())
    expired = approve(plan, cat, groups=[BILLING], expires_at=timezone.now())
    Approval.objects.create(
        plan=plan, reviewer=dan, decision="deny", fingerprint=plan.fingerprint,
        expires_at=timezone.now() + timedelta(minutes=15),
    )  # fmt: skip
    approve(make_plan(), ann)  # another plan's
    read = approvals_read(plan)
    assert [a.pk for a in read] == [first.pk, used.pk, expired.pk]
    assert [a.reviewer.username for a in read] == ["ann", "ben", "cat"]
    assert read[0].groups == [BILLING] and read[0].expires_at == first.expires_at
    assert [a.pk for a in approvals_read(plan, usable_at=timezone.now())] == [first.pk]
    Approval.objects.filter(pk=first.pk).update(fingerprint="0" * 64)
    assert [a.pk for a in approvals_read(plan)] == [used.pk, expired.pk]


def test_each_revocation_shows_at_the_next_read_and_voids_the_approval(plan, reviewing_group):
    dee = member("dee", BILLING, FINANCE)
    gus = member("gus", BILLING, direct=False)
    gus.groups.add(reviewing_group)
    ina = member("ina", BILLING)
    root = member("root", is_superuser=True)
    approvals = {
        "dee": approve(plan, dee, groups=[BILLING]),
        "gus": approve(plan, gus, groups=[BILLING]),
        "ina": approve(plan, ina, groups=[BILLING]),
        "root": approve(plan, root, break_glass=True),
    }

    def void() -> dict[str, str]:
        standing = approvals_standing(plan, approvals_read(plan))
        return {name: standing.void[a.pk] for name, a in approvals.items() if a.pk in standing.void}

    assert void() == {}
    dee.groups.remove(Group.objects.get(name=BILLING))  # still in finance: not recorded for
    assert void() == {"dee": "no longer a member of " + BILLING}
    reviewing_group.permissions.remove(review_permission())  # gus reviewed through it
    type(ina).objects.filter(pk=ina.pk).update(is_active=False)
    type(root).objects.filter(pk=root.pk).update(is_superuser=False)
    assert void() == {
        "dee": "no longer a member of " + BILLING,
        "gus": VOID_NOT_REVIEWER,
        "ina": VOID_DEACTIVATED,
        "root": VOID_NOT_SUPERUSER,
    }
    # Given back, each counts again at the next read: nothing about people is kept.
    dee.groups.add(Group.objects.get(name=BILLING))
    reviewing_group.permissions.add(review_permission())
    assert set(void()) == {"ina", "root"}


def test_a_direct_permission_taken_away_voids_the_approval(plan):
    eve = member("eve", BILLING)
    approval = approve(plan, eve, groups=[BILLING])
    assert approvals_standing(plan, approvals_read(plan)).void == {}
    eve.user_permissions.remove(review_permission())
    read = approvals_read(plan)
    assert approvals_standing(plan, read).void == {approval.pk: VOID_NOT_REVIEWER}
    assert read[0].reviewer_facts == _reviewer_facts({eve.pk}, {BILLING, FINANCE})[eve.pk]
