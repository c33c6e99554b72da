"""A person's permissions in one query (approvals/identity/permissions.py): the same sets
Django's ModelBackend finds, in the same places, read anew for each request's user."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend as DjangoModelBackend
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.identity.oidc import ReviewerOIDCBackend
from approvals.identity.permissions import PermissionsRead

BACKENDS = [PermissionsRead, ReviewerOIDCBackend]


def _perm(codename: str) -> Permission:
    return Permission.objects.get(codename=codename)


@pytest.fixture
def people(db):
    """Permissions of every shape: none, own only, groups only (two groups sharing one),
    both (overlapping), an inactive person's and a superuser's."""
    users = get_user_model()
    review, view, change = _perm("review_plan"), _perm("view_plan"), _perm("change_plan")
    a, b = Group.objects.create(name="a"), Group.objects.create(name="b")
    a.permissions.add(review, view)
    b.permissions.add(view, change)
    made = {name: users.objects.create_user(username=name) for name in (
        "none", "own", "grouped", "both", "inactive", "root")}  # fmt: skip
    made["own"].user_permissions.add(review)
    made["grouped"].groups.add(a, b)
    made["both"].user_permissions.add(review, change)
    made["both"].groups.add(a)
    made["inactive"].user_permissions.add(review)
    users.objects.filter(username="inactive").update(is_active=False)
    users.objects.filter(username="root").update(is_superuser=True)
    return list(made)


def _fresh(username: str):
    return get_user_model().objects.get(username=username)


def _sets(backend, user) -> tuple:
    return (
        backend.get_all_permissions(user),
        backend.get_user_permissions(user),
        backend.get_group_permissions(user),
        backend.has_perm(user, "approvals.review_plan"),
        backend.has_perm(user, "approvals.change_plan"),
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_sets_are_django_s(backend, people):
    for name in people:
        django_user, ours = _fresh(name), _fresh(name)
        with CaptureQueriesContext(connection) as django_reads:
            expected = _sets(DjangoModelBackend(), django_user)
        with CaptureQueriesContext(connection) as reads:
            assert _sets(backend(), ours) == expected, name
        for cache in ("_perm_cache", "_user_perm_cache", "_group_perm_cache"):
            assert getattr(ours, cache, None) == getattr(django_user, cache, None), (name, cache)
        if name in ("own", "grouped", "both", "none"):
            assert (len(django_reads), len(reads)) == (2, 1), name
            assert "UNION ALL" in reads[0]["sql"]


def test_a_permission_taken_away_applies_to_the_next_request(people):
    backend = PermissionsRead()
    this_request = _fresh("grouped")
    assert backend.has_perm(this_request, "approvals.review_plan")
    Group.objects.get(name="a").user_set.remove(this_request)
    _fresh("own").user_permissions.clear()
    # The user object of the next request reads them anew.
    assert not backend.has_perm(_fresh("grouped"), "approvals.review_plan")
    assert backend.has_perm(_fresh("grouped"), "approvals.view_plan")
    assert not backend.has_perm(_fresh("own"), "approvals.review_plan")
    with CaptureQueriesContext(connection) as reads:
        assert backend.has_perm(this_request, "approvals.review_plan")  # this one's, kept
    assert not reads


def test_a_password_sign_in_is_recorded_under_django_s_own_backend(people, client):
    """The permissions backend signs no one in: a local sign-in's session names Django's
    ModelBackend, as every earlier release's did, so no session ends with an upgrade."""
    from django.contrib.auth import BACKEND_SESSION_KEY

    user = _fresh("own")
    user.set_password("a long enough password 1")
    user.save()
    assert (
        PermissionsRead().authenticate(None, username="own", password="a long enough password 1")
        is None
    )
    response = client.post(
        "/accounts/login/", {"username": "own", "password": "a long enough password 1"}
    )
    assert response.status_code == 302, response.content[:300]
    assert client.session[BACKEND_SESSION_KEY] == "django.contrib.auth.backends.ModelBackend"
