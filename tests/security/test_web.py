"""The web surface: CSP, deploy checks, sign-in throttling, session expiry."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.cache import cache

ROOT = Path(__file__).resolve().parents[2]
LOGIN = "/accounts/login/"


@pytest.fixture(autouse=True)
def _clear_cache():
    cache.clear()
    yield
    cache.clear()


def test_pages_carry_a_strict_csp(client, db):
    response = client.get(LOGIN)  # extends base.html like every reviewer page
    assert response.status_code == 200
    policy = response["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";") if d.strip())
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    # No inline script: every <script> that runs has a src.
    html = response.content.decode()
    for tag in html.split("<script")[1:]:
        head = tag.split(">", 1)[0]
        assert "src=" in head or 'type="application/json"' in head, head


def test_check_deploy_is_clean_in_production(tmp_path):
    from cryptography.fernet import Fernet

    env = {
        "PATH": os.environ.get("PATH", ""),
        "COUNTERSIGN_ENV": "production",
        "COUNTERSIGN_SECRET_KEY": secrets.token_urlsafe(60),
        "COUNTERSIGN_FERNET_KEY": Fernet.generate_key().decode(),
        "COUNTERSIGN_ALLOWED_HOSTS": "countersign.example.com",
        "DATABASE_URL": "postgres://app:pw@db.invalid:5432/countersign",
        "CELERY_BROKER_URL": "redis://redis.invalid:6379/0",
        "REDIS_URL": "redis://redis.invalid:6379/0",
        "COUNTERSIGN_VAR_DIR": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def _fail(client, username="rita", password="wrong"):
    return client.post(LOGIN, {"username": username, "password": password})


def test_sign_in_is_throttled_after_five_failures(client, reviewer):
    for _ in range(5):
        response = _fail(client)
        assert response.status_code == 200
        assert "Too many failed" not in response.content.decode()
    response = _fail(client)
    assert "Too many failed sign-in attempts" in response.content.decode()
    # Even the right password is refused while throttled.
    response = _fail(client, password="pw-rita")
    assert response.status_code == 200
    assert "Too many failed sign-in attempts" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_throttling_is_per_username_and_address(client, reviewer, second_reviewer):
    for _ in range(5):
        _fail(client)
    # Another account from the same address is unaffected.
    response = client.post(LOGIN, {"username": "sam", "password": "pw-sam"})
    assert response.status_code == 302
    # The same account from another address is unaffected.
    client.logout()
    response = client.post(
        LOGIN, {"username": "rita", "password": "pw-rita"}, REMOTE_ADDR="10.9.8.7"
    )
    assert response.status_code == 302


def test_a_successful_sign_in_clears_the_count(client, reviewer):
    for _ in range(4):
        _fail(client)
    assert client.post(LOGIN, {"username": "rita", "password": "pw-rita"}).status_code == 302
    client.logout()
    for _ in range(4):
        _fail(client)
    assert client.post(LOGIN, {"username": "rita", "password": "pw-rita"}).status_code == 302


def test_the_admin_sign_in_is_throttled_too(client, db):
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("root", password="pw-root")
    for _ in range(5):
        client.post("/admin/login/", {"username": "root", "password": "nope"})
    response = client.post("/admin/login/", {"username": "root", "password": "pw-root"})
    assert "Too many failed sign-in attempts" in response.content.decode()


def test_sessions_end_with_the_browser_and_after_the_age(client, reviewer, settings):
    response = client.post(LOGIN, {"username": "rita", "password": "pw-rita"})
    assert response.status_code == 302
    cookie = response.cookies[settings.SESSION_COOKIE_NAME]
    assert cookie["expires"] == "" and cookie["max-age"] == ""  # a browser-session cookie
    assert cookie["httponly"]
    assert client.session.get_expire_at_browser_close()
    assert client.session.get_expiry_age() == settings.SESSION_COOKIE_AGE <= 8 * 3600
