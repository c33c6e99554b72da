"""The pages' answer when the database cannot be reached: the product's own page saying
the service is temporarily unavailable, 503 with Retry-After, in the reviewer's language;
any other failure stays Django's 500.

The suite's database cannot be stopped under the test: the reviewer's session is read
with the error psycopg raises for a connection the server closed (the live cluster test,
tests/e2e/test_database_outage.py, stops a real one)."""

from __future__ import annotations

import psycopg
import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.db import IntegrityError, OperationalError
from django.test import Client


@pytest.fixture(autouse=True)
def _own_outage_monitor(monkeypatch):
    """An outage this test logs is its own: the process's monitor is left alone."""
    from actions.lib import outage

    monkeypatch.setattr(outage, "monitor", outage.Monitor(probe=lambda: True))


def _failing_session(monkeypatch, error: Exception) -> None:
    def load(self):
        raise error

    monkeypatch.setattr(SessionStore, "load", load)


def _outage() -> OperationalError:
    error = OperationalError("server closed the connection unexpectedly")
    error.__cause__ = psycopg.OperationalError("server closed the connection unexpectedly")
    return error


@pytest.fixture
def signed_in(reviewer):
    client = Client(raise_request_exception=False)
    client.force_login(reviewer)
    return client


def test_it_is_the_styled_unavailable_page(signed_in, monkeypatch):
    _failing_session(monkeypatch, _outage())
    response = signed_in.get("/plans/")
    assert response.status_code == 503
    assert response["Retry-After"] == "2"
    text = response.content.decode()
    assert "Temporarily unavailable" in text
    assert "Try again in 2 seconds." in text
    assert "/static/css/app.css" in text
    # Nobody is shown as signed in: the session could not be read.
    assert "Log out" not in text


def test_it_speaks_the_reviewers_language(signed_in, monkeypatch, settings):
    signed_in.cookies[settings.LANGUAGE_COOKIE_NAME] = "pt-br"
    _failing_session(monkeypatch, _outage())
    response = signed_in.get("/plans/")
    assert response.status_code == 503
    assert "Temporariamente indisponível" in response.content.decode()


def test_any_other_failure_stays_a_500(signed_in, monkeypatch):
    _failing_session(monkeypatch, IntegrityError("duplicate key"))
    response = signed_in.get("/plans/")
    assert response.status_code == 500
    assert "Retry-After" not in response
    assert "Temporarily unavailable" not in response.content.decode()
