"""The people who may review plans: the reviewers group, and a reviewer created."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from actions.lib.audit import audit_record
from actions.lib.exceptions import InvalidInput, NotAllowed

REVIEWERS_GROUP = "reviewers"


def reviewers_group_ensure(*, name: str = REVIEWERS_GROUP) -> tuple[Group, bool]:
    """The group ``name``, whose members may review plans (``approvals.review_plan``);
    created with that permission if missing, and with the one to view every plan
    read-only (``approvals.view_plan``: the queue's "all plans"), which an administrator
    may take away so that its members see only what their groups decide. Returns the
    group and whether it was made.

    An existing group without the permission is refused rather than given it: every
    one of its members would become a reviewer as a side effect. So is one that may
    change the catalog, its agents, credentials or the vault (an ``actions`` add,
    change or delete permission): a reviewer never administers what they approve
    (approvals/roles.py)."""
    permission = Permission.objects.get(content_type__app_label="approvals", codename="review_plan")
    group, created = Group.objects.get_or_create(name=name)
    if created:
        view = Permission.objects.get(content_type__app_label="approvals", codename="view_plan")
        group.permissions.add(permission, view)
        return group, created
    if not group.permissions.filter(pk=permission.pk).exists():
        raise NotAllowed(
            f"the group {name!r} exists without the permission to review plans; "
            "grant it in the admin, or choose another group"
        )
    administering = sorted(
        group.permissions.filter(
            content_type__app_label="actions",
            codename__regex=r"^(add|change|delete)_",
        ).values_list("codename", flat=True)
    )
    if administering:
        raise NotAllowed(
            f"the group {name!r} may also administer ({', '.join(administering)}): a "
            "reviewer never administers what they approve; take those permissions from "
            "it (manage.py roles does, for the reviewers group), or choose another group"
        )
    return group, created


def reviewer_create(
    *, username: str, password: str, email: str = "", group: str = REVIEWERS_GROUP, actor: str
):
    """A person who may review plans: a new user in ``group`` (see reviewers_group_ensure).

    The password must pass the configured validators (AUTH_PASSWORD_VALIDATORS); only
    its hash is stored, and it is never recorded or logged. Returns the user and whether
    the group was made for it."""
    users = get_user_model()._default_manager
    field = users.model.USERNAME_FIELD
    if users.filter(**{field: username}).exists():
        raise InvalidInput(f"a user named {username!r} already exists")
    user = users.model(**{field: username}, email=users.normalize_email(email))
    errors = []
    try:
        user.full_clean(exclude=["password"])
    except ValidationError as exc:
        errors += [
            {"pointer": f"/{name}", "message": message}
            for name, messages in exc.message_dict.items()
            for message in messages
        ]
    try:
        validate_password(password, user=user)
    except ValidationError as exc:
        errors += [{"pointer": "/password", "message": message} for message in exc.messages]
    if errors:
        raise InvalidInput(errors=errors)
    user.set_password(password)
    try:
        with transaction.atomic():
            user.save()
            reviewers, created = reviewers_group_ensure(name=group)
            user.groups.add(reviewers)
            audit_record(
                kind="reviewer.created",
                actor=actor,
                data={"username": username, "group": group, "group_created": created},
            )
    except IntegrityError:  # created meanwhile by someone else
        raise InvalidInput(f"a user named {username!r} already exists") from None
    return user, created


# --- deciding -----------------------------------------------------------------------
