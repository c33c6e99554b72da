"""Backtesting a draft policy set against the stored plans (approvals/decisions/
backtest.py, manage.py policy_backtest, the admin's backtest page): over a history the
test builds — plans people approved and that completed, denied, stale, expired,
cancelled by the agent or by a reviewer, with and without a requester — the report
lists exactly the plans where the draft and people disagree, the requirement changes
and the totals; the rates of plans that recorded none are counted from history; paging
changes nothing; a malformed draft is refused with its line."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import yaml
from celery import current_app
from celery.exceptions import Retry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management import CommandError, call_command
from django.utils import timezone

from actions.lib.actors import EXECUTOR, SWEEPER
from actions.lib.models import AuditEvent
from actions.policy.drafts import draft_compile, draft_read, stored_actions
from approvals.decisions.backtest import (
    BacktestRefused,
    RateWindows,
    backtest_moment,
    backtest_run,
    backtest_window,
    policy_backtest_execute,
    policy_backtest_request,
)
from approvals.decisions.policies import agent_rate
from approvals.lifecycle import plan_expire, plan_transition
from approvals.models import Plan, PlanStatus, PolicyBacktest
from approvals.services import approval_record, approval_revoke, plan_cancel
from tests.approvals.test_decision_rules import person
from tests.conftest import ROOT

DEMO_POLICIES = ROOT / "demo" / "policies"
ROUTINE = {"contact_id": "c-1002", "email": "g.hopper@example.test"}
STAFF = {"iss": "https://idp.test", "sub": "s-1", "groups": ["staff"], "name": "S"}


@pytest.fixture(autouse=True)
def billing_group(db):
    """The group the demo's large-invoices names (a draft naming a missing one is refused,
    as a load refuses it; the demo catalog's load makes it)."""
    return Group.objects.get_or_create(name="billing-approvers")[0]


def fresh(plan: Plan) -> Plan:
    return Plan.objects.get(pk=plan.pk)


def routine(n: int) -> dict:
    """A same-domain change of c-1002's address (the demo's routine-email approves it),
    a different one each time: a proposal awaiting a decision is not proposed twice."""
    return {"contact_id": "c-1002", "email": f"grace.{n}@example.test"}


def elsewhere(n: int) -> dict:
    return {"contact_id": "c-1002", "email": f"grace.{n}@navy.example"}


def approve(plan: Plan, *reviewers) -> Plan:
    for reviewer in reviewers:
        approval_record(
            plan_id=plan.id,
            reviewer=reviewer,
            decision="approve",
            fingerprint_seen=plan.fingerprint,
        )
    return fresh(plan)


def deny(plan: Plan, reviewer) -> Plan:
    approval_record(
        plan_id=plan.id, reviewer=reviewer, decision="deny", fingerprint_seen=plan.fingerprint
    )
    return fresh(plan)


def executed(plan: Plan, end: str) -> Plan:
    """The worker's moves, without the upstream: claimed, then ``end``."""
    plan = plan_transition(fresh(plan), to=PlanStatus.EXECUTING, actor=EXECUTOR, event="x.claim")
    return plan_transition(plan, to=end, actor=EXECUTOR, event=f"execution.{end}")


def report_of(draft, *, since="1d", page_size=500, **kw) -> dict:
    now = timezone.now()
    return backtest_run(
        policies=draft.compiled if hasattr(draft, "compiled") else draft,
        since=backtest_moment(since, now=now),
        until=now + timedelta(seconds=1),
        page_size=page_size,
        **kw,
    )


def listed(report: dict, key: str) -> list[str]:
    return [p["id"] for p in report[key]["plans"]]


@pytest.fixture
def history(make_plan, agent, reviewer, second_reviewer):
    """Eleven plans proposed with no policy in force, each settled as it says."""
    plans = {}
    plans["completed"] = executed(approve(make_plan(input=routine(1)), reviewer), "completed")
    plans["denied"] = deny(make_plan(input=routine(2)), reviewer)
    plans["stale"] = executed(approve(make_plan(input=routine(3)), reviewer), "stale")
    expiring = make_plan(input=routine(4))
    plans["expired"] = plan_expire(expiring, actor=SWEEPER, now=timezone.now())
    plans["agent_cancelled"] = plan_cancel(agent=agent, plan_id=make_plan(input=routine(5)).id)
    revoked = approve(make_plan(input=routine(6)), reviewer)
    plans["revoked"] = approval_revoke(plan_id=revoked.id, reviewer=reviewer)
    vip = make_plan("delete_contact", {"contact_id": "c-1001"})  # irreversible: two people
    plans["vip_deleted"] = executed(approve(vip, reviewer, second_reviewer), "completed")
    plans["vip_kept"] = deny(make_plan("delete_contact", {"contact_id": "c-1001"}), reviewer)
    invoice = make_plan("send_invoice", {"invoice_id": "inv-2001"})  # 120.00
    plans["invoice"] = executed(approve(invoice, reviewer), "completed")
    plans["elsewhere"] = executed(approve(make_plan(input=elsewhere(1)), reviewer), "completed")
    asked = make_plan(input=routine(7), requester=STAFF)
    plans["for_staff"] = executed(approve(asked, reviewer), "completed")
    return plans


def test_the_report_lists_exactly_where_the_draft_and_people_disagree(history):
    draft = draft_read([DEMO_POLICIES])  # the demo's three policies, as a directory
    report = report_of(draft)
    ids = {name: str(plan.id) for name, plan in history.items()}

    # Approved by routine-email, and people said no or it went wrong: denied, stale and
    # cancelled by a reviewer; not expired (nobody decided), not the agent's own cancel.
    assert listed(report, "approve_disagreements") == [ids["denied"], ids["stale"], ids["revoked"]]
    assert [p["why"] for p in report["approve_disagreements"]["plans"]] == [
        "denied",
        "stale",
        "cancelled by a reviewer",
    ]
    assert report["approve_disagreements"]["count"] == 3
    first = report["approve_disagreements"]["plans"][0]
    assert first["draft"] == {"outcome": "approve", "policies": ["routine-email"], "reason": ""}
    assert first["url"].endswith(f"/plans/{ids['denied']}/")
    assert first["action"] == "update_contact_email" and first["target"] == "/contacts/c-1002"

    # Refused by vip-contacts-stay, and two people approved it and it was done.
    assert listed(report, "refuse_disagreements") == [ids["vip_deleted"]]
    refused = report["refuse_disagreements"]["plans"][0]
    assert refused["by"] == "people" and refused["status"] == "completed"
    assert "never deleted by an agent" in refused["draft"]["reason"]

    # large-invoices asks for a billing approver where the class default decided.
    assert listed(report, "requirement_changes") == [ids["invoice"]]
    change = report["requirement_changes"]["plans"][0]
    assert (change["before"], change["after"]) == ("the class default", "1 of billing-approvers")
    assert change["added"] == ["1 of billing-approvers"] and change["removed"] == []
    assert change["rules_after"] == ["policy:large-invoices"]

    totals = report["totals"]
    assert totals["plans"] == 11
    assert totals["by_status"] == {
        "cancelled": 2,
        "completed": 5,
        "denied": 2,
        "expired": 1,
        "stale": 1,
    }
    assert totals["draft"] == {"approve": 7, "review": 2, "refuse": 2}
    assert totals["draft_by_status"]["approve"] == {
        "cancelled": 2,
        "completed": 2,
        "denied": 1,
        "expired": 1,
        "stale": 1,
    }
    assert totals["draft_by_status"]["refuse"] == {"completed": 1, "denied": 1}
    assert totals["approved_by"] == {"nobody": 4, "people": 7}
    assert totals["recorded_to_draft"] == {
        "none -> approve": 7,
        "none -> refuse": 2,
        "none -> review": 2,
    }
    assert totals["cancelled_by_reviewer"] == 1
    assert totals["rate_counted"] == 11  # proposed with no policy: no rate recorded
    assert report["errors"] == {"plans": 0, "by_policy": {}, "messages": {}}
    assert report["draft"]["hash"] == draft.hash
    assert report["draft"]["policies"] == ["large-invoices", "routine-email", "vip-contacts-stay"]


def test_pages_of_two_give_the_same_report_as_one_page(history):
    draft = draft_read([DEMO_POLICIES])
    whole = report_of(draft, page_size=500)
    paged = report_of(draft, page_size=2)
    assert (whole["read"]["pages"], paged["read"]["pages"]) == (1, 6)
    for report in (whole, paged):
        report.pop("read")
        report.pop("window")
    assert paged == whole


def test_a_list_keeps_its_most_recent_plans_and_counts_them_all(history):
    report = report_of(draft_read([DEMO_POLICIES]), listed=2)
    ids = [str(history[k].id) for k in ("stale", "revoked")]
    assert report["approve_disagreements"]["count"] == 3
    assert listed(report, "approve_disagreements") == ids


def test_a_reviewers_revision_goes_to_people_whatever_the_draft_says(make_plan, catalog, reviewer):
    from approvals.services import plan_edit

    original = make_plan(input=elsewhere(1))
    revision = plan_edit(plan_id=original.id, reviewer=reviewer, input=routine(1))
    deny(revision, reviewer)
    report = report_of(draft_read([DEMO_POLICIES]))
    # routine-email approves the revision's change, but a revision is a person's to
    # decide: the draft would not have approved it, so its denial is no disagreement.
    assert report["approve_disagreements"]["count"] == 0
    assert report["totals"]["draft"] == {"approve": 0, "review": 2, "refuse": 0}
    assert report["totals"]["cancelled_by_reviewer"] == 1  # the original, replaced


def test_the_requester_the_plan_was_for_is_put_to_the_draft(make_plan, catalog, reviewer):
    for_staff = deny(make_plan(input=elsewhere(1), requester=STAFF), reviewer)
    deny(make_plan(input=elsewhere(2)), reviewer)
    draft = draft_compile(
        [
            (
                "staff.cedar",
                '@id("staff-asked") @approve\n'
                'permit (principal, action == Action::"update_contact_email", resource)\n'
                "when { principal has on_behalf_of &&\n"
                '       principal.on_behalf_of in Group::"staff" };\n',
            )
        ],
        actions=stored_actions(),
    )
    report = report_of(draft)
    assert listed(report, "approve_disagreements") == [str(for_staff.id)]


# --- the time and the rate ---------------------------------------------------------------------

BUSY = (
    '@id("busy") @reason("too many at once")\n'
    'forbid (principal, action == Action::"update_contact_email", resource)\n'
    "when { context.rate.hour >= 2 };\n"
)


def _at(plan: Plan, moment) -> None:
    Plan.objects.filter(pk=plan.pk).update(created_at=moment)


def test_rates_are_counted_from_history_including_the_day_before_the_window(
    make_plan, catalog, reviewer
):
    """Four changes by one agent at t, t+10 min, t+20 min and t+2 h; the window starts
    at t+5 min. The third is the agent's third in an hour (the first, before the window,
    counts): the draft refuses it. The fourth recorded a rate at submission: that is
    the one used."""
    t = timezone.now() - timedelta(hours=5)
    plans = [
        executed(approve(make_plan(input=elsewhere(i)), reviewer), "completed") for i in range(4)
    ]
    for plan, minutes in zip(plans, (0, 10, 20, 120), strict=True):
        _at(plan, t + timedelta(minutes=minutes))
    draft = draft_compile([("busy.cedar", BUSY)], actions=stored_actions())
    window = {"since": t + timedelta(minutes=5), "until": timezone.now()}
    report = backtest_run(policies=draft, **window)
    assert report["totals"]["plans"] == 3
    assert listed(report, "refuse_disagreements") == [str(plans[2].id)]
    assert report["refuse_disagreements"]["plans"][0]["draft"]["reason"] == "too many at once"
    assert report["totals"]["rate_counted"] == 3

    recorded = fresh(plans[3])
    part = {"at": (t + timedelta(minutes=120)).isoformat(), "rate": [7, 9], "outcome": "review"}
    Plan.objects.filter(pk=recorded.pk).update(policy={**recorded.policy, "policies": part})
    report = backtest_run(policies=draft, **window)
    assert listed(report, "refuse_disagreements") == [str(plans[2].id), str(plans[3].id)]
    assert report["totals"]["rate_counted"] == 2
    assert report["totals"]["recorded_to_draft"] == {
        "none -> refuse": 1,
        "none -> review": 1,
        "review -> refuse": 1,
    }


def test_the_backtest_counts_a_rate_as_the_submission_does(make_plan, agent, catalog):
    """The rate counted from history (RateWindows) and the one a submission counts
    (agent_rate) agree, plan after plan, over a day and a half of an agent's plans."""
    t = timezone.now() - timedelta(days=3)
    minutes = [0, 5, 5, 40, 59, 60, 61, 130, 600, 1439, 1440, 1441, 1500, 2000]
    plans = [make_plan(input=elsewhere(i)) for i in range(len(minutes))]
    for plan, minute in zip(plans, minutes, strict=True):
        _at(plan, t + timedelta(minutes=minute))
    windows = RateWindows()
    key = (agent.pk, plans[0].action_id)
    for plan in sorted((fresh(p) for p in plans), key=lambda p: (p.created_at, p.id)):
        at = int(plan.created_at.timestamp() * 1_000_000)
        counted = windows.count(key, at)
        windows.add(key, at)
        submitted = agent_rate(agent_id=agent.pk, action_id=plan.action_id, now=plan.created_at)
        assert counted == submitted, plan.created_at - t
    assert agent_rate(
        agent_id=agent.pk, action_id=plans[0].action_id, now=t + timedelta(minutes=61)
    ) == (5, 6)  # 5, 5, 40, 59 and 60 in the hour, 0 too in the day; 61 not yet


def test_a_rate_window_holds_one_day_and_forgets_the_rest():
    windows = RateWindows()
    hour, day = 3600 * 10**6, 24 * 3600 * 10**6
    for at in (0, 10, 20):
        windows.add(("a", "x"), at)
    assert windows.count(("a", "x"), 20) == (2, 2)  # strictly before: as the submission
    assert windows.count(("a", "x"), hour + 15) == (1, 3)
    windows.add(("b", "x"), day + 100)
    windows.forget_before(day + 100)
    assert list(windows.windows) == [("b", "x")]  # nothing of a's in the last day
    assert windows.held == 1


# --- requirement changes against the policies of the time ---------------------------------------


def test_a_draft_without_a_policy_of_the_time_gives_back_what_it_required(
    make_plan, demo_policies, reviewer
):
    billing = person("bea", "billing-approvers")
    invoice = make_plan("send_invoice", {"invoice_id": "inv-2001"})
    assert invoice.requirement["rules"] == ["policy:large-invoices"]  # recorded then
    executed(approve(invoice, billing), "completed")
    only_routine = (DEMO_POLICIES / "routine-email.cedar").read_text()
    report = report_of(draft_compile([("routine.cedar", only_routine)], actions=stored_actions()))
    assert listed(report, "requirement_changes") == [str(invoice.id)]
    change = report["requirement_changes"]["plans"][0]
    assert (change["before"], change["after"]) == ("1 of billing-approvers", "the class default")
    assert change["removed"] == ["1 of billing-approvers"]
    assert report["totals"]["rate_counted"] == 0  # recorded at submission
    # The same policies as then: nothing changes.
    assert report_of(draft_read([DEMO_POLICIES]))["requirement_changes"]["count"] == 0


# --- the command ---------------------------------------------------------------------------------


def test_the_command_prints_the_report_and_writes_json(history, tmp_path, capsys):
    out = tmp_path / "report.json"
    call_command(
        "policy_backtest",
        str(DEMO_POLICIES),
        "--since",
        "1d",
        "--json",
        str(out),
        "--page-size",
        "3",
        "--progress-pages",
        "1",
    )
    printed = capsys.readouterr()
    assert "Would approve what people said no to, or what went wrong: 3" in printed.out
    assert f"/plans/{history['denied'].id}/" in printed.out
    assert "Would refuse what a person approved and was done: 1" in printed.out
    assert "Would change who must approve: 1" in printed.out
    assert "the class default -> 1 of billing-approvers" in printed.out
    # Counted words agree with their numbers: "1 page", "4 pages".
    assert "plans read in 1 page," in printed.err and "11 plans read in 4 pages" in printed.err
    report = json.loads(out.read_text())
    assert report["totals"]["plans"] == 11 and report["read"]["page_size"] == 3
    event = AuditEvent.objects.get(kind="policy.backtest")
    assert event.actor == "cli"
    assert event.data["draft"] == report["draft"]["hash"]
    assert event.data["plans"] == 11 and event.data["approve_disagreements"] == 3
    assert event.data["since"] == report["window"]["since"]


def test_a_catalog_files_policies_are_a_draft(history, tmp_path, capsys):
    catalog = tmp_path / "catalog.yaml"
    section = yaml.safe_load((ROOT / "demo" / "catalog.yaml").read_text())["policies"]
    catalog.write_text(yaml.safe_dump({"version": 1, "policies": section}))
    for name in ("routine-email", "large-invoices", "vip-contacts"):
        (tmp_path / f"{name}.cedar").write_text((DEMO_POLICIES / f"{name}.cedar").read_text())
    section["enforce"] = [
        {"file": f"{n}.cedar"} for n in ("routine-email", "large-invoices", "vip-contacts")
    ]
    catalog.write_text(yaml.safe_dump({"version": 1, "policies": section}))
    call_command("policy_backtest", str(catalog), "--since", "1d")
    assert "Would approve what people said no to, or what went wrong: 3" in capsys.readouterr().out


def test_a_malformed_draft_is_refused_with_its_line_and_nothing_is_read(history, tmp_path):
    bad = tmp_path / "bad.cedar"
    bad.write_text(
        '@id("typo") @approve\n'
        'permit (principal, action == Action::"update_contact_email", resource)\n'
        'when { context.before.emial == "x" };\n'
    )
    with pytest.raises(CommandError) as info:
        call_command("policy_backtest", str(bad), "--since", "1d")
    message = str(info.value)
    assert message.startswith("the policies are refused:")
    assert f"{bad}, line 3: policy typo:" in message and "emial" in message
    assert "Traceback" not in message
    assert not AuditEvent.objects.filter(kind="policy.backtest").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(CommandError, match=r"no \.cedar file in this directory"):
        call_command("policy_backtest", str(tmp_path / "empty"), "--since", "1d")
    with pytest.raises(CommandError, match="give a duration before now"):
        call_command("policy_backtest", str(DEMO_POLICIES), "--since", "yesterday")


# --- the admin page ------------------------------------------------------------------------------


@pytest.fixture
def eager():
    """Tasks run in this process (the worker's task, called as the worker calls it)."""
    saved = current_app.conf.task_always_eager, current_app.conf.task_eager_propagates
    current_app.conf.task_always_eager, current_app.conf.task_eager_propagates = True, True
    yield
    current_app.conf.task_always_eager, current_app.conf.task_eager_propagates = saved


@pytest.fixture
def backtester(db):
    user = get_user_model().objects.create_user(username="ana", password="pw-ana", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="run_policy_backtest"))
    return get_user_model().objects.get(pk=user.pk)


def test_the_admin_page_runs_a_backtest_in_a_worker_and_shows_the_report(
    client, history, backtester, eager, django_capture_on_commit_callbacks
):
    client.force_login(backtester)
    assert client.get("/admin/approvals/policybacktest/add/").status_code == 200
    draft = "\n".join(p.read_text() for p in sorted(DEMO_POLICIES.glob("*.cedar")))
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(
            "/admin/approvals/policybacktest/add/", {"draft": draft, "since": "1d"}
        )
    backtest = PolicyBacktest.objects.get()
    assert answer.status_code == 302 and answer.url == backtest.get_absolute_url()
    assert backtest.state == "done" and backtest.plans_read == 11
    page = client.get(answer.url)
    html = page.content.decode()
    assert page.status_code == 200 and 'http-equiv="refresh"' not in html
    for name in ("denied", "stale", "revoked", "vip_deleted", "invoice"):
        assert f'href="/plans/{history[name].id}/"' in html
    assert 'id="approve-disagreements">Would approve what people said no to' in html
    assert client.get(answer.url + "?format=json").json() == backtest.report
    assert client.get("/admin/approvals/policybacktest/nope/change/").status_code == 404
    event = AuditEvent.objects.get(kind="policy.backtest")
    assert event.actor == "user:ana" and event.data["draft"] == backtest.draft_hash


def test_the_admin_page_refreshes_until_the_worker_is_done(client, history, backtester):
    client.force_login(backtester)
    client.post("/admin/approvals/policybacktest/add/", {"draft": ROUTINE_CEDAR, "since": "2d"})
    backtest = PolicyBacktest.objects.get()
    assert backtest.state == "queued"  # nothing ran in the request
    assert 'http-equiv="refresh"' in client.get(backtest.get_absolute_url()).content.decode()


def test_the_admin_page_refuses_a_malformed_draft_with_its_line(client, backtester):
    client.force_login(backtester)
    answer = client.post(
        "/admin/approvals/policybacktest/add/",
        {
            "draft": '@id("x") @approve\npermit (principal, action == Action::"nope", resource);',
            "since": "7d",
        },
    )
    assert answer.status_code == 200
    assert "the draft, line 2: policy x:" in answer.content.decode()
    assert not PolicyBacktest.objects.exists()


def test_only_staff_with_the_permission_may_backtest(client, catalog, reviewer, backtester):
    client.force_login(reviewer)  # not staff
    answer = client.get("/admin/approvals/policybacktest/add/")
    assert answer.status_code == 302 and "/login/" in answer.url
    reviewer.is_staff = True
    reviewer.save()
    assert client.get("/admin/approvals/policybacktest/add/").status_code == 403
    assert (
        client.post(
            "/admin/approvals/policybacktest/add/", {"draft": ROUTINE_CEDAR, "since": "1d"}
        ).status_code
        == 403
    )
    assert not PolicyBacktest.objects.exists()


ROUTINE_CEDAR = (DEMO_POLICIES / "routine-email.cedar").read_text()


# --- the worker's run ----------------------------------------------------------------------------


def _requested(user) -> PolicyBacktest:
    now = timezone.now()
    return policy_backtest_request(
        user=user, draft_text=ROUTINE_CEDAR, since=now - timedelta(days=1), until=now
    )


def test_a_duplicate_message_runs_a_backtest_once(history, backtester):
    backtest = _requested(backtester)
    assert policy_backtest_execute(backtest_id=backtest.id) == "done"
    assert policy_backtest_execute(backtest_id=backtest.id) == "over"
    assert AuditEvent.objects.filter(kind="policy.backtest").count() == 1
    backtest.refresh_from_db()
    assert backtest.report["totals"]["plans"] == 11 and backtest.plans_read == 11


def test_a_run_whose_worker_stopped_is_taken_over_by_the_next_message(history, backtester):
    backtest = _requested(backtester)
    long_ago = timezone.now() - timedelta(hours=1)
    PolicyBacktest.objects.filter(id=backtest.id).update(state="running", progress_at=long_ago)
    assert policy_backtest_execute(backtest_id=backtest.id) == "done"
    PolicyBacktest.objects.filter(id=backtest.id).update(
        state="running", progress_at=timezone.now()
    )
    assert policy_backtest_execute(backtest_id=backtest.id) == "busy"  # still moving


def test_the_task_looks_again_later_at_a_run_that_is_still_moving(history, backtester, eager):
    from approvals.tasks import policy_backtest_task

    backtest = _requested(backtester)
    PolicyBacktest.objects.filter(id=backtest.id).update(
        state="running", progress_at=timezone.now()
    )
    with pytest.raises(Retry) as info:
        policy_backtest_task.apply(args=[str(backtest.id)], throw=True)
    assert info.value.when == 600  # STALLED_AFTER: it is taken over if it stopped
    PolicyBacktest.objects.filter(id=backtest.id).update(state="queued")
    assert policy_backtest_task.apply(args=[str(backtest.id)], throw=True).get() == "done"


def test_a_run_that_fails_says_why_on_its_page_and_in_the_trail(
    history, backtester, client, monkeypatch
):
    backtest = _requested(backtester)

    def broken(**kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr("approvals.decisions.backtest.runs.backtest_run", broken)
    assert policy_backtest_execute(backtest_id=backtest.id) == "failed"
    backtest.refresh_from_db()
    assert backtest.state == "failed" and "the database went away" in backtest.error
    event = AuditEvent.objects.get(kind="policy.backtest")
    assert event.data["failed"] == "RuntimeError: the database went away"
    client.force_login(backtester)
    assert "The run failed" in client.get(backtest.get_absolute_url()).content.decode()


def test_the_window_is_read_as_people_write_it():
    now = timezone.now()
    assert backtest_moment("30d", now=now) == now - timedelta(days=30)
    assert backtest_moment("12h", now=now) == now - timedelta(hours=12)
    assert backtest_moment("90m", now=now) == now - timedelta(minutes=90)
    assert backtest_moment("2w", now=now) == now - timedelta(weeks=2)
    assert backtest_moment("2026-11-01T08:00:00+00:00", now=now).hour == 8
    day = backtest_moment("2026-11-01", now=now)
    assert (day.year, day.month, day.day, day.hour) == (2026, 11, 1, 0)
    for text in ("yesterday", "2026-11-01T08:00:00", "-3d"):
        with pytest.raises(BacktestRefused):
            backtest_moment(text, now=now)
    with pytest.raises(BacktestRefused, match="the window is empty"):
        backtest_window("1d", "2d", now=now)
