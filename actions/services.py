"""Catalog-side state changes: agents and credentials."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from approvals.audit import audit_record

from .exceptions import NotFound
from .models import Action, Agent, Connector, Credential
from .tokens import new_token, token_hash
from .vault import seal


def agent_create(
    *, name: str, action_names: list[str], created_by=None, actor: str = "system"
) -> tuple[Agent, str]:
    """Create an agent; returns it with its bearer token (the only time it exists in clear)."""
    actions = list(Action.objects.filter(name__in=action_names))
    missing = sorted(set(action_names) - {a.name for a in actions})
    if missing:
        raise NotFound(f"unknown actions: {', '.join(missing)}")
    token, prefix, digest = new_token()
    with transaction.atomic():
        agent = Agent.objects.create(
            name=name, token_prefix=prefix, token_hash=digest, created_by=created_by
        )
        agent.actions.set(actions)
        audit_record(
            kind="agent.created",
            actor=actor,
            data={
                "agent": name,
                "actions": sorted(a.name for a in actions),
                "token_prefix": prefix,
            },
        )
    return agent, token


def agent_authenticate(token: str) -> Agent | None:
    """The active agent holding ``token``, or None. Records when it was last used."""
    if not token or len(token) > 200:
        return None
    agent = Agent.objects.filter(token_hash=token_hash(token), is_active=True).first()
    if agent is None:
        return None
    now = timezone.now()
    # Narrow, throttled write: at most once a minute per agent.
    if agent.last_used_at is None or (now - agent.last_used_at).total_seconds() > 60:
        Agent.objects.filter(pk=agent.pk).update(last_used_at=now)
    return agent


def credential_set(
    *,
    connector: Connector,
    role: str,
    secret: dict[str, Any],
    scheme: str = Credential.Scheme.BEARER,
    header_name: str = "",
    expires_at=None,
    actor: str = "system",
) -> Credential:
    """Store a new credential for (connector, role); older ones stay for the record but the
    newest live one is used. Write secrets are sealed: this process cannot open them."""
    with transaction.atomic():
        credential = Credential(
            connector=connector,
            role=role,
            scheme=scheme,
            header_name=header_name,
            created_by=actor,
            expires_at=expires_at,
        )
        credential.ciphertext = seal(credential, secret)
        credential.save()
        audit_record(
            kind="credential.set",
            actor=actor,
            data={"connector": connector.name, "role": role, "credential": str(credential.id)},
        )
    return credential
