"""A person's permissions read in one query instead of Django's two (their own, then
their groups'), on every request that asks (a decision's ``can_review``, the pages'
checks). Mixed into each sign-in backend; the sets are those ModelBackend finds,
kept where it keeps them: on the user object of this request only, so a permission or a
membership taken away applies at the person's next request."""

from __future__ import annotations

from django.contrib.auth.backends import ModelBackend as DjangoModelBackend
from django.db.models import Value

# Where ModelBackend keeps each set on the user object (django.contrib.auth.backends).
_CACHES = {"user": "_user_perm_cache", "group": "_group_perm_cache"}


class OneQueryPermissions:
    """For ModelBackend and its subclasses: get_all_permissions reads the person's own
    permissions and their groups' in one UNION ALL, each row marked with where it came
    from, and leaves both sets where ModelBackend would have put them. Anything else (a
    superuser, whose sets are every permission; an inactive or anonymous user; an object
    permission; sets already read) is ModelBackend's as before."""

    def get_all_permissions(self, user_obj, obj=None):
        if (
            obj is None
            and user_obj.is_active
            and not user_obj.is_anonymous
            and not user_obj.is_superuser
            and not hasattr(user_obj, "_perm_cache")
            and not any(hasattr(user_obj, name) for name in _CACHES.values())
        ):
            self._permissions_read(user_obj)
        return super().get_all_permissions(user_obj, obj)

    def _permissions_read(self, user_obj) -> None:
        found: dict[str, set[str]] = {source: set() for source in _CACHES}
        own, groups = (
            getattr(self, f"_get_{source}_permissions")(user_obj)
            .annotate(source=Value(source))
            .values_list("content_type__app_label", "codename", "source")
            .order_by()
            for source in _CACHES
        )
        for app_label, codename, source in own.union(groups, all=True).order_by():
            found[source].add(f"{app_label}.{codename}")
        for source, name in _CACHES.items():
            setattr(user_obj, name, found[source])


class PermissionsRead(OneQueryPermissions, DjangoModelBackend):
    """Listed before Django's own ModelBackend when local passwords are on
    (COUNTERSIGN_LOCAL_LOGIN): it answers permission checks, reading them in one query
    into the caches ModelBackend then finds, and signs no one in. Passwords stay with
    ModelBackend, whose dotted path is what a session records, so the sessions of earlier
    releases, and of an earlier release's processes during a rolling deploy, stay valid."""

    def authenticate(self, request, **credentials):
        return None
