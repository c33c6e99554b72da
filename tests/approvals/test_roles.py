"""The four roles (approvals/roles.py): each opens its own admin areas and no other; a
reviewer opens none; the groups are kept in step with exactly their permissions; a
reviewer is never made an administrator; the demo's reviewers are reviewers only."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from django.urls import reverse

from actions.lib.exceptions import NotAllowed
from actions.lib.models import AuditEvent
from actions.models import Credential, VaultState
from approvals.models import PlanStatus
from approvals.roles import ROLES, role_grant, roles_ensure

# Each admin area by the page that opens it.
AREAS = {
    "actions": "admin:actions_action_changelist",
    "action versions": "admin:actions_actionversion_changelist",
    "connectors": "admin:actions_connector_changelist",
    "tool pins": "admin:actions_toolpin_changelist",
    "credentials": "admin:actions_credential_changelist",
    "vault": "admin:actions_vaultstate_changelist",
    "agents": "admin:actions_agent_changelist",
    "policies": "admin:actions_policyversion_changelist",
    "decision rules": "admin:actions_decisionrule_changelist",
    "backtests": "admin:approvals_policybacktest_add",
    "users": "admin:auth_user_changelist",
    "groups": "admin:auth_group_changelist",
}
OPENS = {
    "reviewer": set(),
    "policy-author": {"policies", "decision rules", "backtests", "actions", "action versions"},
    "catalog-admin": {"actions", "action versions", "connectors", "tool pins", "agents"},
    "vault-admin": {"credentials", "vault"},
}


def person(username: str, role: str):
    get_user_model().objects.create_user(username=username, password="pw-" + username)
    role_grant(username=username, role=role, actor="test")
    return get_user_model().objects.get(username=username)


@pytest.fixture
def people(db):
    return {role: person(role.replace("-", "_"), role) for role in ROLES}


def opened(client, user, area: str) -> bool:
    """Whether ``user`` got the page; anything but the page (403, or the admin's login
    for someone who is not staff) is asserted to be one of the two refusals."""
    client.force_login(user)
    response = client.get(reverse(AREAS[area]))
    if response.status_code == 200:
        return True
    if user.is_staff:
        assert response.status_code == 403, (user.username, area, response.status_code)
    else:
        assert response.status_code == 302, (user.username, area, response.status_code)
        assert response["Location"].startswith(reverse("admin:login"))
    return False


@pytest.mark.parametrize("role", list(OPENS))
def test_each_role_opens_its_own_admin_areas_and_no_other(client, people, role):
    user = people[role]
    assert user.is_staff == (role != "reviewer")
    assert {area for area in AREAS if opened(client, user, area)} == OPENS[role]


def test_a_reviewer_made_staff_by_hand_still_opens_no_admin_area(client, people):
    reviewer = people["reviewer"]
    reviewer.is_staff = True
    reviewer.save(update_fields=["is_staff"])
    assert not [area for area in AREAS if opened(client, reviewer, area)]
    # The reviewer's own pages are theirs.
    assert client.get(reverse("approvals:queue")).status_code == 200


def test_the_vault_admin_locks_the_vault_and_the_catalog_admin_cannot(client, people):
    url = reverse("admin:actions_vaultstate_changelist")
    client.force_login(people["vault-admin"])
    client.get(url)  # the switch's row exists from the first visit
    lock = {"action": "lock_vault", "_selected_action": [str(VaultState.SINGLETON_ID)]}
    assert client.post(url, lock).status_code == 302
    assert VaultState.objects.get().locked
    unlock = {"action": "unlock_vault", "_selected_action": [str(VaultState.SINGLETON_ID)]}
    for role in ("catalog-admin", "policy-author", "reviewer"):
        client.force_login(people[role])
        assert client.post(url, unlock).status_code in (302, 403)
        assert VaultState.objects.get().locked, role


def test_only_the_vault_admin_opens_a_credential(client, people, catalog):
    credential = Credential.objects.filter(revoked_at__isnull=True).first()
    url = reverse("admin:actions_credential_change", args=[credential.pk])
    client.force_login(people["vault-admin"])
    page = client.get(url)
    assert page.status_code == 200
    assert "set (encrypted)" in page.content.decode() or "sealed" in page.content.decode()
    for role in ("catalog-admin", "policy-author"):
        client.force_login(people[role])
        assert client.get(url).status_code == 403


def test_the_vault_admin_neither_decides_plans_nor_edits_actions(client, people, make_plan):
    plan = make_plan()
    client.force_login(people["vault-admin"])
    response = client.post(
        reverse("approvals:plan-decide", args=[plan.id]),
        {"decision": "approve", "fingerprint": plan.fingerprint},
    )
    assert response.status_code == 403
    assert not plan.approvals.exists() and plan.status == PlanStatus.AWAITING_APPROVAL
    assert (
        client.get(reverse("admin:actions_action_change", args=[plan.action_id])).status_code == 403
    )


def test_the_catalog_admin_edits_an_action_the_policy_author_only_reads_it(client, people, catalog):
    action = catalog["update_contact_email"]
    url = reverse("admin:actions_action_change", args=[action.pk])
    client.force_login(people["catalog-admin"])
    assert 'name="_save"' in client.get(url).content.decode()
    client.force_login(people["policy-author"])
    page = client.get(url)
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    assert client.post(url, {}).status_code == 403


# --- the groups ----------------------------------------------------------------------------


def test_the_groups_hold_exactly_their_permissions_and_are_kept_in_step(db):
    first = roles_ensure(actor="test")
    assert set(first) == {r.group for r in ROLES.values()}
    assert roles_ensure(actor="test") == {}  # idempotent
    catalog_admins = Group.objects.get(name="catalog-admins")
    credential = Permission.objects.get(codename="change_credential")
    catalog_admins.permissions.add(credential)  # given by hand
    reviewers = Group.objects.get(name="reviewers")
    view_plan = Permission.objects.get(codename="view_plan")
    reviewers.permissions.remove(view_plan)  # an administrator's choice: kept
    reviewers.permissions.add(Permission.objects.get(codename="change_action"))
    assert roles_ensure(actor="test") == {
        "catalog-admins": ["-actions.change_credential"],
        "reviewers": ["-actions.change_action"],
    }
    event = AuditEvent.objects.filter(kind="roles.changed").latest("id")
    assert event.data["groups"]["catalog-admins"] == ["-actions.change_credential"]
    for role in ROLES.values():
        held = {
            f"{p.content_type.app_label}.{p.codename}"
            for p in Group.objects.get(name=role.group).permissions.select_related("content_type")
        }
        assert held == set(role.permissions), role.name


def test_a_reviewer_is_never_given_an_administering_role_nor_the_reverse(people):
    with pytest.raises(NotAllowed, match="a reviewer never administers what they approve"):
        role_grant(username="reviewer", role="vault-admin", actor="test")
    with pytest.raises(NotAllowed):
        role_grant(username="catalog_admin", role="reviewer", actor="test")
    reviewer = get_user_model().objects.get(username="reviewer")
    assert not reviewer.is_staff
    assert set(reviewer.groups.values_list("name", flat=True)) == {"reviewers"}


def test_the_roles_command_makes_the_groups_and_grants(db):
    get_user_model().objects.create_user(username="vera", password="pw-vera")
    out = StringIO()
    call_command("roles", "--grant", "vera", "vault-admin", stdout=out)
    assert "group vault-admins: created" in out.getvalue()
    assert "vera is now a vault-admin" in out.getvalue()
    vera = get_user_model().objects.get(username="vera")
    assert vera.is_staff and vera.has_perm("actions.change_vaultstate")
    assert not vera.has_perm("approvals.review_plan")
    out = StringIO()
    call_command("roles", stdout=out)
    assert out.getvalue() == "the roles' groups are in step\n"


# --- the demo ------------------------------------------------------------------------------


def test_the_demos_reviewers_are_reviewers_only(client, catalog, monkeypatch):
    from tests.conftest import READ_TOKEN, WRITE_TOKEN

    monkeypatch.setenv("DEMO_UPSTREAM_READ_TOKEN", READ_TOKEN)
    monkeypatch.setenv("DEMO_UPSTREAM_WRITE_TOKEN", WRITE_TOKEN)
    # A demo database made before the roles: its reviewers were staff with every
    # permission of the two apps.
    old = get_user_model().objects.create_user(username="reviewer", is_staff=True)
    old.user_permissions.set(
        Permission.objects.filter(content_type__app_label__in=["actions", "approvals"])
    )
    out = StringIO()
    call_command("demo_setup", stdout=out)
    printed = out.getvalue().splitlines()
    assert [line.split(":")[0] for line in printed] == [
        "Reviewer login",
        "Second reviewer",
        "Demo agent token",
        "Try",
    ]
    for username in ("reviewer", "reviewer2"):
        user = get_user_model().objects.get(username=username)
        assert not user.is_staff and not user.is_superuser
        assert not user.user_permissions.exists()
        assert user.get_all_permissions() == {"approvals.review_plan", "approvals.view_plan"}
        assert set(user.groups.values_list("name", flat=True)) == {
            "reviewers",
            "billing-approvers",
            "support-leads",
        }
        assert not [area for area in AREAS if opened(client, user, area)]


def test_the_admin_says_its_own_names(admin_client):
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert "Countersign administration" in page and "Django administration" not in page
    assert "Single sign-on identities" in page
    assert "identitys" not in page.lower() and "Oidc" not in page


def test_no_reviewer_is_added_to_a_group_that_administers(db):
    from approvals.services import reviewer_create

    leads = Group.objects.create(name="leads")
    leads.permissions.add(
        Permission.objects.get(codename="review_plan"),
        Permission.objects.get(codename="change_vaultstate"),
    )
    with pytest.raises(NotAllowed, match=r"may also administer \(change_vaultstate\)"):
        reviewer_create(
            username="lee", password="a-long-pass-phrase-42", group="leads", actor="test"
        )
    assert not get_user_model().objects.filter(username="lee").exists()
