"""manage.py create_reviewer: a user who can review plans, in a group carrying the review
permission (made if missing); a generated password printed once, or one read from
standard input and held to the password validators; never logged or recorded."""

from __future__ import annotations

import io
import logging
import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management import CommandError, call_command
from django.urls import reverse

from actions.lib.models import AuditEvent
from approvals.permissions import can_review
from tests.conftest import ROOT

GOOD_PASSWORD = "quiet-harbour-lantern-42"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def users():
    return get_user_model().objects


def review_permission() -> Permission:
    return Permission.objects.get(content_type__app_label="approvals", codename="review_plan")


def run(capsys, *args: str) -> str:
    call_command("create_reviewer", *args)
    return capsys.readouterr().out


def everything_recorded(caplog) -> str:
    """Every log record and every audit event, as text."""
    logged = "\n".join(r.getMessage() for r in caplog.records)
    audited = "\n".join(repr(e.data) for e in AuditEvent.objects.all())
    return logged + "\n" + audited


@pytest.fixture(autouse=True)
def _all_logs(caplog):
    caplog.set_level(logging.DEBUG)


def test_it_creates_a_reviewer_with_a_generated_password_shown_once(db, capsys, caplog, client):
    out = run(capsys, "ada", "--email", "ada@example.test")
    password = out.strip().splitlines()[-1]
    assert len(password) >= 20 and out.count(password) == 1
    ada = users().get(username="ada")
    assert ada.email == "ada@example.test" and can_review(ada)
    assert not ada.is_staff and not ada.is_superuser
    assert [g.name for g in ada.groups.all()] == ["reviewers"]
    assert ada.check_password(password)
    # The person can sign in and open the queue with it.
    assert client.login(username="ada", password=password)
    assert client.get(reverse("approvals:queue")).status_code == 200
    assert password not in everything_recorded(caplog)
    event = AuditEvent.objects.get(kind="reviewer.created")
    assert (event.actor, event.data["username"], event.data["group"]) == ("cli", "ada", "reviewers")


def test_the_group_is_made_with_the_review_permission_only_when_missing(db, capsys):
    assert not Group.objects.filter(name="reviewers").exists()
    first = run(capsys, "ada")
    assert "group reviewers created" in first
    group = Group.objects.get(name="reviewers")
    # Review, and view every plan read-only (an administrator may take that one away).
    assert set(group.permissions.values_list("codename", flat=True)) == {
        "review_plan",
        "view_plan",
    }
    second = run(capsys, "bob")
    assert "group reviewers created" not in second
    assert Group.objects.filter(name="reviewers").count() == 1
    assert set(group.user_set.values_list("username", flat=True)) == {"ada", "bob"}


def test_another_group_can_be_named(db, capsys):
    run(capsys, "ada", "--group", "approvers")
    assert review_permission() in Group.objects.get(name="approvers").permissions.all()
    assert [g.name for g in users().get(username="ada").groups.all()] == ["approvers"]


def test_an_existing_group_without_the_permission_is_not_widened(db, outsider):
    support = Group.objects.create(name="support")
    support.user_set.add(outsider)
    with pytest.raises(CommandError, match="exists without the permission to review plans"):
        call_command("create_reviewer", "ada", "--group", "support")
    assert not users().filter(username="ada").exists()
    assert not support.permissions.exists()
    assert not can_review(users().get(pk=outsider.pk))


def test_an_existing_username_is_refused(reviewer):
    with pytest.raises(CommandError, match="a user named 'rita' already exists"):
        call_command("create_reviewer", "rita", "--group", "approvers")
    rita = users().get(username="rita")
    assert rita.check_password("pw-rita") and not rita.groups.exists()
    assert not AuditEvent.objects.filter(kind="reviewer.created").exists()


def test_a_password_from_stdin_is_used_and_never_shown(db, capsys, caplog, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(GOOD_PASSWORD + "\n"))
    call_command("create_reviewer", "ada", "--password-stdin")
    out, err = capsys.readouterr()
    assert "reviewer ada created" in out
    assert users().get(username="ada").check_password(GOOD_PASSWORD)
    assert GOOD_PASSWORD not in out + err + everything_recorded(caplog)


@pytest.mark.parametrize(
    "password,reason",
    [
        ("qwertyuiop", "too common"),
        ("k3x!", "too short"),
        ("ada.lovelace.1815", "too similar to the username"),
    ],
)
def test_a_password_from_stdin_must_pass_the_validators(db, monkeypatch, caplog, password, reason):
    monkeypatch.setattr("sys.stdin", io.StringIO(password + "\n"))
    with pytest.raises(CommandError, match=reason) as refused:
        call_command("create_reviewer", "ada.lovelace", "--password-stdin")
    assert password not in str(refused.value) + everything_recorded(caplog)
    assert not users().filter(username="ada.lovelace").exists()


def test_an_empty_password_on_stdin_is_refused(db, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(CommandError, match="empty password"):
        call_command("create_reviewer", "ada", "--password-stdin")
    assert not users().filter(username="ada").exists()


def test_a_terminal_is_asked_twice_hidden(db, monkeypatch):
    answers = iter([GOOD_PASSWORD, GOOD_PASSWORD + "x"])
    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(answers))
    with pytest.raises(CommandError, match="the two passwords differ"):
        call_command("create_reviewer", "ada", "--password-stdin")
    assert not users().filter(username="ada").exists()

    answers = iter([GOOD_PASSWORD, GOOD_PASSWORD])
    call_command("create_reviewer", "ada", "--password-stdin")
    assert users().get(username="ada").check_password(GOOD_PASSWORD)


def test_a_username_or_email_the_user_model_refuses_is_refused(db):
    with pytest.raises(CommandError, match="username: Enter a valid username"):
        call_command("create_reviewer", "ada lovelace!")
    with pytest.raises(CommandError, match="email: Enter a valid email address"):
        call_command("create_reviewer", "ada", "--email", "not-an-address")
    assert not users().exists()


# --- as an operator runs it: a process of its own ---------------------------------------


def manage(live_env, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "create_reviewer", *args],
        cwd=ROOT,
        env=live_env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_from_the_shell_an_existing_username_exits_non_zero_without_a_traceback(
    transactional_db, live_env
):
    users().create_user(username="rita", password="pw-rita")
    result = manage(live_env, "rita")
    assert result.returncode == 1
    assert result.stderr.strip() == "CommandError: a user named 'rita' already exists"
    assert "Traceback" not in result.stdout + result.stderr


def test_from_the_shell_the_password_is_read_from_a_pipe(transactional_db, live_env):
    result = manage(live_env, "ada", "--password-stdin", stdin=GOOD_PASSWORD + "\n")
    assert result.returncode == 0, result.stderr
    assert GOOD_PASSWORD not in result.stdout + result.stderr
    assert users().get(username="ada").check_password(GOOD_PASSWORD)
