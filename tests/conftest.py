"""Shared fixtures: the demo upstream (a real HTTP server), the demo catalog, the stock
actors (an agent, a reviewer, a second reviewer, an outsider) and, for end-to-end
tests, a real web server and a real Celery worker."""

from __future__ import annotations

import copy
import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from actions.lib.checkpoints import generate_signing_key
from demo.upstream import DemoUpstream
from executors.vault import generate_keypair
from tests.oidc.support import CLIENT_SECRET as OIDC_CLIENT_SECRET

ROOT = Path(__file__).resolve().parent.parent
DEMO_CATALOG = ROOT / "demo" / "catalog.yaml"


def demo_catalog_text(*, decision_rules: bool = False) -> str:
    """The demo catalog's text, without its ``reviewers:`` section (the decision rules)
    and the ``policies:`` section after it unless asked for: the suite's plans keep their
    class defaults. (With them, load it with ``base_dir=DEMO_CATALOG.parent``: the
    policies are files beside it.)"""
    text = DEMO_CATALOG.read_text()
    return text if decision_rules else text.split("\nreviewers:\n")[0] + "\n"


READ_TOKEN = "test-read-" + uuid.uuid4().hex
WRITE_TOKEN = "test-write-" + uuid.uuid4().hex
# The demo upstream's OAuth2 client (POST /oauth/token); the access tokens it issues are
# random and looked up from the server (DemoUpstream.issued_tokens()).
OAUTH_CLIENT_ID = "test-client-" + uuid.uuid4().hex
OAUTH_CLIENT_SECRET = "test-oauth-secret-" + uuid.uuid4().hex


def pytest_sessionstart(session):
    _drop_orphaned_test_databases()


def _drop_orphaned_test_databases() -> None:
    """Drop per-run test databases whose pytest process is gone (a run that was killed)."""
    import os
    import re

    import psycopg
    from django.db import connections

    from approvals.ops.monitoring import pid_alive

    params = connections["default"].settings_dict
    if not params["ENGINE"].endswith("postgresql"):
        return
    base = re.escape(f"test_{params['NAME']}_")
    try:
        conn = psycopg.connect(
            dbname="postgres",
            user=params["USER"] or None,
            password=params["PASSWORD"] or None,
            host=params["HOST"] or None,
            port=params["PORT"] or None,
            autocommit=True,
        )
    except psycopg.Error:
        return  # make test reports an unreachable server more clearly
    with conn:
        names = [r[0] for r in conn.execute("SELECT datname FROM pg_database").fetchall()]
        for name in names:
            match = re.fullmatch(base + r"(\d+)", name)
            if match and not pid_alive(int(match.group(1))) and int(match.group(1)) != os.getpid():
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def worker_keys(tmp_path_factory) -> dict[str, str]:
    """A worker key pair for this run. The test process itself gets only the public key;
    tests that play the worker in-process opt in with the ``executor_key`` fixture."""
    private, public = generate_keypair()
    path = tmp_path_factory.mktemp("keys") / "worker.key"
    path.write_text(private)
    path.chmod(0o600)
    django_settings.COUNTERSIGN_WORKER_PUBLIC_KEY = public
    django_settings.COUNTERSIGN_WORKER_KEY_FILE = ""
    return {"private_file": str(path), "public": public}


@pytest.fixture(scope="session")
def audit_keys(tmp_path_factory) -> dict[str, str]:
    """The audit signing key for this run: like the worker key, the test process gets the
    public half only; tests that play the sealer opt in with ``sealer_key``."""
    private, public = generate_signing_key()
    path = tmp_path_factory.mktemp("keys") / "audit.key"
    path.write_text(private)
    path.chmod(0o600)
    django_settings.COUNTERSIGN_AUDIT_PUBLIC_KEY = public
    django_settings.COUNTERSIGN_AUDIT_KEY_FILE = ""
    django_settings.COUNTERSIGN_AUDIT_EXPORT_FILE = ""
    return {"private_file": str(path), "public": public}


@pytest.fixture(autouse=True)
def _keys(worker_keys, audit_keys):
    yield


@pytest.fixture
def sealer_key(settings, audit_keys):
    """Play the sealer in this process: give it the audit signing key."""
    settings.COUNTERSIGN_AUDIT_KEY_FILE = audit_keys["private_file"]
    return audit_keys["private_file"]


@pytest.fixture
def executor_key(settings, worker_keys):
    """Play the worker in this process: give it the private key."""
    settings.COUNTERSIGN_WORKER_KEY_FILE = worker_keys["private_file"]
    return worker_keys["private_file"]


@pytest.fixture(scope="session")
def upstream_server():
    server = DemoUpstream(
        read_token=READ_TOKEN,
        write_token=WRITE_TOKEN,
        oauth_client_id=OAUTH_CLIENT_ID,
        oauth_client_secret=OAUTH_CLIENT_SECRET,
    ).start()
    yield server
    server.stop()


@pytest.fixture
def upstream(upstream_server):
    """The demo upstream, reset to its seed data for each test (its issued OAuth2 tokens
    too, so this process's token cache and pooled read clients start empty as well)."""
    from actions.clients import read_pool_clear
    from actions.oauth import forget_all

    upstream_server.reset()
    forget_all()
    read_pool_clear()
    yield upstream_server
    upstream_server.clear_faults()
    forget_all()
    read_pool_clear()


@pytest.fixture(scope="session")
def demo_catalog_document(upstream_server, django_db_setup, django_db_blocker) -> dict:
    """The demo catalog, parsed and validated once for the run (``load_catalog`` does
    both for every load; the hundreds of tests that load it need it done once). The
    validation reads the connectors already stored: none yet, in a new test database."""
    from actions.catalog import catalog_document

    with django_db_blocker.unblock():
        document = catalog_document(
            DEMO_CATALOG.read_text(),
            base_urls={"demo": upstream_server.url},
            base_dir=DEMO_CATALOG.parent,
        )
    # The suite's plans keep the class defaults, with no policy; tests of decision rules
    # and policies load the demo's (``demo_policies``) or their own.
    document.pop("reviewers", None)
    document.pop("policies", None)
    return document


def demo_policies_load() -> None:
    """Put the demo catalog's ``policies:`` section (its three .cedar files) in force."""
    import yaml

    from actions.catalog import load_catalog

    section = yaml.safe_load(DEMO_CATALOG.read_text())["policies"]
    load_catalog(
        yaml.safe_dump({"version": 1, "policies": section}),
        source="demo/catalog.yaml",
        base_dir=DEMO_CATALOG.parent,
    )


@pytest.fixture
def demo_policies(catalog):
    """The demo's policies in force (routine-email, large-invoices, vip-contacts-stay)."""
    demo_policies_load()


@pytest.fixture
def catalog(db, upstream, demo_catalog_document):
    """The demo catalog pointed at the test upstream, with read and write credentials."""
    from actions.catalog import catalog_apply
    from actions.models import Action, Connector, Credential
    from actions.services import credential_set

    catalog_apply(copy.deepcopy(demo_catalog_document))
    connector = Connector.objects.get(name="demo")
    credential_set(connector=connector, role=Credential.Role.READ, secret={"token": READ_TOKEN})
    credential_set(connector=connector, role=Credential.Role.WRITE, secret={"token": WRITE_TOKEN})
    return {a.name: a for a in Action.objects.all()}


@pytest.fixture
def agent_and_token(catalog):
    from actions.services import agent_create

    return agent_create(name="test-agent", action_names=list(catalog), active=True)


@pytest.fixture
def agent(agent_and_token):
    return agent_and_token[0]


@pytest.fixture
def agent_token(agent_and_token):
    return agent_and_token[1]


@pytest.fixture
def other_agent(catalog):
    """A second agent, allowed only one action."""
    from actions.services import agent_create

    return agent_create(name="other-agent", action_names=["update_invoice_memo"], active=True)


def _user(username: str, *, reviewer: bool):
    user = get_user_model().objects.create_user(username=username, password="pw-" + username)
    if reviewer:
        user.user_permissions.add(Permission.objects.get(codename="review_plan"))
    return get_user_model().objects.get(pk=user.pk)  # fresh permission cache


@pytest.fixture
def reviewer(db):
    return _user("rita", reviewer=True)


@pytest.fixture
def second_reviewer(db):
    return _user("sam", reviewer=True)


@pytest.fixture
def outsider(db):
    """Logged in, but not a reviewer."""
    return _user("oscar", reviewer=False)


@pytest.fixture
def api_headers(agent_token):
    return {"HTTP_AUTHORIZATION": f"Bearer {agent_token}"}


@pytest.fixture
def make_plan(agent):
    """Submit a plan through the service; defaults to updating a contact's email."""
    from approvals.services import plan_submit

    def make(action: str = "update_contact_email", input=None, *, by=None, reason: str = "", **kw):
        if input is None:
            input = {"contact_id": "c-1001", "email": "ada@new.example"}
        plan, _ = plan_submit(
            agent=by or agent, action_name=action, input=input, reason=reason, **kw
        )
        return plan

    return make


# --- end-to-end: real processes ----------------------------------------------------------


@pytest.fixture(scope="session")
def sso_port() -> int:
    """The port of the web server that signs people in with the test OpenID provider and
    asks for passkeys (tests/e2e/conftest.py: sso_web), chosen early: the worker checks
    signed approvals against that origin."""
    from demo.processes import free_port

    return free_port()


@pytest.fixture(scope="session")
def live_env(django_db_setup, django_db_blocker, worker_keys, sso_port):
    """Environment for subprocesses: the test database, Redis, a queue of our own."""
    from django.db import connection

    from demo.processes import base_env, database_url

    queue = django_settings.CELERY_TASK_DEFAULT_QUEUE
    return base_env(
        database_url(connection.settings_dict),
        django_settings.CELERY_BROKER_URL,
        queue,
        worker_keys["public"],
        extra={
            "COUNTERSIGN_WEBAUTHN_RP_ID": "localhost",
            "COUNTERSIGN_WEBAUTHN_ORIGINS": f"http://localhost:{sso_port}",
        },
    )


@pytest.fixture(scope="session")
def live_logs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("live-logs")


@pytest.fixture(scope="session")
def live_web(live_env, live_logs):
    """A real uvicorn serving the app. It has no private key: it cannot open write secrets."""
    from demo.processes import start_web

    proc, url = start_web(live_env, live_logs)
    yield url
    proc.stop()


@pytest.fixture(scope="session")
def live_worker(live_env, live_logs, worker_keys):
    """A real Celery worker process, the only holder of the private key."""
    from config.celery import app
    from demo.processes import start_worker

    # Messages left by an earlier, interrupted run name plans that no longer exist;
    # they would be harmless, but a clean queue keeps the logs readable.
    app.control.purge()

    env = {**live_env, "COUNTERSIGN_WORKER_KEY_FILE": worker_keys["private_file"]}
    proc = start_worker(env, live_logs)
    yield proc
    proc.stop()


@pytest.fixture
def live(transactional_db, live_web, live_worker, catalog):
    """Everything running for real. Data is committed so the other processes see it."""
    return {"url": live_web, "worker": live_worker}


# --- the canary: no secret, auth header, internal URL or stack trace in any response -----
#
# Every response of Countersign's own that the suite sees -- django.test.Client and
# AsyncClient, and httpx requests to the live web server -- is checked. Django admin pages
# (/admin/) exist to show admins connector addresses (and an agent's token once), so
# there only the upstream tokens and stack traces are looked for: a secret typed into the
# admin must never come back, not even to the admin. Upstream responses (the demo upstream
# answers with its own URLs) are not Countersign's and are not checked.


class CanaryLeak(AssertionError):
    """A response carried something no response may carry."""


# A bearer credential in a header or a serialized header map; placeholders such as
# "Bearer <agent token>" in help texts and "[redacted]" are not credentials.
_BEARER = re.compile(r"authorization[\"']?\s*[:=]\s*[\"']?bearer\s+(?!<|&lt;|\[)\S{6,}", re.I)


def known_secrets(tokens=()) -> list[tuple[str, str]]:
    """(value, what) for every secret a test may hold; ``tokens`` are issued access tokens."""
    return [
        (READ_TOKEN, "the upstream read token"),
        (WRITE_TOKEN, "the upstream write token"),
        (OAUTH_CLIENT_SECRET, "the OAuth2 client secret"),
        (OIDC_CLIENT_SECRET, "the OpenID Connect client secret"),
        *((token, "an OAuth2 access token") for token in tokens),
    ]


def secrets_in(text: str, tokens=()) -> list[str]:
    return [what for secret, what in known_secrets(tokens) if secret in text]


def log_leaks(text: str, tokens=()) -> list[str]:
    """What a process's log leaks: each JSON line is read as JSON (a value escaped in it
    is compared as written), every other line as it is."""
    found: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        decoded = line
        if line.startswith("{"):
            try:
                decoded = " ".join(str(v) for v in json.loads(line).values())
            except ValueError:
                found.append(f"line {number}: not one JSON object")
        found += [f"line {number}: {what}" for what in secrets_in(decoded + line, tokens)]
    return found


def canary_leaks(url: str, headers, body, *, internal_urls=(), tokens=()) -> list[str]:
    """What the response to ``url`` leaks (empty if nothing)."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    text = "\n".join(f"{name}: {value}" for name, value in headers) + "\n" + (body or "")
    found = secrets_in(text, tokens)
    if "Traceback (most recent call last)" in text:
        found.append("a Python stack trace")
    if not urlsplit(url).path.startswith("/admin/"):
        if _BEARER.search(text):
            found.append("an Authorization: Bearer credential")
        for base in internal_urls:
            if urlsplit(base).netloc in text:
                found.append(f"the upstream's address {base}")
    return found


def canary_check(url: str, headers, body, *, internal_urls=(), tokens=()) -> None:
    found = canary_leaks(url, headers, body, internal_urls=internal_urls, tokens=tokens)
    if found:
        raise CanaryLeak(f"the response to {url} leaks {', '.join(found)}")


@dataclass
class Canary:
    internal_urls: set[str] = field(default_factory=set)  # addresses no response may show
    ours: set[str] = field(default_factory=set)  # base URLs of Countersign's live servers
    leaks: list[str] = field(default_factory=list)
    upstream: object = None  # the demo upstream, when the test uses it (its access tokens)

    def tokens(self) -> list[str]:
        return self.upstream.issued_tokens() if self.upstream is not None else []

    def check(self, url: str, headers, body) -> None:
        try:
            canary_check(url, headers, body, internal_urls=self.internal_urls, tokens=self.tokens())
        except CanaryLeak as exc:
            self.leaks.append(str(exc))  # reported at teardown even if the test swallowed it
            raise


class CanaryLogHandler(logging.Handler):
    """Sees every log record emitted during a test (the root logger is at DEBUG meanwhile)
    and notes any that carries a secret: no log line may, at any level."""

    def __init__(self, canary: Canary) -> None:
        super().__init__(level=logging.DEBUG)
        self.canary = canary
        self.records = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.records += 1
        try:
            text = record.getMessage()
        except Exception:  # a malformed record is the logger's bug, not a leak
            text = str(record.msg)
        if record.exc_info and not record.exc_text:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        elif record.exc_text:
            text += "\n" + record.exc_text
        if record.stack_info:
            text += "\n" + record.stack_info
        found = secrets_in(text, self.canary.tokens())
        if found:
            self.canary.leaks.append(
                f"a {record.levelname} log record of {record.name} carries {', '.join(found)}"
            )


@pytest.fixture(autouse=True)
def _log_context():
    """Each test starts with nothing bound for its log lines (a service called in one
    test binds its plan for the rest of the thread, as it does for a request)."""
    from actions.lib import logcontext

    token = logcontext.replace({})
    yield
    logcontext.reset(token)


@pytest.fixture(autouse=True)
def canary(request, monkeypatch):
    import httpx
    from django.test.client import AsyncClient, Client

    canary = Canary()
    # Only servers this test uses anyway (getfixturevalue starts nothing new).
    if "upstream_server" in request.fixturenames:
        canary.upstream = request.getfixturevalue("upstream_server")
        canary.internal_urls.add(canary.upstream.url)
    if "live_web" in request.fixturenames:
        canary.ours.add(request.getfixturevalue("live_web"))

    def check_django(response) -> None:
        environ = response.request
        url = "http://testserver" + environ.get("PATH_INFO", "")
        if environ.get("QUERY_STRING"):
            url += "?" + environ["QUERY_STRING"]
        body = b"" if response.streaming else response.content
        canary.check(url, response.items(), body)

    client_request, async_client_request = Client.request, AsyncClient.request

    def request_checked(self, **kwargs):
        response = client_request(self, **kwargs)
        check_django(response)
        return response

    async def async_request_checked(self, **kwargs):
        response = await async_client_request(self, **kwargs)
        check_django(response)
        return response

    send = httpx.Client.send

    def send_checked(self, request, *args, **kwargs):
        response = send(self, request, *args, **kwargs)
        url = str(request.url)
        if any(url.startswith(base) for base in canary.ours):
            streamed = kwargs.get("stream", False) and not response.is_closed
            canary.check(url, response.headers.multi_items(), b"" if streamed else response.content)
        return response

    monkeypatch.setattr(Client, "request", request_checked)
    monkeypatch.setattr(AsyncClient, "request", async_request_checked)
    monkeypatch.setattr(httpx.Client, "send", send_checked)
    # Every record reaches the canary; the handlers already there (the console) keep
    # printing only what they printed before.
    root = logging.getLogger()
    handler = CanaryLogHandler(canary)
    old_level = root.level
    quieted = [(h, h.level) for h in root.handlers if h.level < old_level]
    for other, _ in quieted:
        other.setLevel(old_level)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield canary
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        for other, level in quieted:
            other.setLevel(level)
    if canary.leaks:
        pytest.fail("canary: " + "; ".join(canary.leaks), pytrace=False)
