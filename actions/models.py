"""The catalog: connectors (upstream systems), their credentials, actions, and agents."""

from __future__ import annotations

import uuid
from functools import cached_property

from django.conf import settings
from django.db import connection, models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .cache import cached, fresh
from .lib.canonical import digest
from .spec import ActionSpec


class ConsequenceClass(models.TextChoices):
    OBSERVATION = "observation", _("Observation")
    REVERSIBLE = "reversible", _("Reversible change")
    EXTERNAL = "external", _("External commitment")
    IRREVERSIBLE = "irreversible", _("Irreversible or broad change")


class ChangeKind(models.TextChoices):
    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    DELETE = "delete"
    INVOKE = "invoke"
    READ = "read"  # an observation: one GET, only its declared fields returned


class Connector(models.Model):
    """One upstream system. Outbound requests may only go to its base URL's host.

    ``kind`` names the connector kind that speaks to it (actions/connectors/registry.py):
    ``http`` (the default) or ``mcp``, an MCP server. An MCP server is described by
    ``server``: ``{"transport": "stdio", "command", "args", "env", "cwd"}`` or
    ``{"transport": "http", "url", "headers"}`` (nothing in it is secret; credentials are
    Credential rows). Its ``base_url`` is then its address: the URL, or for a stdio server
    ``stdio:`` and a hash of how it is started, so a plan bound to one server can never be
    carried out by another (executors/claims.py compares it)."""

    class Kind(models.TextChoices):
        HTTP = "http", "HTTP API"
        MCP = "mcp", "MCP server"

    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(
        max_length=16, choices=Kind.choices, default=Kind.HTTP, db_default=Kind.HTTP
    )
    base_url = models.CharField(max_length=500)
    server = models.JSONField(default=dict, db_default={}, blank=True)
    connect_timeout = models.FloatField(default=3.0)
    read_timeout = models.FloatField(default=10.0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def credential(self, role: str) -> Credential | None:
        """The newest usable credential for a role (revoked and expired ones excluded)."""
        # The unrevoked ones, newest first, as of the catalog generation; expiry is a
        # matter of time, so it is checked here, on every call.
        candidates = cached(
            "credentials",
            (self.pk, role),
            lambda: list(
                self.credentials.filter(role=role, revoked_at__isnull=True).order_by("-created_at")
            ),
        )
        now = timezone.now()
        for credential in candidates:
            if credential.expires_at is None or credential.expires_at > now:
                return fresh(credential)
        return None


class ToolPin(models.Model):
    """One MCP tool's definition as a person confirmed it, and as the server last served it.

    A tool is its name, description, input and output schemas and annotations; ``digest``
    is the SHA-256 of their canonical JSON (actions/connectors/mcp/pins.py). Plans carry
    the digest of every tool they use; submission and the worker refuse a plan whose tool
    the server now describes differently (a "rug pull": a description or schema changed
    after approval) until a person reviews ``seen_definition`` and confirms it."""

    connector = models.ForeignKey(Connector, on_delete=models.CASCADE, related_name="tool_pins")
    tool = models.CharField(max_length=128)
    # As confirmed; empty until a person confirms it.
    definition = models.JSONField(null=True, blank=True)
    digest = models.CharField(max_length=64, blank=True)
    confirmed_by = models.CharField(max_length=150, blank=True)
    confirmed_at = models.DateTimeField(null=True, blank=True)
    # As the server served it when it last differed from the confirmed one (or at import).
    seen_definition = models.JSONField(null=True, blank=True)
    seen_digest = models.CharField(max_length=64, blank=True)
    seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["connector", "tool"]
        constraints = [
            models.UniqueConstraint(fields=["connector", "tool"], name="tool_pin_once"),
        ]

    def __str__(self) -> str:
        return f"{self.connector.name}: {self.tool}"

    @property
    def drifted(self) -> bool:
        """The server serves a definition other than the confirmed one."""
        return bool(self.seen_digest) and self.seen_digest != self.digest


class Credential(models.Model):
    """A secret for one connector and one role, encrypted at rest.

    Read secrets are encrypted with the shared MultiFernet keys; write secrets are
    sealed to the worker's public key, so the web process that stores them cannot open
    them. The plaintext carries the credential's id: a ciphertext copied onto another
    row does not open there.
    """

    class Role(models.TextChoices):
        READ = "read"
        WRITE = "write"

    class Scheme(models.TextChoices):
        BEARER = "bearer", "Bearer token"
        HEADER = "header", "API key header"
        BASIC = "basic", "HTTP basic"
        # The secret is a client id and secret; the process that presents the credential
        # (worker for write, reader for read) exchanges it at ``token_url`` for a
        # short-lived access token, kept in that process's memory only (actions/oauth.py).
        OAUTH2 = "oauth2", "OAuth2 client credentials"
        # An MCP server started over stdio: the secret is environment variables,
        # {"env": {"NAME": "value"}}, given to the server process of the credential's role.
        ENV = "env", "Environment variables (MCP stdio server)"

    class ClientAuth(models.TextChoices):
        BASIC = "basic", "HTTP Basic (client_secret_basic)"
        BODY = "body", "Form body (client_secret_post)"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    connector = models.ForeignKey(Connector, on_delete=models.CASCADE, related_name="credentials")
    role = models.CharField(max_length=8, choices=Role.choices)
    scheme = models.CharField(max_length=8, choices=Scheme.choices, default=Scheme.BEARER)
    header_name = models.CharField(max_length=100, blank=True)
    # OAuth2 client credentials only; none of these is secret. ``token_url`` is a path on
    # the connector's origin, or an absolute URL on that origin or on one listed in
    # COUNTERSIGN_OAUTH_TOKEN_ORIGINS.
    token_url = models.CharField(max_length=500, blank=True)
    scope = models.CharField(max_length=500, blank=True)
    audience = models.CharField(max_length=500, blank=True)
    client_auth = models.CharField(
        max_length=8, choices=ClientAuth.choices, default=ClientAuth.BASIC
    )
    ciphertext = models.BinaryField(editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Set when an upstream refused this credential (401/403): an admin should look.
    flagged_at = models.DateTimeField(null=True, blank=True)
    flag_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(role__in=["read", "write"]), name="credential_role_valid"
            ),
        ]
        indexes = [
            # Connector.credential(): newest live credential for (connector, role).
            models.Index(fields=["connector", "role", "-created_at"], name="credential_lookup"),
        ]

    def __str__(self) -> str:
        return f"{self.connector.name} {self.role} credential"


class Action(models.Model):
    """One narrowly scoped thing an agent may ask for.

    ``definition`` is the catalog entry as loaded; ``version`` increases and
    ``digest`` changes whenever it changes, and both go into every plan's fingerprint,
    so a plan previewed under an old definition can never run under a new one. Every
    version is kept in ActionVersion with who made it.
    """

    class Source(models.TextChoices):
        CATALOG = "catalog", "Catalog file"
        OPENAPI = "openapi", "OpenAPI import"
        ADMIN = "admin", "Admin"
        MCP = "mcp", "MCP import"

    name = models.SlugField(max_length=100, unique=True)
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    connector = models.ForeignKey(Connector, on_delete=models.PROTECT, related_name="actions")
    kind = models.CharField(max_length=10, choices=ChangeKind.choices)
    consequence_class = models.CharField(max_length=16, choices=ConsequenceClass.choices)
    definition = models.JSONField()
    version = models.PositiveIntegerField(default=1)
    digest = models.CharField(max_length=64)
    enabled = models.BooleanField(default=True)
    # Where the definition came from; imported ones need a person's review before use.
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.CATALOG)
    # False until a person confirms the consequence class (imported actions).
    class_confirmed = models.BooleanField(default=True)
    # Warnings found when the action was defined or imported: [{"pointer", "message"}].
    lint = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            # An action nobody has classified cannot be enabled, whatever writes the row.
            models.CheckConstraint(
                condition=Q(enabled=False) | Q(class_confirmed=True),
                name="action_enabled_needs_confirmed_class",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=ChangeKind.values), name="action_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(consequence_class__in=ConsequenceClass.values),
                name="action_consequence_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @cached_property
    def spec(self) -> ActionSpec:
        return ActionSpec.from_definition(self.name, self.definition)

    def definition_intact(self) -> bool:
        """Is ``definition`` still the one ``digest`` was computed from? Plans bind the
        digest; a row edited in place (not through load_catalog) must not pass for it."""
        return digest(self.definition) == self.digest


def action_by_id(action_id: int) -> Action:
    """An action with its connector, from the catalog cache (actions/cache.py); a copy
    the caller may modify. Raises Action.DoesNotExist."""

    def load() -> Action | None:
        action = Action.objects.select_related("connector").filter(pk=action_id).first()
        if action is not None:
            action.spec  # noqa: B018 - parsed once and kept with the cached action
        return action

    action = cached("action_by_id", action_id, load)
    if action is None:
        raise Action.DoesNotExist(f"no action {action_id}")
    return fresh(action)


class ActionVersion(models.Model):
    """One definition an action had, kept so reviewers and auditors can see what changed."""

    action = models.ForeignKey(Action, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    definition = models.JSONField()
    digest = models.CharField(max_length=64)
    changed_by = models.CharField(max_length=150, blank=True)
    changed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["action", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["action", "version"], name="action_version_once"),
        ]

    def __str__(self) -> str:
        return f"{self.action.name} v{self.version}"


class Agent(models.Model):
    """An AI agent that may propose plans for a set of actions.

    Only a SHA-256 of its bearer token is stored: tokens are 256-bit random values, so
    a fast hash is enough and lets every request be looked up by an indexed equality.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.SlugField(max_length=100, unique=True)
    token_prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)
    actions = models.ManyToManyField(Action, related_name="agents", blank=True)
    # New agents start inactive: a person activates them (admin, or create_agent --activate).
    is_active = models.BooleanField(default=False)
    # A token past this time no longer authenticates; None = no expiry.
    expires_at = models.DateTimeField(null=True, blank=True)
    # Set by `manage.py revoke_agent`: the token never authenticates again.
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Facts about the agent that scope rules compare with the target, e.g.
    # {"workspace": "ws-blue"} for a rule {pointer: /workspace, equals_agent: workspace}.
    attributes = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AgentScope(models.Model):
    """An allow-list: for ``action``, this agent may only use these values of ``field``.

    With no AgentScope rows for an action, the action's own scope rules still apply;
    with rows, an input whose field value is not listed is refused before review.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="scopes")
    action = models.ForeignKey(Action, on_delete=models.CASCADE, related_name="agent_scopes")
    field = models.CharField(max_length=100)
    values = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "action", "field"], name="agent_scope_once_per_field"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent.name}: {self.action.name}.{self.field} in {self.values}"


class VaultState(models.Model):
    """The vault lock: one row (id 1) every web and worker process reads.

    While ``locked`` is true the executor refuses every execution, checked when a plan
    is claimed and once more right before the write leaves. Kept in the database, not in
    settings or a cache, so every process on every machine sees the same switch.
    """

    SINGLETON_ID = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=SINGLETON_ID, editable=False)
    locked = models.BooleanField(default=False)
    changed_at = models.DateTimeField(null=True, blank=True)
    changed_by = models.CharField(max_length=150, blank=True)
    reason = models.CharField(max_length=500, blank=True)

    class Meta:
        verbose_name = "vault state"
        verbose_name_plural = "vault state"
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="vault_state_singleton"),
        ]

    def __str__(self) -> str:
        return "vault locked" if self.locked else "vault unlocked"

    @classmethod
    def is_locked(cls) -> bool:
        """One primary-key read (plain SQL: it runs twice per execution); no row yet
        means never locked. Never cached: the lock must stop the very next send."""
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT locked FROM {cls._meta.db_table} WHERE id = %s", [cls.SINGLETON_ID]
            )
            row = cursor.fetchone()
        return bool(row and row[0])


class CatalogState(models.Model):
    """One row whose ``generation`` changes, by database trigger, on every write to a
    table the hot paths look up (connectors, credentials, actions, agents but for their
    last-use time, agents' actions and allow-lists, notification targets). Processes
    keep those lookups in memory per generation (actions/cache.py)."""

    SINGLETON_ID = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=SINGLETON_ID, editable=False)
    generation = models.CharField(max_length=64)

    class Meta:
        verbose_name = "catalog state"
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="catalog_state_singleton"),
        ]

    def __str__(self) -> str:
        return f"catalog generation {self.generation}"


class DecisionRule(models.Model):
    """One named rule of the catalog's ``reviewers:`` section: which plans it matches and
    the requirement it gives them (actions/policy/reviewers.py). Loaded with the catalog,
    replaced as a whole section, read in ``position`` order."""

    name = models.CharField(max_length=64, unique=True)
    position = models.PositiveIntegerField()
    definition = models.JSONField()
    digest = models.CharField(max_length=64)
    updated_by = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["position", "name"]

    def __str__(self) -> str:
        return self.name


class PolicyVersion(models.Model):
    """One version of the policy set (the catalog's ``policies:`` section): the Cedar text
    of its two parts as loaded, the hash that names it, who made it and the diff from the
    version before. The newest is the set in force (actions/policy/versions.py); rows are
    only ever added, by loading a catalog file."""

    number = models.PositiveIntegerField(unique=True)
    enforce = models.TextField(blank=True)
    shadow = models.TextField(blank=True)
    # SHA-256 of the canonical JSON of both texts (actions/policy/sources.py: set_hash).
    hash = models.CharField(max_length=64)
    # The policy ids of each part, for the admin's list: {"enforce": [...], "shadow": [...]}.
    policies = models.JSONField(default=dict, blank=True)
    # A unified diff from the previous version's text, cut at a bound (versions.py).
    diff = models.TextField(blank=True)
    created_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-number"]

    def __str__(self) -> str:
        return f"policy set v{self.number} ({self.hash[:12]})"
