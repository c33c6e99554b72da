"""Fixtures for end-to-end tests: an agent and a reviewer talking to the live processes."""

from __future__ import annotations

import pytest

from tests.e2e.support import AgentClient, ReviewerClient, WorkerLogs


@pytest.fixture
def agent_api(live, agent_token):
    client = AgentClient(live["url"], agent_token)
    yield client
    client.close()


@pytest.fixture
def rita(live, reviewer):
    """The reviewer, logged in through the real login form."""
    client = ReviewerClient(live["url"], "rita", "pw-rita")
    yield client
    client.close()


@pytest.fixture
def worker_logs(live):
    """Execution tasks the live worker finishes from now on."""
    return WorkerLogs(live["worker"])


@pytest.fixture
def approve_without_wakeup(monkeypatch, reviewer):
    """Approve in this process while the broker message is lost: publishing is a no-op
    for the approval's on-commit hook only, then the real publish is back."""
    from approvals.services import approval_record

    def approve(plan: dict) -> None:
        with monkeypatch.context() as patched:
            patched.setattr("actions.lib.dispatch.publish", lambda *a, **k: None)
            approval_record(
                plan_id=plan["id"],
                reviewer=reviewer,
                decision="approve",
                fingerprint_seen=plan["fingerprint"],
            )

    return approve


@pytest.fixture(scope="module")
def chromium_browser():
    """One Chromium (and one Playwright driver) for a module's tests, started with the
    first page one of them opens and closed after its last test: each test still gets
    browser contexts of its own (``chromium``), with their own cookies and storage.

    Playwright's sync API keeps its event loop running in this thread from its start,
    and Django refuses ORM calls in a thread with a running loop unless told it may: the
    later tests' fixtures and the flush of the test database after each test make such
    calls here, synchronously, while the loop only serves Playwright's own calls between
    them, so the module runs with DJANGO_ALLOW_ASYNC_UNSAFE from the start on."""
    import shutil

    from tests.e2e.test_browser import CHROMIUM

    started: dict = {}

    def browser():
        if not shutil.which(CHROMIUM):
            pytest.skip("Chromium is not installed at /usr/bin/chromium")
        if not started:
            from playwright.sync_api import sync_playwright

            playwright = sync_playwright().start()
            try:
                chromium = playwright.chromium.launch(
                    executable_path=CHROMIUM,
                    args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"],
                )
            except BaseException:
                playwright.stop()
                raise
            env = pytest.MonkeyPatch()
            env.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
            started.update(playwright=playwright, browser=chromium, env=env)
        return started["browser"]

    yield browser
    if started:
        started["browser"].close()
        started["playwright"].stop()
        started["env"].undo()


@pytest.fixture
def chromium(live, reviewer, second_reviewer, agent_api, chromium_browser):
    """Open Chromium pages on demand, each in a context of its own (its own cookies, so
    its own reviewer; its own locale and window size; JavaScript on or off), closed at
    the end of the test. The module's Chromium starts with the first page it opens."""
    contexts = []

    def new_page(**context_options):
        options = {"viewport": {"width": 1280, "height": 900}, "base_url": live["url"]}
        context = chromium_browser().new_context(**{**options, **context_options})
        contexts.append(context)
        context.set_default_timeout(10_000)
        return context.new_page()

    yield new_page
    for context in contexts:
        context.close()


# --- single sign-on and passkeys: a real OpenID provider, a web server that uses it ---------


# The scopes the suite's provider offers: no groups scope (the groups claim comes with
# profile), as many hosted providers do; it answers invalid_scope to a request for one.
OIDC_PROVIDER_SCOPES = "openid email profile"


@pytest.fixture(scope="session")
def oidc_provider(live_logs, sso_port):
    """panva/oidc-provider under Node, one process for the whole session, strict about
    scopes (OIDC_PROVIDER_SCOPES)."""
    from tests.oidc.support import start_provider

    base = f"http://localhost:{sso_port}"
    provider = start_provider(
        live_logs,
        redirect_uri=f"{base}/accounts/oidc/callback/",
        post_logout_uri=f"{base}/accounts/login/",
        scopes=OIDC_PROVIDER_SCOPES,
    )
    yield provider
    provider.stop()


@pytest.fixture(scope="session")
def hostile_token_endpoint(oidc_provider):
    from tests.oidc.support import HostileTokenEndpoint

    endpoint = HostileTokenEndpoint(issuer=oidc_provider.issuer)
    yield endpoint
    endpoint.stop()


@pytest.fixture(scope="session")
def sso_web(live_env, live_logs, sso_port, oidc_provider, hostile_token_endpoint):
    """A second web process, at http://localhost:<sso_port>: single sign-on with the test
    provider (tokens and keys fetched through the hostile endpoint, which relays them
    untouched unless a test says otherwise), the default scopes, local passwords still on
    (test mode), irreversible plans needing passkey-signed approvals, and an access log
    (its log is live_logs / "web-sso.log")."""
    from demo.processes import start_web
    from tests.oidc.support import CLIENT_ID, CLIENT_SECRET

    issuer = oidc_provider.issuer
    env = {
        **live_env,
        "COUNTERSIGN_OIDC_ISSUER": issuer,
        "COUNTERSIGN_OIDC_CLIENT_ID": CLIENT_ID,
        "COUNTERSIGN_OIDC_CLIENT_SECRET": CLIENT_SECRET,
        "COUNTERSIGN_OIDC_NAME": "Example SSO",
        "COUNTERSIGN_OIDC_AUTHORIZATION_ENDPOINT": f"{issuer}/auth",
        "COUNTERSIGN_OIDC_TOKEN_ENDPOINT": f"{hostile_token_endpoint.url}/token",
        "COUNTERSIGN_OIDC_USERINFO_ENDPOINT": f"{issuer}/me",
        "COUNTERSIGN_OIDC_JWKS_ENDPOINT": f"{hostile_token_endpoint.url}/jwks",
        "COUNTERSIGN_OIDC_END_SESSION_ENDPOINT": f"{issuer}/session/end",
        "COUNTERSIGN_SIGNED_APPROVAL_CLASSES": "irreversible",
    }
    proc, url = start_web(
        env, live_logs, name="web-sso", port=sso_port, host_name="localhost", access_log=True
    )
    yield url
    proc.stop()


@pytest.fixture
def sso(live, sso_web, hostile_token_endpoint, oidc_provider):
    """The SSO web server for one test; the token endpoint back to relaying."""
    hostile_token_endpoint.mode = "relay"
    hostile_token_endpoint.issued.clear()
    hostile_token_endpoint.tokens.clear()
    yield {"url": sso_web, "token_endpoint": hostile_token_endpoint, "issuer": oidc_provider.issuer}
    hostile_token_endpoint.mode = "relay"


@pytest.fixture
def sso_agent_api(sso, agent_token):
    """The agent, talking to the SSO web server (whose policy signs irreversible plans)."""
    client = AgentClient(sso["url"].replace("localhost", "127.0.0.1"), agent_token)
    yield client
    client.close()
