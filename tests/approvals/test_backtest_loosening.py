"""What a draft loosens, in a backtest (approvals/decisions/backtest/, refusals.py,
actions/policy/drafts.py; docs/policy.md, Backtesting): submissions a policy refused are
recorded (committed on their own, never a plan, never in a queue, never executed, purged
after their retention), a draft that drops the ``forbid`` lists those it would let
through; plans a draft would newly approve with no person are listed with links, first;
the report opens with what the draft changes against the set in force; a draft naming a
group that does not exist is refused as a load refuses it."""

from __future__ import annotations

import html
import json
from datetime import timedelta
from types import SimpleNamespace

import psycopg
import pytest
import yaml
from celery import current_app
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.utils import timezone

from actions.catalog import CatalogError, load_catalog
from actions.lib.exceptions import PolicyRefused
from actions.lib.models import AuditEvent
from actions.policy.drafts import DraftRefused, draft_compile, draft_read, stored_actions
from actions.policy.versions import policies_in_force
from approvals.decisions.backtest import report_text
from approvals.decisions.refusals import refused_submission_record, refused_submissions_purge
from approvals.models import Attempt, Plan, PlanStatus, PolicyBacktest, RefusedSubmission
from executors.services import execution_run
from executors.sweeper import sweep
from tests.approvals.test_backtest import (
    DEMO_POLICIES,
    approve,
    deny,
    elsewhere,
    executed,
    listed,
    report_of,
    routine,
)
from tests.conftest import ROOT

FREEZE = (
    '@id("freeze")\n'
    '@reason("no email changes during the migration")\n'
    'forbid (principal, action == Action::"update_contact_email", resource);\n'
)
ROUTINE = (DEMO_POLICIES / "routine-email.cedar").read_text()
VIP = (DEMO_POLICIES / "vip-contacts.cedar").read_text()
INVOICES = (DEMO_POLICIES / "large-invoices.cedar").read_text()
NOOP = '@id("noop")\n@reason("never")\nforbid (principal, action, resource)\nwhen { false };\n'


@pytest.fixture(autouse=True)
def billing_group(db):
    return Group.objects.get_or_create(name="billing-approvers")[0]


def backtester(client):
    """Ana, staff with the permission to run backtests."""
    ana = get_user_model().objects.create_user(username="ana", password="pw-ana", is_staff=True)
    ana.user_permissions.add(Permission.objects.get(codename="run_policy_backtest"))
    return get_user_model().objects.get(pk=ana.pk)


def in_force(*texts: str) -> None:
    load_catalog(
        json.dumps({"version": 1, "policies": {"enforce": [{"text": t} for t in texts]}}),
        source="test",
    )


def draft(*texts: str):
    return draft_compile(
        [(f"d{i}.cedar", t) for i, t in enumerate(texts)], actions=stored_actions()
    )


def refused(make_plan, action="update_contact_email", input=None, **kw) -> RefusedSubmission:
    before = set(RefusedSubmission.objects.values_list("id", flat=True))
    with pytest.raises(PolicyRefused):
        make_plan(action, input, **kw)
    (record,) = RefusedSubmission.objects.exclude(id__in=before)
    return record


# --- the record ---------------------------------------------------------------------------------


def test_a_refused_submission_is_recorded_with_what_the_policies_saw(make_plan, agent, catalog):
    in_force(ROUTINE, VIP, INVOICES)
    make_plan("delete_contact", {"contact_id": "c-1002"})  # not a VIP: to people, a plan
    record = refused(make_plan, "delete_contact", {"contact_id": "c-1001"})
    compiled = policies_in_force()
    assert record.agent == agent and record.action.name == "delete_contact"
    assert record.action_version == record.action.version
    assert record.action_digest == record.action.digest
    assert record.input == {"contact_id": "c-1001"}
    assert record.target["path"] == "/contacts/c-1001"
    assert record.before["name"] == "Ada Lovelace" and "vip" in record.before["tags"]
    assert record.after is None and record.changes  # a delete: the record as it goes
    assert record.policies == ["vip-contacts-stay"]
    assert record.refusal.startswith("a VIP contact is never deleted by an agent")
    assert (record.set_hash, record.set_version) == (compiled.hash, compiled.version)
    assert record.consequence_class == "irreversible"
    assert abs(record.evaluated_at - timezone.now()) < timedelta(minutes=1)
    assert (record.rate_hour, record.rate_day) == (1, 1)  # the plan of c-1002 before it
    assert record.requester is None and record.correlation_id is not None
    # No plan was stored for it; its audit event names the record.
    assert Plan.objects.filter(input={"contact_id": "c-1001"}).count() == 0
    event = AuditEvent.objects.get(kind="plan.refused")
    assert event.data["refused_submission"] == str(record.id)
    assert event.data["policies"] == ["vip-contacts-stay"]


def test_a_refusal_that_carries_its_facts_is_recorded_with_them(agent, catalog):
    """The time, the rate and the version the policies saw, when the refusal carries them."""
    action = catalog["update_contact_email"]
    at = timezone.now() - timedelta(minutes=3)
    preview = SimpleNamespace(
        target={"connector": "demo", "path": "/contacts/c-1002"},
        before={"email": "a@x.test"},
        after={"email": "b@x.test"},
        changes=[{"path": "/email", "op": "replace", "before": "a@x.test", "after": "b@x.test"}],
    )
    refusal = PolicyRefused("no", policies=["p"], set_hash="h" * 64, version=7, at=at, rate=(4, 9))
    record = refused_submission_record(
        agent=agent,
        action=action,
        values={"contact_id": "c-1002", "email": "b@x.test"},
        preview=preview,
        requester=None,
        refusal=refusal,
    )
    assert (record.evaluated_at, record.rate_hour, record.rate_day) == (at, 4, 9)
    assert record.set_version == 7 and record.set_hash == "h" * 64


@pytest.mark.django_db(transaction=True)
def test_the_record_is_committed_though_the_submission_fails(make_plan, catalog):
    in_force(ROUTINE, VIP, INVOICES)
    record = refused(make_plan, "delete_contact", {"contact_id": "c-1001"})
    # Another connection sees it: committed, not rolled back with the refusal.
    settings = connection.settings_dict
    with psycopg.connect(
        dbname=settings["NAME"],
        user=settings["USER"],
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        password=settings["PASSWORD"] or None,
    ) as other:
        found = other.execute(
            f"SELECT policies FROM {RefusedSubmission._meta.db_table} WHERE id = %s",
            [record.id],
        ).fetchone()
    assert found == (["vip-contacts-stay"],)
    # Inside a transaction it would be rolled back with the refusal: it refuses to run.
    with pytest.raises(RuntimeError), transaction.atomic():
        make_plan("delete_contact", {"contact_id": "c-1001"})
    assert RefusedSubmission.objects.count() == 1


def test_refused_submissions_are_never_plans_queued_or_executed(
    make_plan, catalog, client, reviewer, api_headers
):
    in_force(FREEZE)
    record = refused(make_plan, input=routine(1))
    client.force_login(reviewer)
    for url in ("/plans/", "/plans/?view=all", "/plans/dashboard/"):
        page = client.get(url)
        assert page.status_code == 200
        assert str(record.id) not in page.content.decode()
        assert "grace.1@example.test" not in page.content.decode()
    assert client.get(f"/plans/{record.id}/").status_code == 404
    assert client.get(f"/api/v1/plans/{record.id}", **api_headers).status_code == 404
    # The worker finds no plan by its id, and the sweeper neither runs nor deletes it.
    assert execution_run(plan_id=record.id) == "skipped:missing"
    report = sweep()
    assert report["refusals_purged"] == 0 and report["requeued"] == 0
    assert RefusedSubmission.objects.filter(id=record.id).exists()
    assert not Plan.objects.exists() and not Attempt.objects.exists()


def test_refused_submissions_are_purged_after_their_retention(make_plan, catalog, settings):
    in_force(FREEZE)
    old = [refused(make_plan, input=routine(i)) for i in range(3)]
    kept = refused(make_plan, input=routine(9))
    long_ago = timezone.now() - timedelta(days=settings.COUNTERSIGN_REFUSED_RETENTION_DAYS, hours=1)
    RefusedSubmission.objects.filter(id__in=[r.id for r in old]).update(created_at=long_ago)
    settings.COUNTERSIGN_REFUSED_PURGE_BATCH = 2
    assert sweep()["refusals_purged"] == 2  # a batch a sweep
    assert refused_submissions_purge() == 1
    assert refused_submissions_purge() == 0
    assert list(RefusedSubmission.objects.values_list("id", flat=True)) == [kept.id]


# --- the backtest ---------------------------------------------------------------------------------


def test_a_draft_that_drops_a_forbid_lists_the_refused_submissions_it_would_let_through(
    make_plan, catalog
):
    in_force(ROUTINE, FREEZE)
    same_domain = refused(make_plan, input=routine(1))  # routine-email would approve it
    other_domain = refused(make_plan, input=elsewhere(1))  # to people
    in_force(ROUTINE, VIP, FREEZE)
    vip = refused(make_plan, "delete_contact", {"contact_id": "c-1001"})

    # The set in force as a draft: everything it refused stays refused.
    kept = report_of(draft(ROUTINE, VIP, FREEZE))
    assert kept["refused_let_through"]["count"] == 0
    assert kept["refused_let_through"]["read"] == 3
    assert kept["refused_let_through"]["by_draft"] == {"approve": 0, "review": 0, "refuse": 3}

    # Without the freeze: both email changes are let through, one with no person.
    loose = report_of(draft(ROUTINE, VIP))
    found = loose["refused_let_through"]
    assert found["count"] == 2 and found["by_draft"] == {"approve": 1, "review": 1, "refuse": 1}
    by_id = {s["id"]: s for s in found["submissions"]}
    assert list(by_id) == [str(same_domain.id), str(other_domain.id)]
    first = by_id[str(same_domain.id)]
    assert first["draft"] == {"outcome": "approve", "policies": ["routine-email"], "reason": ""}
    assert first["refused_by"] == ["freeze"]
    assert first["refusal"] == "no email changes during the migration"
    assert first["action"] == "update_contact_email" and first["target"] == "/contacts/c-1002"
    assert first["changes"] == [
        {"path": "/email", "before": "grace@example.test", "after": "grace.1@example.test"}
    ]
    assert by_id[str(other_domain.id)]["draft"]["outcome"] == "review"
    assert str(vip.id) not in by_id  # vip-contacts-stay still refuses it

    # Without any policy: the VIP deletion goes to people (never to a yes: irreversible).
    none = report_of(
        draft('@id("noop") @reason("x")\nforbid (principal, action, resource)\nwhen { false };\n')
    )
    assert none["refused_let_through"]["count"] == 3
    assert none["refused_let_through"]["by_draft"] == {"approve": 0, "review": 3, "refuse": 0}

    text = report_text(loose)
    assert "Refused then, let through by the draft: 2 of 3 refused submissions" in text
    assert "refused by freeze (v1): no email changes during the migration; now approve" in text
    assert "/email: grace@example.test -> grace.1@example.test" in text


def test_a_draft_that_newly_approves_lists_those_plans_with_links_first(
    make_plan, catalog, reviewer
):
    people = executed(approve(make_plan(input=routine(1)), reviewer), "completed")
    waiting = make_plan(input=routine(2))
    denied = deny(make_plan(input=routine(3)), reviewer)
    deny(make_plan(input=elsewhere(1)), reviewer)  # routine-email would not approve it
    in_force(ROUTINE)
    by_policy = make_plan(input=routine(4))  # approved by routine-email then
    assert by_policy.policy["mode"] == "policy"

    report = report_of(draft_read([DEMO_POLICIES]))
    new = report["new_approvals"]
    assert new["count"] == 3
    assert listed(report, "new_approvals") == [str(people.id), str(waiting.id), str(denied.id)]
    entry = new["plans"][0]
    assert entry["url"].endswith(f"/plans/{people.id}/") and entry["path"] == f"/plans/{people.id}/"
    assert entry["draft"]["policies"] == ["routine-email"] and entry["by"] == "people"
    # Read first: the first list of the report, and of its text.
    lists = [k for k, v in report.items() if isinstance(v, dict) and "count" in v]
    assert lists[0] == "new_approvals"
    text = report_text(report)
    assert text.index("Would approve with no person what went to people: 3") < text.index(
        "Would approve what people said no to"
    )
    assert f"/plans/{waiting.id}/" in text


def test_the_report_opens_with_what_the_draft_changes_against_the_set_in_force(
    make_plan, catalog, capsys, tmp_path
):
    in_force(ROUTINE, VIP, INVOICES)
    stricter = ROUTINE.replace('@description("An email', '@description("Tightened: an email')
    assert stricter != ROUTINE
    report = report_of(draft(stricter, FREEZE))
    compiled = policies_in_force()
    assert report["changes"] == {
        "against": {"version": compiled.version, "hash": compiled.hash},
        "enforce": {
            "added": [{"id": "freeze", "kind": "forbid"}],
            "removed": [
                {"id": "large-invoices", "kind": "require"},
                {"id": "vip-contacts-stay", "kind": "forbid"},
            ],
            "changed": [{"id": "routine-email", "kind": "approve"}],
            "unchanged": 0,
        },
        "shadow": None,
    }
    lines = report_text(report).splitlines()
    assert (
        lines[1] == f"Against the set in force (version {compiled.version}, {compiled.hash[:12]}):"
    )
    assert lines[2] == (
        "  enforce: added freeze (forbid); removed large-invoices (require), "
        "vip-contacts-stay (forbid); changed routine-email (approve); 0 unchanged"
    )
    assert lines[3] == "  shadow: not in the draft (not compared)"
    # The same set, with other comments and order: no change.
    same = report_of(draft("// reordered\n" + INVOICES, VIP, ROUTINE))["changes"]["enforce"]
    assert same == {"added": [], "removed": [], "changed": [], "unchanged": 3}

    # A catalog file gives both parts; the command prints the comparison first.
    section = yaml.safe_load((ROOT / "demo" / "catalog.yaml").read_text())["policies"]
    for name in ("routine-email", "vip-contacts"):
        (tmp_path / f"{name}.cedar").write_text((DEMO_POLICIES / f"{name}.cedar").read_text())
    section["enforce"] = [{"file": "routine-email.cedar"}]
    section["shadow"] = [{"file": "vip-contacts.cedar"}]
    (tmp_path / "catalog.yaml").write_text(yaml.safe_dump({"version": 1, "policies": section}))
    call_command("policy_backtest", str(tmp_path / "catalog.yaml"), "--since", "1d")
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("Against the set in force (version")
    assert out[2] == (
        "  enforce: removed large-invoices (require), vip-contacts-stay (forbid); 1 unchanged"
    )
    assert out[3] == "  shadow: added vip-contacts-stay (forbid); 0 unchanged"
    event = AuditEvent.objects.get(kind="policy.backtest")
    assert event.data["policies_removed"] == ["large-invoices", "vip-contacts-stay"]


def test_with_no_set_in_force_every_policy_of_the_draft_is_added(catalog):
    report = report_of(draft_read([DEMO_POLICIES]))
    assert report["changes"]["against"] is None
    assert [p["id"] for p in report["changes"]["enforce"]["added"]] == [
        "large-invoices",
        "routine-email",
        "vip-contacts-stay",
    ]
    assert report_text(report).splitlines()[1] == (
        "Against the set in force: none (no policy is in force)"
    )


# --- a group that does not exist ---------------------------------------------------------------

TYPO = (
    '@id("typo-invoices")\n'
    '@require("billing-aprovers")\n'
    'permit (principal, action == Action::"send_invoice", resource);\n'
)


def test_a_draft_naming_an_unknown_group_is_refused_as_a_load_refuses_it(catalog, tmp_path, client):
    with pytest.raises(CatalogError) as loading:
        in_force(TYPO)
    (loaded,) = loading.value.problems
    expected = (
        "policy typo-invoices: @require: unknown group 'billing-aprovers' (create it, or "
        "declare it in policies.groups or reviewers.groups)"
    )
    assert expected in str(loaded)

    with pytest.raises(DraftRefused) as info:
        draft_compile([("d0.cedar", TYPO)], actions=stored_actions(), check_groups=True)
    # The line of the @require that names it, as a load points at it.
    assert info.value.problems == [f"d0.cedar, line 2: {expected}"]
    # policy_test's cases leave groups alone (they run in CI on an empty database).
    assert draft(TYPO).ids() == ["typo-invoices"]

    path = tmp_path / "typo.cedar"
    path.write_text(TYPO)
    with pytest.raises(CommandError, match="unknown group 'billing-aprovers'"):
        call_command("policy_backtest", str(path), "--since", "1d")
    assert not AuditEvent.objects.filter(kind="policy.backtest").exists()

    client.force_login(backtester(client))
    answer = client.post("/admin/approvals/policybacktest/add/", {"draft": TYPO, "since": "1d"})
    assert answer.status_code == 200 and expected in html.unescape(answer.content.decode())
    assert not PolicyBacktest.objects.exists()

    # The group made, the same draft holds.
    Group.objects.create(name="billing-aprovers")
    call_command("policy_backtest", str(path), "--since", "1d")
    assert AuditEvent.objects.filter(kind="policy.backtest").count() == 1


def test_the_admin_report_opens_with_the_changes_then_what_the_draft_loosens(
    make_plan, catalog, reviewer, client, django_capture_on_commit_callbacks
):
    waiting = make_plan(input=routine(1))
    in_force(ROUTINE, FREEZE)
    record = refused(make_plan, input=routine(2))
    client.force_login(backtester(client))
    saved = current_app.conf.task_always_eager
    current_app.conf.task_always_eager = True  # the worker's task, run here
    try:
        with django_capture_on_commit_callbacks(execute=True):
            answer = client.post(
                "/admin/approvals/policybacktest/add/", {"draft": ROUTINE, "since": "1d"}
            )
    finally:
        current_app.conf.task_always_eager = saved
    page = client.get(answer.url).content.decode()
    order = [
        page.index('id="policy-changes"'),
        page.index('id="new-approvals"'),
        page.index('id="refused-let-through"'),
        page.index('id="approve-disagreements"'),
    ]
    assert order == sorted(order)
    changes = page[order[0] : order[1]]
    assert "removed <code>freeze</code> (forbid)" in changes
    # The enforce part first (the stored report's keys come back in the database's order).
    assert changes.index('data-part="enforce"') < changes.index('data-part="shadow"')
    assert "not compared" in changes.split('data-part="shadow"')[1]
    assert f'href="/plans/{waiting.id}/"' in page[order[1] : order[2]]
    refused_part = page[order[2] : order[3]]
    assert f'data-refused="{record.id}"' in refused_part
    assert "approve with no person" in refused_part and "freeze" in refused_part
    assert "<style" not in page and " style=" not in page


def test_seeded_refused_submissions_are_replayed_a_page_at_a_time(make_plan, catalog):
    """demo/history.py's seed_refused (B8's history) clones refused submissions over a
    window; the backtest reads them in keyset pages, and the page size changes nothing."""
    from demo.history import seed_refused

    in_force(ROUTINE, FREEZE)
    templates = [refused(make_plan, input=routine(1)), refused(make_plan, input=elsewhere(1))]
    RefusedSubmission.objects.filter(id__in=[t.id for t in templates]).update(
        created_at=timezone.now() - timedelta(days=30)  # outside the window
    )
    assert seed_refused(7, templates=templates, days=0.5) == 7
    whole = report_of(draft(ROUTINE), page_size=500)
    paged = report_of(draft(ROUTINE), page_size=2)
    assert whole["read"]["refused_pages"] == 1 and paged["read"]["refused_pages"] == 4
    assert whole["refused_let_through"] == paged["refused_let_through"]
    assert whole["refused_let_through"]["read"] == 7
    assert whole["refused_let_through"]["by_draft"] == {"approve": 4, "review": 3, "refuse": 0}
    assert report_of(draft(ROUTINE, FREEZE))["refused_let_through"]["count"] == 0


@pytest.mark.parametrize("rule", ["keeping", "allowing"])
def test_a_draft_approve_on_a_plan_a_rule_keeps_is_no_new_approval(
    rule, catalog, upstream, agent, make_plan
):
    """A rule owns its plans: the draft's @approve would not take one from its groups
    (as the submission would not), so the report does not list it as approved with no
    person, unless the rule lets policies decide."""
    from tests.approvals.test_decision_rules import person
    from tests.approvals.test_policy_owners import REVERSIBLE, load

    person("bea", "billing-approvers")  # someone can decide it
    load(rule=rule, policy="review", upstream=upstream)
    plan = make_plan(*REVERSIBLE)
    assert plan.status == PlanStatus.AWAITING_APPROVAL
    assert plan.requirement["rules"] == ["owners"]
    yes = (
        '@id("memo-yes") @approve\n'
        'permit (principal, action == Action::"update_invoice_memo", resource);\n'
    )

    report = report_of(draft(yes))
    listed_ids = listed(report, "new_approvals")
    if rule == "keeping":
        assert listed_ids == []
        assert report["totals"]["draft"]["review"] >= 1
    else:
        assert listed_ids == [str(plan.id)]
