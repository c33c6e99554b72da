from __future__ import annotations

import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from actions.models import Action, Agent, Connector, Credential
from actions.services import agent_create, credential_set
from actions.tokens import new_token
from approvals.roles import REVIEWER, ROLES, role_grant

# The groups demo/catalog.yaml's decision rules name; both demo people are in both.
DEMO_GROUPS = ("billing-approvers", "support-leads")


def _demo_person(username: str, password: str, groups: tuple[str, ...]):
    """A demo reviewer in the decision rules' groups, and a reviewer only: no admin
    (not staff, no permission of their own), so that they never administer what they
    approve (approvals/roles.py). Not a superuser: a superuser decides nothing by being
    one (docs/security.md, "Who decides"). A run over an older demo database takes back
    what earlier demos gave them."""
    user, _ = get_user_model().objects.get_or_create(username=username)
    user.set_password(password)
    user.is_staff = False
    user.is_superuser = False
    user.save()
    user.user_permissions.clear()
    user.groups.remove(*Group.objects.filter(name__in=[r.group for r in ROLES.values()]))
    role_grant(username=username, role=REVIEWER.name, actor="demo_setup")
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    return user


class Command(BaseCommand):
    help = (
        "Prepare the embedded demo: a reviewer login, a demo agent allowed every demo "
        "action, and the demo upstream's credentials. Prints the login and agent token."
    )

    def add_arguments(self, parser):
        parser.add_argument("--connector", default="demo")
        parser.add_argument("--username", default="reviewer")

    def handle(self, *args, connector: str, username: str, **options):
        conn = Connector.objects.filter(name=connector).first()
        if conn is None:
            raise CommandError(f"no connector {connector!r}: load the demo catalog first")
        read_token = os.environ.get("DEMO_UPSTREAM_READ_TOKEN", "demo-read-token")
        write_token = os.environ.get("DEMO_UPSTREAM_WRITE_TOKEN", "demo-write-token")
        password = secrets.token_urlsafe(12)
        second, second_password = f"{username}2", secrets.token_urlsafe(12)
        with transaction.atomic():
            _demo_person(username, password, DEMO_GROUPS)
            # A second person, so that a plan needing two people (a deletion: a support
            # lead and a billing approver, or two reviewers) can be decided in the demo.
            _demo_person(second, second_password, DEMO_GROUPS)
            credential_set(
                connector=conn,
                role=Credential.Role.READ,
                secret={"token": read_token},
                actor="demo_setup",
            )
            credential_set(
                connector=conn,
                role=Credential.Role.WRITE,
                secret={"token": write_token},
                actor="demo_setup",
            )
            names = list(Action.objects.filter(connector=conn).values_list("name", flat=True))
            agent = Agent.objects.filter(name="demo-agent").first()
            if agent is None:
                agent, token = agent_create(
                    name="demo-agent", action_names=names, actor="demo_setup", active=True
                )
            else:
                # A fresh token each run: the old one was printed to an old terminal.
                token, prefix, digest = new_token()
                Agent.objects.filter(pk=agent.pk).update(token_prefix=prefix, token_hash=digest)
                agent.actions.set(Action.objects.filter(name__in=names))
            # Scope rules compare targets with this (see update_contact_phone).
            Agent.objects.filter(pk=agent.pk).update(attributes={"workspace": "ws-blue"})
        self.stdout.write(f"Reviewer login: {username} / {password}")
        self.stdout.write(f"Second reviewer: {second} / {second_password}")
        self.stdout.write(f"Demo agent token: {token}")
        self.stdout.write(
            "Try: curl -s -H 'Authorization: Bearer <token>' -H 'Content-Type: application/json' "
            '-d \'{"action": "update_contact_email", "input": {"contact_id": "c-1001", '
            '"email": "ada@new.example"}, "reason": "customer asked"}\' '
            f"{settings.PUBLIC_URL}/api/v1/plans"
        )
