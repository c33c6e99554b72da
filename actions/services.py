"""Catalog-side state changes: agents and credentials."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from .cache import cached, fresh
from .lib.actors import SYSTEM
from .lib.audit import audit_record
from .lib.exceptions import NotFound
from .models import Action, Agent, Connector, Credential, VaultState
from .tokens import new_token, token_hash
from .vault import VaultError, check_secret_shape, oauth_token_url, seal


def agent_create(
    *,
    name: str,
    action_names: list[str],
    created_by=None,
    actor: str = SYSTEM,
    active: bool = False,
    expires_at=None,
) -> tuple[Agent, str]:
    """Create an agent; returns it with its bearer token (the only time it exists in clear).

    The agent is inactive unless ``active``: an admin turns it on after checking what it
    may do (scripts and the demo pass ``active=True``)."""
    actions = list(Action.objects.filter(name__in=action_names))
    missing = sorted(set(action_names) - {a.name for a in actions})
    if missing:
        raise NotFound(f"unknown actions: {', '.join(missing)}")
    token, prefix, digest = new_token()
    with transaction.atomic():
        agent = Agent.objects.create(
            name=name,
            token_prefix=prefix,
            token_hash=digest,
            created_by=created_by,
            is_active=active,
            expires_at=expires_at,
        )
        agent.actions.set(actions)
        audit_record(
            kind="agent.created",
            actor=actor,
            data={
                "agent": name,
                "actions": sorted(a.name for a in actions),
                "token_prefix": prefix,
                "active": active,
                "expires_at": expires_at.isoformat() if expires_at else None,
            },
        )
    return agent, token


def agent_authenticate(token: str) -> Agent | None:
    """The active, unrevoked, unexpired agent holding ``token``, or None. Records when it
    was last used."""
    if not token or len(token) > 200:
        return None
    digest = token_hash(token)
    known = cached(
        "agent",
        digest,
        # With its registrar: the policies see who registered it (their name), at every
        # submission, without a query of its own.
        lambda: _usable_agents().select_related("created_by").filter(token_hash=digest).first(),
        keep_none=False,
    )
    now = timezone.now()
    # Expiry is a matter of time, not of a change: checked on every request.
    if known is None or (known.expires_at is not None and known.expires_at <= now):
        return None
    # Narrow, throttled write: at most once a minute per agent and process. It changes
    # no cached column (actions/migrations/0006), so it keeps the generation.
    if known.last_used_at is None or (now - known.last_used_at).total_seconds() > 60:
        Agent.objects.filter(pk=known.pk).update(last_used_at=now)
        known.last_used_at = now
    return fresh(known)


def agent_tokens_usable(digests: list[str]) -> dict[str, Any]:
    """Of these token hashes, those an active, unrevoked agent holds, each with its
    expiry (None: none), read now rather than from the cache: what a wait that is
    already open checks to learn that its agent was cut off (approvals.wakeups).
    The same rule as :func:`agent_authenticate`, whose callers compare the expiry."""
    if not digests:
        return {}
    rows = _usable_agents().filter(token_hash__in=digests).values_list("token_hash", "expires_at")
    return dict(rows)


def _usable_agents():
    """Agents whose token may authenticate (its expiry aside): active, not revoked."""
    return Agent.objects.filter(is_active=True, revoked_at__isnull=True)


def credential_set(
    *,
    connector: Connector,
    role: str,
    secret: dict[str, Any],
    scheme: str = Credential.Scheme.BEARER,
    header_name: str = "",
    token_url: str = "",
    scope: str = "",
    audience: str = "",
    client_auth: str = Credential.ClientAuth.BASIC,
    expires_at=None,
    actor: str = SYSTEM,
) -> Credential:
    """Store a new credential for (connector, role); older ones stay for the record but the
    newest live one is used. Write secrets are sealed: this process cannot open them.

    An OAuth2 credential's secret is ``{"client_id", "client_secret"}``; its token URL,
    scope, audience and client authentication are configuration, stored in clear. Raises
    VaultError for a secret or token URL the scheme cannot use."""
    check_secret_shape(scheme, secret)
    if scheme == Credential.Scheme.OAUTH2:
        oauth_token_url(base_url=connector.base_url, token_url=token_url)
        if client_auth not in Credential.ClientAuth.values:
            raise VaultError(f"client authentication is one of {Credential.ClientAuth.values}")
    elif token_url or scope or audience:
        raise VaultError("token URL, scope and audience belong to OAuth2 credentials")
    with transaction.atomic():
        credential = Credential(
            connector=connector,
            role=role,
            scheme=scheme,
            header_name=header_name,
            token_url=token_url.strip(),
            scope=scope.strip(),
            audience=audience.strip(),
            client_auth=client_auth,
            created_by=actor,
            expires_at=expires_at,
        )
        credential.ciphertext = seal(credential, secret)
        credential.save()
        audit_record(
            kind="credential.set",
            actor=actor,
            data={
                "connector": connector.name,
                "role": role,
                "scheme": scheme,
                "credential": str(credential.id),
            },
        )
    return credential


def agent_revoke(*, name: str, actor: str = SYSTEM) -> Agent:
    """Revoke an agent's token for good: it never authenticates again. Its plans stay
    for the record; one already approved still runs (the approval was a person's)."""
    now = timezone.now()
    with transaction.atomic():
        agent = Agent.objects.select_for_update().filter(name=name).first()
        if agent is None:
            raise NotFound(f"no agent named {name!r}")
        if agent.revoked_at is None:
            agent.revoked_at = now
            agent.is_active = False
            agent.save(update_fields=["revoked_at", "is_active"])
            audit_record(
                kind="agent.revoked",
                actor=actor,
                data={"agent": agent.name, "token_prefix": agent.token_prefix},
            )
    return agent


def credential_revoke(*, connector_name: str, role: str, actor: str = SYSTEM) -> int:
    """Revoke every live credential of (connector, role) (``manage.py revoke_credential``).
    Returns how many were revoked."""
    if role not in Credential.Role.values:
        raise NotFound(f"no credential role {role!r} (read or write)")
    connector = Connector.objects.filter(name=connector_name).first()
    if connector is None:
        raise NotFound(f"no connector named {connector_name!r}")
    return credentials_revoke(
        credentials=Credential.objects.filter(connector=connector, role=role), actor=actor
    )


def credentials_revoke(*, credentials, actor: str) -> int:
    """Revoke the live ones among ``credentials`` (a queryset), each with its own audit
    event; the command and the admin both come here. The next execution or read that
    needs one is refused before sending. Returns how many were revoked."""
    now = timezone.now()
    count = 0
    with transaction.atomic():
        for credential in (
            credentials.select_for_update()
            .filter(revoked_at__isnull=True)
            .select_related("connector")
            .order_by("pk")
        ):
            Credential.objects.filter(pk=credential.pk).update(revoked_at=now)
            audit_record(
                kind="credential.revoked",
                actor=actor,
                data={
                    "connector": credential.connector.name,
                    "role": credential.role,
                    "credential": str(credential.pk),
                },
            )
            count += 1
    return count


def vault_set_locked(*, locked: bool, actor: str, reason: str = "") -> VaultState:
    """Lock or unlock the vault (audited as vault.locked / vault.unlocked).

    The row is locked for the update so two admins flipping it at once are recorded in
    the order they took effect."""
    now = timezone.now()
    with transaction.atomic():
        VaultState.objects.get_or_create(id=VaultState.SINGLETON_ID)
        state = VaultState.objects.select_for_update().get(id=VaultState.SINGLETON_ID)
        was = state.locked
        state.locked = locked
        state.changed_at = now
        state.changed_by = actor[:150]
        state.reason = (reason or "")[:500]
        state.save()
        audit_record(
            kind="vault.locked" if locked else "vault.unlocked",
            actor=actor,
            data={"reason": state.reason, "was_locked": was},
        )
    return state
