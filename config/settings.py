"""Countersign settings, read from the environment through small helpers.

Two run modes share this file:

* **embedded** (the default): SQLite under ``var/`` and a Celery broker that needs no
  server (kombu's filesystem transport). Keys are generated on first use and kept
  under ``var/`` so a newcomer needs nothing but Python.
* **production** (``COUNTERSIGN_ENV=production``): ``DATABASE_URL`` points at
  PostgreSQL, ``CELERY_BROKER_URL`` at Redis, and every secret must come from the
  environment; nothing is generated.

Only the worker is ever given ``COUNTERSIGN_WORKER_KEY_FILE`` (the private key that
opens write credentials). Web processes get the public key only.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("COUNTERSIGN_VAR_DIR", BASE_DIR / "var"))


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from exc


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return float(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}") from exc


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return list(default or [])
    return [item.strip() for item in value.split(",") if item.strip()]


COUNTERSIGN_ENV = env_str("COUNTERSIGN_ENV", "embedded")
if COUNTERSIGN_ENV not in {"embedded", "production", "test"}:
    raise ImproperlyConfigured("COUNTERSIGN_ENV must be one of: embedded, production, test")
PRODUCTION = COUNTERSIGN_ENV == "production"


def _generated_secret(filename: str, make) -> str:
    """Read a locally generated secret from var/, creating it on first use.

    Only for embedded and test runs: production must be given its secrets.
    """
    path = VAR_DIR / filename
    if path.exists():
        return path.read_text().strip()
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    value = make()
    # O_EXCL: two processes starting at once must not write two different keys.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as fh:
        fh.write(value)
    return value


def _required_or_generated(name: str, filename: str, make) -> str:
    value = env_str(name)
    if value:
        return value
    if PRODUCTION:
        raise ImproperlyConfigured(f"{name} must be set when COUNTERSIGN_ENV=production")
    return _generated_secret(filename, make)


def _fernet_key() -> str:
    return Fernet.generate_key().decode()


SECRET_KEY = _required_or_generated(
    "COUNTERSIGN_SECRET_KEY", "secret_key", lambda: secrets.token_urlsafe(50)
)
DEBUG = env_bool("COUNTERSIGN_DEBUG", default=False)
ALLOWED_HOSTS = env_list("COUNTERSIGN_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("COUNTERSIGN_CSRF_TRUSTED_ORIGINS")
# The absolute address reviewers use; plans carry review URLs built on it. In embedded
# mode `make run` records the address it serves in var/public_url, so a process it did
# not start (the stdio MCP server a desktop client launches) links to the same place.
_RECORDED_URL = VAR_DIR / "public_url"
PUBLIC_URL = env_str(
    "COUNTERSIGN_PUBLIC_URL",
    _RECORDED_URL.read_text().strip()
    if COUNTERSIGN_ENV == "embedded" and _RECORDED_URL.is_file()
    else "http://127.0.0.1:8000",
).rstrip("/")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "mozilla_django_oidc",
    "ninja",
    # The lowest layer (the audit trail's table lives there); see actions/lib/__init__.py.
    "actions.lib",
    "actions",
    "approvals",
    "executors",
]

MIDDLEWARE = [
    # First: what a request's log lines are about starts empty (actions/lib/logcontext.py).
    "actions.lib.logcontext.RequestContextMiddleware",
    # Error pages under /api/ (an unknown path, a wrong method) as problem documents.
    "approvals.api.errors.ApiProblemsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # After sessions (it reads the language a reviewer chose), before common (which may
    # redirect, and should do so in that language).
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def database_from_url(url: str) -> dict:
    """Translate ``postgres://user:pass@host:port/name`` or ``sqlite:///path``."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        name = unquote(parts.path[1:] if parts.path.startswith("//") else parts.path[1:])
        if not name:
            raise ImproperlyConfigured("DATABASE_URL sqlite:/// needs a file path")
        path = Path(name)
        if not path.is_absolute():
            path = BASE_DIR / path
        path.parent.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(path),
            # Several processes (web, worker) share the file: wait for locks instead of
            # failing at once, and start write transactions eagerly to avoid upgrade
            # deadlocks.
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL;",
            },
        }
    if parts.scheme in {"postgres", "postgresql", "pgsql"}:
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        options: dict = {}
        if "sslmode" in query:
            options["sslmode"] = query["sslmode"]
        # How the connections are named in pg_stat_activity (one name per role, say).
        if "application_name" in query:
            options["application_name"] = query["application_name"][:63]
        # A connection pool per process (psycopg_pool, through Django): the web
        # processes' setting (config/asgi.py), where each request runs on a thread of its
        # own and a persistent connection could not be reused. A request borrows a
        # connection at its first query and gives it back when it finishes (Django
        # closes it at the end of every request); the pool checks it before lending it
        # (CONN_HEALTH_CHECKS) and rolls back anything left open when it comes back.
        pool_size = env_int("COUNTERSIGN_DB_POOL_SIZE", 0)
        if pool_size > 0:
            options["pool"] = {
                "min_size": min(2, pool_size),
                "max_size": pool_size,
                # A request waits this long for a free connection, then fails.
                "timeout": env_int("COUNTERSIGN_DB_POOL_TIMEOUT", 10),
                "name": "countersign-web",
            }
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")) or "countersign",
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            # Pooled connections go back to the pool after each request instead.
            "CONN_MAX_AGE": 0 if pool_size > 0 else env_int("COUNTERSIGN_DB_CONN_MAX_AGE", 60),
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": options,
        }
    raise ImproperlyConfigured(f"unsupported DATABASE_URL scheme {parts.scheme!r}")


DATABASES = {
    "default": database_from_url(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'countersign.sqlite3'}")
    )
}
if COUNTERSIGN_ENV == "test":
    # One test database per test run, so two runs on one machine never drop each
    # other's database; tests/conftest.py removes those left by runs that died.
    DATABASES["default"]["TEST"] = {
        "NAME": f"test_{DATABASES['default']['NAME']}_{os.getpid()}"
        if DATABASES["default"]["ENGINE"].endswith("postgresql")
        else None
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
if COUNTERSIGN_ENV == "test":
    # Tests create many users; a slow hash buys nothing there.
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "approvals:queue"
LOGOUT_REDIRECT_URL = "login"

# --- Single sign-on (OpenID Connect; approvals/identity/oidc.py) -----------------------
# Configured when an issuer and a client id are set. The endpoints are the ones the
# issuer's /.well-known/openid-configuration lists (reading it here would be network
# I/O at import time; they are copied from it once instead). Authorization code flow with PKCE,
# state and nonce; ID tokens checked for signature, issuer, audience, expiry and nonce.
COUNTERSIGN_OIDC_ISSUER = env_str("COUNTERSIGN_OIDC_ISSUER")  # exactly as in its tokens
OIDC_RP_CLIENT_ID = env_str("COUNTERSIGN_OIDC_CLIENT_ID")
OIDC_RP_CLIENT_SECRET = env_str("COUNTERSIGN_OIDC_CLIENT_SECRET")
COUNTERSIGN_OIDC = bool(COUNTERSIGN_OIDC_ISSUER and OIDC_RP_CLIENT_ID)
COUNTERSIGN_OIDC_NAME = env_str("COUNTERSIGN_OIDC_NAME", "your identity provider")
OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("COUNTERSIGN_OIDC_AUTHORIZATION_ENDPOINT")
OIDC_OP_TOKEN_ENDPOINT = env_str("COUNTERSIGN_OIDC_TOKEN_ENDPOINT")
OIDC_OP_USER_ENDPOINT = env_str("COUNTERSIGN_OIDC_USERINFO_ENDPOINT")
OIDC_OP_JWKS_ENDPOINT = env_str("COUNTERSIGN_OIDC_JWKS_ENDPOINT")
if COUNTERSIGN_OIDC and not all(
    (
        OIDC_OP_AUTHORIZATION_ENDPOINT,
        OIDC_OP_TOKEN_ENDPOINT,
        OIDC_OP_USER_ENDPOINT,
        OIDC_OP_JWKS_ENDPOINT,
    )
):
    raise ImproperlyConfigured(
        "single sign-on needs COUNTERSIGN_OIDC_AUTHORIZATION_ENDPOINT, _TOKEN_ENDPOINT, "
        "_USERINFO_ENDPOINT and _JWKS_ENDPOINT (from the issuer's openid-configuration)"
    )
# Empty: the provider has no RP-initiated logout; sign-out then ends the local session only.
COUNTERSIGN_OIDC_END_SESSION_ENDPOINT = env_str("COUNTERSIGN_OIDC_END_SESSION_ENDPOINT")
OIDC_RP_SIGN_ALGO = env_str("COUNTERSIGN_OIDC_SIGN_ALGO", "RS256")
# Unset: openid email profile, and groups unless the provider's discovery document lists
# scopes without it (a provider that offers no groups scope refuses a request for one);
# set: exactly these (approvals/identity/oidc.py, requested_scopes).
COUNTERSIGN_OIDC_SCOPES = " ".join(env_str("COUNTERSIGN_OIDC_SCOPES").split())
OIDC_RP_SCOPES = COUNTERSIGN_OIDC_SCOPES or "openid email profile"
OIDC_USE_PKCE = True
OIDC_USE_NONCE = True
# client_secret_basic, the default method of OpenID Connect; 0 sends it in the form body.
OIDC_TOKEN_USE_BASIC_AUTH = env_bool("COUNTERSIGN_OIDC_TOKEN_BASIC_AUTH", True)
OIDC_STORE_ID_TOKEN = True  # the hint RP-initiated logout sends back to the provider
OIDC_TIMEOUT = env_float("COUNTERSIGN_OIDC_TIMEOUT", 5.0)
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc-callback"
OIDC_OP_LOGOUT_URL_METHOD = "approvals.identity.oidc.provider_logout_url"
# The claim that lists a person's groups, and the values of it that make them a
# reviewer (members of the reviewers group); anyone else signs in with no permission.
COUNTERSIGN_OIDC_GROUPS_CLAIM = env_str("COUNTERSIGN_OIDC_GROUPS_CLAIM", "groups")
COUNTERSIGN_OIDC_REVIEWER_GROUPS = env_list("COUNTERSIGN_OIDC_REVIEWER_GROUPS", ["reviewers"])
# Local passwords: on by default in embedded mode (and tests); in production, off by
# default once single sign-on is configured.
COUNTERSIGN_LOCAL_LOGIN = env_bool(
    "COUNTERSIGN_LOCAL_LOGIN", default=not (PRODUCTION and COUNTERSIGN_OIDC)
)
AUTHENTICATION_BACKENDS = [
    *(["approvals.identity.oidc.ReviewerOIDCBackend"] if COUNTERSIGN_OIDC else []),
    *(
        [
            "approvals.identity.permissions.PermissionsRead",
            "django.contrib.auth.backends.ModelBackend",
        ]
        if COUNTERSIGN_LOCAL_LOGIN
        else []
    ),
]
if not AUTHENTICATION_BACKENDS:
    raise ImproperlyConfigured(
        "nobody could sign in: configure COUNTERSIGN_OIDC_ISSUER and "
        "COUNTERSIGN_OIDC_CLIENT_ID, or set COUNTERSIGN_LOCAL_LOGIN=1"
    )

# --- Passkeys and signed approvals (WebAuthn; approvals/identity/passkeys.py) ----------
# The relying party is this site: its host name (an IP address cannot be one; browsers
# refuse it, so embedded mode's 127.0.0.1 becomes localhost) and the origins reviewers
# use. The worker checks stored assertions against these too: give it the same values.
_public = urlsplit(PUBLIC_URL)
COUNTERSIGN_WEBAUTHN_RP_ID = env_str(
    "COUNTERSIGN_WEBAUTHN_RP_ID",
    "localhost"
    if (_public.hostname or "").replace(".", "").isdigit() or _public.hostname == "::1"
    else (_public.hostname or "localhost"),
)
COUNTERSIGN_WEBAUTHN_ORIGINS = env_list(
    "COUNTERSIGN_WEBAUTHN_ORIGINS",
    [PUBLIC_URL.replace(f"//{_public.hostname}", f"//{COUNTERSIGN_WEBAUTHN_RP_ID}", 1)],
)
# Consequence classes whose approvals must be signed with a passkey unless an action
# says otherwise (`approval: {signed: ...}`). Production: irreversible; embedded mode
# and tests: none by default, so the demo loop works before anyone registers a passkey.
COUNTERSIGN_SIGNED_APPROVAL_CLASSES = env_list(
    "COUNTERSIGN_SIGNED_APPROVAL_CLASSES", ["irreversible"] if PRODUCTION else []
)

# Reviewer pages speak the reviewer's language (Accept-Language, or the switcher's
# cookie); the agent API and audit event kinds stay English: machines read them.
LANGUAGE_CODE = env_str("COUNTERSIGN_LANGUAGE", "en")
LANGUAGES = [("en", "English"), ("pt-br", "Português (Brasil)")]
LOCALE_PATHS = [BASE_DIR / "config" / "locale"]
TIME_ZONE = env_str("COUNTERSIGN_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"

# Agent request bodies are small JSON documents; anything larger is refused with 413.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("COUNTERSIGN_MAX_BODY_BYTES", 64 * 1024)

SESSION_COOKIE_HTTPONLY = True
# At most this long after sign-in, and ended when the browser closes.
SESSION_COOKIE_AGE = env_int("COUNTERSIGN_SESSION_SECONDS", 8 * 3600)
SESSION_EXPIRE_AT_BROWSER_CLOSE = True
# Failed sign-ins allowed per username and client address per window (see
# approvals/identity/login.py); counted in the cache below.
COUNTERSIGN_LOGIN_FAILURES = env_int("COUNTERSIGN_LOGIN_FAILURES", 5)
COUNTERSIGN_LOGIN_WINDOW_SECONDS = env_int("COUNTERSIGN_LOGIN_WINDOW_SECONDS", 15 * 60)
SESSION_COOKIE_SECURE = PRODUCTION
CSRF_COOKIE_SECURE = PRODUCTION
X_FRAME_OPTIONS = "DENY"
# Django 6's built-in CSP: scripts and styles from our own origin only, no inline
# scripts (htmx is vendored and loaded with src; hx-headers is an attribute).
SECURE_CSP = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "object-src": ["'none'"],
    "base-uri": ["'none'"],
    "frame-ancestors": ["'none'"],
    # Signing out also signs out at the identity provider: the form's redirect goes there.
    "form-action": ["'self'", *([COUNTERSIGN_OIDC_ISSUER] if COUNTERSIGN_OIDC else [])],
}
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if PRODUCTION:
    SECURE_SSL_REDIRECT = env_bool("COUNTERSIGN_SSL_REDIRECT", True)
    # Probes and scrapers talk to the processes directly, over plain HTTP on the host.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
    SECURE_HSTS_SECONDS = env_int("COUNTERSIGN_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# --- Credentials -------------------------------------------------------------------
# Read-role secrets: symmetric keys shared by web and worker (MultiFernet: the first
# key encrypts, all keys decrypt, so keys can rotate).
COUNTERSIGN_FERNET_KEYS = env_list("COUNTERSIGN_FERNET_KEYS") or [
    _required_or_generated("COUNTERSIGN_FERNET_KEY", "fernet.key", _fernet_key)
]
# Write-role secrets are sealed to the worker's public key (base64). Web processes can
# seal with it; only the process given COUNTERSIGN_WORKER_KEY_FILE can open them.
COUNTERSIGN_WORKER_PUBLIC_KEY = env_str("COUNTERSIGN_WORKER_PUBLIC_KEY") or (
    (VAR_DIR / "worker.pub").read_text().strip() if (VAR_DIR / "worker.pub").exists() else ""
)
COUNTERSIGN_WORKER_KEY_FILE = env_str("COUNTERSIGN_WORKER_KEY_FILE")
# The audit trail's checkpoints are signed (Ed25519) by the sealer, a worker task: only
# sealing workers get COUNTERSIGN_AUDIT_KEY_FILE; every process may verify with the public
# key (base64; several, comma-separated, while a key is replaced). actions/lib/checkpoints.py
COUNTERSIGN_AUDIT_KEY_FILE = env_str("COUNTERSIGN_AUDIT_KEY_FILE")
COUNTERSIGN_AUDIT_PUBLIC_KEY = env_str("COUNTERSIGN_AUDIT_PUBLIC_KEY") or (
    (VAR_DIR / "audit.pub").read_text().strip() if (VAR_DIR / "audit.pub").exists() else ""
)
# Each new checkpoint is also appended here (JSON lines), best on storage the database's
# owner cannot rewrite; `verify_audit --copy FILE` compares the database with it.
COUNTERSIGN_AUDIT_EXPORT_FILE = env_str("COUNTERSIGN_AUDIT_EXPORT_FILE")
# Optional: each new checkpoint is also POSTed here (JSON, signed by the checkpoint's own
# signature), by a task retried like notification webhooks (COUNTERSIGN_WEBHOOK_*).
COUNTERSIGN_AUDIT_WITNESS_URL = env_str("COUNTERSIGN_AUDIT_WITNESS_URL")
# Names the log in every signed checkpoint.
COUNTERSIGN_AUDIT_ORIGIN = env_str("COUNTERSIGN_AUDIT_ORIGIN", PUBLIC_URL)

# --- Behaviour ----------------------------------------------------------------------
# How long an agent's plan waits for a decision, and how long an approval stays usable.
COUNTERSIGN_PLAN_TTL_SECONDS = env_int("COUNTERSIGN_PLAN_TTL_SECONDS", 3600)
COUNTERSIGN_APPROVAL_TTL_SECONDS = env_int("COUNTERSIGN_APPROVAL_TTL_SECONDS", 900)
COUNTERSIGN_MAX_WAIT_SECONDS = 30
# Long-polls are woken by a message on this Redis pub/sub channel (approvals.wakeups).
# Without Redis (embedded mode), or while it is unreachable, each process reads the
# statuses of all plans being waited on in one query this often.
COUNTERSIGN_NOTIFY_CHANNEL = env_str("COUNTERSIGN_NOTIFY_CHANNEL", "countersign:plans")
COUNTERSIGN_WAIT_POLL_SECONDS = env_float("COUNTERSIGN_WAIT_POLL_SECONDS", 0.5)
# An open wait or stream (a long-poll, an MCP get_plan wait, a subscription) is cut this
# soon after its agent is revoked or deactivated: each process reads the catalog
# generation this often while any is open (approvals.wakeups.AgentWatcher).
COUNTERSIGN_AGENT_CHECK_SECONDS = env_float("COUNTERSIGN_AGENT_CHECK_SECONDS", 0.5)
# Woken long-polls answered at once per web process (each answer is a Django request
# with a thread and a database connection; the others queue as coroutines).
COUNTERSIGN_LONGPOLL_CONCURRENCY = env_int("COUNTERSIGN_LONGPOLL_CONCURRENCY", 16)
# Threads per web process that run Django's requests (config/asgi.py); each keeps its own
# database connection from request to request.
COUNTERSIGN_WEB_THREADS = env_int("COUNTERSIGN_WEB_THREADS", 16)
if COUNTERSIGN_WEB_THREADS < 1:
    raise ImproperlyConfigured("COUNTERSIGN_WEB_THREADS must be at least 1")
# Seconds a request may wait for one of those threads before it is answered 503.
COUNTERSIGN_WEB_QUEUE_TIMEOUT = env_float("COUNTERSIGN_WEB_QUEUE_TIMEOUT", 10.0)
if not COUNTERSIGN_WEB_QUEUE_TIMEOUT > 0:
    raise ImproperlyConfigured("COUNTERSIGN_WEB_QUEUE_TIMEOUT must be a positive number")
# Defaults per consequence class; an action's `approval` block may tighten or loosen
# them, except that session grants never cover external or irreversible actions.
COUNTERSIGN_APPROVAL_POLICY = {
    "observation": {
        "approvers": 1,
        "approval_ttl": COUNTERSIGN_APPROVAL_TTL_SECONDS,
        "session_grant": True,
    },
    "reversible": {
        "approvers": 1,
        "approval_ttl": COUNTERSIGN_APPROVAL_TTL_SECONDS,
        "session_grant": False,
    },
    "external": {
        "approvers": 1,
        "approval_ttl": min(600, COUNTERSIGN_APPROVAL_TTL_SECONDS),
        "session_grant": False,
    },
    "irreversible": {
        "approvers": 2,
        "approval_ttl": min(300, COUNTERSIGN_APPROVAL_TTL_SECONDS),
        "session_grant": False,
    },
}
# Separation of duties: may the person who registered an agent (Agent.created_by) be the
# only approver of that agent's irreversible plans? No by default.
COUNTERSIGN_CREATOR_MAY_APPROVE_IRREVERSIBLE = env_bool(
    "COUNTERSIGN_CREATOR_MAY_APPROVE_IRREVERSIBLE", False
)
# Plans an agent may submit (POST /api/v1/plans) per window, e.g. "60/minute"; empty
# disables. Counted in Redis (REDIS_URL) so every web process shares the count; without
# Redis (embedded mode) in Django's cache, which is per process.
COUNTERSIGN_RATE_LIMIT = env_str("COUNTERSIGN_RATE_LIMIT", "60/minute")
# The time zone of the time a policy sees (context.time: hour, minute, weekday), so that
# "on weekdays, 9 to 17" means the organisation's hours (docs/policy.md).
COUNTERSIGN_POLICY_TIMEZONE = env_str("COUNTERSIGN_POLICY_TIMEZONE", "UTC")
try:
    ZoneInfo(COUNTERSIGN_POLICY_TIMEZONE)
except (ZoneInfoNotFoundError, ValueError):
    raise ImproperlyConfigured(
        f"COUNTERSIGN_POLICY_TIMEZONE: {COUNTERSIGN_POLICY_TIMEZONE!r} is no IANA time zone"
    ) from None
# Idempotency-Key records for POST /plans are kept at least this long.
COUNTERSIGN_IDEMPOTENCY_TTL_SECONDS = env_int("COUNTERSIGN_IDEMPOTENCY_TTL_SECONDS", 86400)
# Upstream HTTP defaults (a connector may set its own, never above these caps).
COUNTERSIGN_HTTP_CONNECT_TIMEOUT = env_float("COUNTERSIGN_HTTP_CONNECT_TIMEOUT", 3.0)
COUNTERSIGN_HTTP_READ_TIMEOUT = env_float("COUNTERSIGN_HTTP_READ_TIMEOUT", 10.0)
COUNTERSIGN_HTTP_MAX_RESPONSE_BYTES = env_int("COUNTERSIGN_HTTP_MAX_RESPONSE_BYTES", 1024 * 1024)
# Upstream MCP servers (actions/connectors/mcp/sessions.py): each process keeps at most this
# many initialized sessions per connector and role; one JSON-RPC message (a stdio line, a
# JSON body, an SSE event) may be at most MAX_MESSAGE_BYTES and one tool result, as
# received, at most MAX_RESULT_BYTES.
COUNTERSIGN_MCP_SESSIONS_PER_SERVER = env_int("COUNTERSIGN_MCP_SESSIONS_PER_SERVER", 2)
COUNTERSIGN_MCP_MAX_MESSAGE_BYTES = env_int("COUNTERSIGN_MCP_MAX_MESSAGE_BYTES", 4 * 1024 * 1024)
COUNTERSIGN_MCP_MAX_RESULT_BYTES = env_int("COUNTERSIGN_MCP_MAX_RESULT_BYTES", 1024 * 1024)
# OAuth2 client-credentials credentials send their client secret to a token URL. It must be
# on the connector's own origin unless that URL's origin (scheme://host[:port]) is listed
# here, e.g. "https://login.example.com": a secret never goes to a host nobody named.
COUNTERSIGN_OAUTH_TOKEN_ORIGINS = env_list("COUNTERSIGN_OAUTH_TOKEN_ORIGINS")
# The sweeper re-enqueues approved work whose broker message was lost after this long.
COUNTERSIGN_SWEEP_SECONDS = env_float("COUNTERSIGN_SWEEP_SECONDS", 15.0)
COUNTERSIGN_REQUEUE_AFTER_SECONDS = env_float("COUNTERSIGN_REQUEUE_AFTER_SECONDS", 30.0)
# At most this many approved plans are published again per sweep, and never more than
# the broker queue can be missing (a backlog is not a lost message; executors/sweeper.py).
COUNTERSIGN_REQUEUE_BATCH = env_int("COUNTERSIGN_REQUEUE_BATCH", 200)
# An execution that has not finished this long after it was claimed is settled by the
# sweeper (its worker is presumed dead).
COUNTERSIGN_EXECUTION_LEASE_SECONDS = env_float("COUNTERSIGN_EXECUTION_LEASE_SECONDS", 120.0)
# A worker holding an upstream's answer while the database cannot be reached keeps it and
# tries to record it again, backing off, for at most this long (keep it under the lease);
# then the lease and a reconciliation settle the plan (executors/services.py).
COUNTERSIGN_RECORD_RETRY_SECONDS = env_float("COUNTERSIGN_RECORD_RETRY_SECONDS", 60.0)
# The longest a session grant may last (seconds); a longer one is refused when made.
COUNTERSIGN_GRANT_MAX_SECONDS = env_int("COUNTERSIGN_GRANT_MAX_SECONDS", 8 * 3600)
# Submissions a policy refused are kept this many days for backtests, then the sweeper
# deletes them (at most COUNTERSIGN_REFUSED_PURGE_BATCH a sweep; plans are not purged).
COUNTERSIGN_REFUSED_RETENTION_DAYS = env_int("COUNTERSIGN_REFUSED_RETENTION_DAYS", 90)
COUNTERSIGN_REFUSED_PURGE_BATCH = env_int("COUNTERSIGN_REFUSED_PURGE_BATCH", 5000)

# --- Notifications (plans awaiting a decision; see approvals.notifications) -------------
# Django's mailers: SMTP when COUNTERSIGN_EMAIL_HOST is set or in production (a local
# relay on localhost:25 by default); elsewhere the console (printed).
_email_host = env_str("COUNTERSIGN_EMAIL_HOST") or ("localhost" if PRODUCTION else "")
MAILERS = {
    "default": (
        {
            "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OPTIONS": {
                "host": _email_host,
                "port": env_int("COUNTERSIGN_EMAIL_PORT", 25),
                "username": env_str("COUNTERSIGN_EMAIL_HOST_USER"),
                "password": env_str("COUNTERSIGN_EMAIL_HOST_PASSWORD"),
                "use_tls": env_bool("COUNTERSIGN_EMAIL_USE_TLS", False),
                "timeout": env_int("COUNTERSIGN_EMAIL_TIMEOUT", 10),
            },
        }
        if _email_host
        else {"BACKEND": "django.core.mail.backends.console.EmailBackend"}
    )
}
DEFAULT_FROM_EMAIL = env_str("COUNTERSIGN_FROM_EMAIL", "countersign@localhost")
COUNTERSIGN_WEBHOOK_TIMEOUT = env_float("COUNTERSIGN_WEBHOOK_TIMEOUT", 5.0)
# Deliveries a failing webhook gets (the first plus retries, with growing delays).
COUNTERSIGN_WEBHOOK_MAX_TRIES = env_int("COUNTERSIGN_WEBHOOK_MAX_TRIES", 4)

# `make bench` only: the bench-only URLconf (bench/urls.py) adds the baseline endpoint of
# bench/baseline.py. Never in production, whatever the environment says.
COUNTERSIGN_BENCH = env_bool("COUNTERSIGN_BENCH", False) and not PRODUCTION
if COUNTERSIGN_BENCH:
    ROOT_URLCONF = "bench.urls"

# The sealer runs this often (in each worker holding the audit key), signs at most this
# many events per checkpoint, waits at most this long for transactions that may still
# commit a lower event number, and keeps its lease this long without renewing it.
COUNTERSIGN_SEAL_SECONDS = env_float("COUNTERSIGN_SEAL_SECONDS", 1.0)
COUNTERSIGN_SEAL_BATCH = env_int("COUNTERSIGN_SEAL_BATCH", 5000)
COUNTERSIGN_SEAL_WAIT_SECONDS = env_float("COUNTERSIGN_SEAL_WAIT_SECONDS", 2.0)
COUNTERSIGN_SEAL_LEASE_SECONDS = env_float("COUNTERSIGN_SEAL_LEASE_SECONDS", 30.0)

# --- Celery ---------------------------------------------------------------------------
# The database is the source of truth; a broker message is only a wake-up.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "broker"
    for _sub in ("queue", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "data_folder_processed": str(_broker_dir / "processed"),
        # Broadcast exchanges (worker remote control) would otherwise land in ./control.
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
else:
    # With acks_late a message unacknowledged for visibility_timeout is redelivered;
    # executions are short and duplicates are harmless (row claim), so one hour is fine.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_TASK_DEFAULT_QUEUE = env_str(
    "COUNTERSIGN_QUEUE",
    f"countersign-test-{os.getpid()}" if COUNTERSIGN_ENV == "test" else "countersign",
)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Celery's Django fix-up closes every database connection before and after each task
# unless this is set: a new PostgreSQL connection (5-13 ms measured) for every
# execution. Set, Celery closes them only every 2 x N tasks, and config/celery.py
# applies Django's own rule around each task instead (CONN_MAX_AGE, health checks,
# a connection that errored is dropped).
CELERY_DB_REUSE_MAX = 1000
CELERY_BEAT_SCHEDULE = {
    "sweep": {"task": "executors.sweep", "schedule": COUNTERSIGN_SWEEP_SECONDS},
    # The audit trail is sealed by the workers holding its key, from a thread of their
    # own (config/celery.py, Sealer), never queued behind executions.
}
# Where celery beat keeps its schedule (config/celery.py creates the directory when beat
# starts; a beat that cannot start is seen through the sweeper's heartbeat).
CELERY_BEAT_SCHEDULER = "config.celery:BeatScheduler"
CELERY_BEAT_SCHEDULE_FILENAME = env_str(
    "COUNTERSIGN_BEAT_SCHEDULE_FILE", str(VAR_DIR / "celerybeat-schedule")
)
# Every worker process notes it is alive this often (approvals.models.Heartbeat); the
# dashboard and the readiness check call a worker or the sweeper stale after 3 periods.
COUNTERSIGN_HEARTBEAT_SECONDS = env_float("COUNTERSIGN_HEARTBEAT_SECONDS", 15.0)

REDIS_URL = env_str("REDIS_URL", "")
# The cache holds login-failure counters: Redis when there is one (shared by every web
# process), local memory otherwise (embedded mode: one process, one machine).
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}
if COUNTERSIGN_ENV == "test":
    # Test runs on one machine share a Redis: keep their keys apart.
    CACHES["default"]["KEY_PREFIX"] = f"test-{os.getpid()}"

# One JSON object per line in production, plain text elsewhere; every line about a plan
# carries its id, correlation id, agent and action (actions/lib/logcontext.py).
COUNTERSIGN_LOG_FORMAT = env_str("COUNTERSIGN_LOG_FORMAT", "json" if PRODUCTION else "plain")
if COUNTERSIGN_LOG_FORMAT not in {"json", "plain"}:
    raise ImproperlyConfigured("COUNTERSIGN_LOG_FORMAT must be json or plain")
_LOG_LEVEL = env_str("COUNTERSIGN_LOG_LEVEL", "INFO")
_CELERY_RECEIVED_LINES = "DEBUG" if _LOG_LEVEL.upper() == "DEBUG" else "WARNING"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "context": {"()": "actions.lib.logcontext.ContextFilter"},
        # No authorization code, state or other credential from a query string.
        "access": {"()": "config.accesslog.AccessLogFilter"},
        # A database outage is one line, then a count, then one line when it clears; a
        # refused request one line, never a traceback (actions/lib/outage.py).
        "outage": {"()": "actions.lib.outage.OutageLogFilter"},
        "refusals": {"()": "actions.lib.outage.OneLineRefusals"},
    },
    "formatters": {
        "plain": {"()": "actions.lib.logcontext.PlainFormatter"},
        "json": {"()": "actions.lib.logcontext.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": COUNTERSIGN_LOG_FORMAT,
            "filters": ["refusals", "outage", "context"],
        }
    },
    "root": {"handlers": ["console"], "level": _LOG_LEVEL},
    "loggers": {
        # Celery's "Task … received" line, one per task, only when debugging
        # (COUNTERSIGN_LOG_LEVEL=DEBUG): the plan's own lines say what happened to it.
        # Its "Task … succeeded in …: <outcome>" line stays (celery.app.trace): it is the
        # only line with a task's outcome when the task found nothing to do
        # ('skipped:completed' for a duplicate wake-up), and failures are logged there.
        "celery.worker.strategy": {"level": _CELERY_RECEIVED_LINES},
        # httpx logs full URLs at INFO; upstream URLs are internal, keep them out.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        # uvicorn's own lines in the same format, through the same handler.
        "uvicorn": {"handlers": ["console"], "propagate": False},
        "uvicorn.error": {"handlers": [], "propagate": True},
        "uvicorn.access": {"handlers": ["console"], "filters": ["access"], "propagate": False},
    },
}

# --- Operations (approvals/ops/monitoring.py, docs/deployment.md) -----------------------
# GET /metrics: a bearer token (compared in constant time), or client addresses in these
# networks (CIDR), or both (either suffices). With neither, /metrics answers 404. In
# embedded mode and tests the loopback may scrape without a token.
COUNTERSIGN_METRICS_TOKEN = env_str("COUNTERSIGN_METRICS_TOKEN")
COUNTERSIGN_METRICS_ALLOW = env_list(
    "COUNTERSIGN_METRICS_ALLOW", [] if PRODUCTION else ["127.0.0.1/32", "::1/128"]
)
# GET /healthz and /readyz need no sign-in; requests per client address per window.
COUNTERSIGN_HEALTH_RATE_LIMIT = env_str("COUNTERSIGN_HEALTH_RATE_LIMIT", "120/minute")

NINJA_PAGINATION_PER_PAGE = 50
