"""The four roles people hold, each a group with exactly its permissions.

* **reviewer** (``reviewers``): decides plans on the reviewers' pages; no admin at all.
* **policy author** (``policy-authors``): reads the decision rules, the policy versions and
  the actions they are written over, and runs backtests in the admin; loads policies with
  ``manage.py load_policies`` / ``load_catalog`` where the catalog files are kept.
* **catalog admin** (``catalog-admins``): connectors, actions, MCP tool pins, agents and their
  allow-lists; never a credential or the vault.
* **vault admin** (``vault-admins``): credentials (revoke, expiry) and the vault lock;
  never a plan or an action.

A reviewer never administers what they approve: ``role_grant`` refuses to give the
reviewer role and an administering one to the same person. The admin roles need
``is_staff`` (the admin's own door), which ``role_grant`` sets; a reviewer is never made
staff by it. ``roles_ensure`` makes the groups and keeps their permissions exactly as
listed here, whatever was added or removed by hand (the one allowance: an administrator
may take ``approvals.view_plan`` from the reviewers, see reviewers_group_ensure, which
also refuses to add a reviewer to a group that may administer).
Superusers hold every permission and decide nothing by being one (docs/security.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.db.models import Q

from actions.lib.audit import audit_record
from actions.lib.exceptions import InvalidInput, NotAllowed, NotFound

from .services import REVIEWERS_GROUP


@dataclass(frozen=True)
class Role:
    name: str
    group: str
    permissions: tuple[str, ...]  # "app_label.codename"
    staff: bool  # works in the admin
    optional: tuple[str, ...] = ()  # kept if present, never added back


REVIEWER = Role(
    name="reviewer",
    group=REVIEWERS_GROUP,
    permissions=("approvals.review_plan",),
    optional=("approvals.view_plan",),
    staff=False,
)
POLICY_AUTHOR = Role(
    name="policy-author",
    group="policy-authors",
    permissions=(
        "actions.view_decisionrule",
        "actions.view_policyversion",
        "actions.view_action",
        "actions.view_actionversion",
        "approvals.run_policy_backtest",
    ),
    staff=True,
)
CATALOG_ADMIN = Role(
    name="catalog-admin",
    group="catalog-admins",
    permissions=(
        "actions.add_connector",
        "actions.change_connector",
        "actions.view_connector",
        "actions.add_action",
        "actions.change_action",
        "actions.view_action",
        "actions.view_actionversion",
        "actions.view_toolpin",
        "actions.change_toolpin",
        "actions.change_agent",
        "actions.view_agent",
        "actions.add_agentscope",
        "actions.change_agentscope",
        "actions.delete_agentscope",
        "actions.view_agentscope",
    ),
    staff=True,
)
VAULT_ADMIN = Role(
    name="vault-admin",
    group="vault-admins",
    permissions=(
        "actions.view_credential",
        "actions.change_credential",
        "actions.view_vaultstate",
        "actions.change_vaultstate",
    ),
    staff=True,
)
ROLES = {role.name: role for role in (REVIEWER, POLICY_AUTHOR, CATALOG_ADMIN, VAULT_ADMIN)}


def _permissions(names: tuple[str, ...]) -> list[Permission]:
    query = Q(pk__in=[])
    for name in names:
        app_label, codename = name.split(".")
        query |= Q(content_type__app_label=app_label, codename=codename)
    found = list(Permission.objects.filter(query).select_related("content_type"))
    if len(found) != len(names):  # pragma: no cover - a model renamed under this list
        have = {f"{p.content_type.app_label}.{p.codename}" for p in found}
        raise LookupError(f"unknown permissions: {sorted(set(names) - have)}")
    return found


def roles_ensure(*, actor: str) -> dict[str, list[str]]:
    """Make each role's group and give it exactly its permissions. Returns, by group,
    what changed (``+perm``, ``-perm``, ``created``); audited (``roles.changed``) when
    anything did. Idempotent: a second run changes nothing."""
    changes: dict[str, list[str]] = {}
    with transaction.atomic():
        for role in ROLES.values():
            group, created = Group.objects.get_or_create(name=role.group)
            if (
                role is REVIEWER
                and not created
                and not group.permissions.filter(
                    content_type__app_label="approvals", codename="review_plan"
                ).exists()
            ):
                # As reviewers_group_ensure: its members would all become reviewers.
                raise NotAllowed(
                    f"the group {role.group!r} exists without the permission to review "
                    "plans; grant it in the admin, or rename that group"
                )
            wanted = set(_permissions(role.permissions))
            held = set(group.permissions.select_related("content_type"))
            optional = set(_permissions(role.optional)) if role.optional else set()
            wanted |= optional if created else held & optional
            added, removed = wanted - held, held - wanted
            said = ["created"] if created else []
            said += sorted(f"+{p.content_type.app_label}.{p.codename}" for p in added)
            said += sorted(f"-{p.content_type.app_label}.{p.codename}" for p in removed)
            if added or removed:
                group.permissions.set(wanted)
            if said:
                changes[role.group] = said
        if changes:
            audit_record(kind="roles.changed", actor=actor, data={"groups": changes})
    return changes


def role_grant(*, username: str, role: str, actor: str) -> bool:
    """Give ``username`` the role (its group; ``is_staff`` for an admin role). Refused
    for a reviewer asked to administer, or an administrator asked to review: a reviewer
    never administers what they approve. Returns whether anything changed."""
    wanted = ROLES.get(role)
    if wanted is None:
        raise InvalidInput(f"no role {role!r} (roles: {', '.join(ROLES)})")
    users = get_user_model()._default_manager
    user = users.filter(**{users.model.USERNAME_FIELD: username}).first()
    if user is None:
        raise NotFound(f"no user named {username!r}")
    roles_ensure(actor=actor)
    held = set(
        user.groups.filter(name__in=[r.group for r in ROLES.values()]).values_list(
            "name", flat=True
        )
    )
    reviewing = REVIEWER.group in held or wanted is REVIEWER
    administering = any(r.staff and (r.group in held or r is wanted) for r in ROLES.values())
    if reviewing and administering:
        other = "an administering role" if wanted is REVIEWER else "the reviewer role"
        raise NotAllowed(
            f"{username} holds {other}: a reviewer never administers what they approve; "
            "give the roles to two people"
        )
    changed = wanted.group not in held
    with transaction.atomic():
        user.groups.add(Group.objects.get(name=wanted.group))
        if wanted.staff and not user.is_staff:
            user.is_staff = True
            user.save(update_fields=["is_staff"])
            changed = True
        if changed:
            audit_record(
                kind="role.granted", actor=actor, data={"username": username, "role": role}
            )
    return changed
