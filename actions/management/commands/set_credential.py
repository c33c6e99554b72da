from __future__ import annotations

import getpass
import sys

from django.core.management.base import BaseCommand, CommandError

from actions.models import Connector, Credential
from actions.services import credential_set
from actions.vault import VaultError


class Command(BaseCommand):
    help = (
        "Store a connector credential. The secret is read from standard input (never "
        "from the command line, where it would land in shell history and ps output). "
        "For --scheme oauth2 the client id and the client secret are read, one a line; "
        "the token URL, scope and audience are options (not secret). For --scheme env "
        "(an MCP server started over stdio) name each variable with --env NAME and its "
        "value is read from standard input, one a line; --env NAME=VALUE is accepted too "
        "(the value then lands in shell history); with no --env, NAME=VALUE lines are "
        "read from standard input until its end or an empty line. Values are never echoed."
    )

    def add_arguments(self, parser):
        parser.add_argument("connector")
        parser.add_argument("role", choices=["read", "write"])
        parser.add_argument(
            "--scheme", choices=["bearer", "header", "oauth2", "env"], default="bearer"
        )
        parser.add_argument(
            "--env",
            action="append",
            default=[],
            metavar="NAME[=VALUE]",
            help="env: a variable the server process gets; repeatable",
        )
        parser.add_argument("--header-name", default="")
        parser.add_argument(
            "--token-url",
            default="",
            help="oauth2: a path on the connector (/oauth/token) or an absolute URL on its "
            "origin or on one listed in COUNTERSIGN_OAUTH_TOKEN_ORIGINS",
        )
        parser.add_argument("--scope", default="", help="oauth2: the scope to ask for")
        parser.add_argument("--audience", default="", help="oauth2: the audience to ask for")
        parser.add_argument(
            "--client-auth",
            choices=Credential.ClientAuth.values,
            default=Credential.ClientAuth.BASIC,
            help="oauth2: send the client id and secret with HTTP Basic or in the form body",
        )

    def handle(
        self,
        *args,
        connector: str,
        role: str,
        scheme: str,
        header_name: str,
        token_url: str,
        scope: str,
        audience: str,
        client_auth: str,
        **options,
    ):
        conn = Connector.objects.filter(name=connector).first()
        if conn is None:
            raise CommandError(f"no connector named {connector!r}")
        if scheme == "header" and not header_name:
            raise CommandError("--scheme header needs --header-name")
        if scheme == Credential.Scheme.OAUTH2:
            if not token_url:
                raise CommandError("--scheme oauth2 needs --token-url")
            secret = {
                "client_id": self._read("client id: ", hidden=False),
                "client_secret": self._read("client secret: "),
            }
        elif scheme == Credential.Scheme.ENV:
            secret = {"env": self._env(options["env"])}
        else:
            secret = {"token": self._read("secret: ")}
        try:
            credential = credential_set(
                connector=conn,
                role=role,
                secret=secret,
                scheme=scheme,
                header_name=header_name,
                token_url=token_url,
                scope=scope,
                audience=audience,
                client_auth=client_auth,
                actor="cli",
            )
        except VaultError as exc:
            raise CommandError(str(exc)) from None
        sealed = "sealed to the worker's key" if role == Credential.Role.WRITE else "encrypted"
        names = f" (variables {', '.join(sorted(secret['env']))})" if "env" in secret else ""
        self.stdout.write(
            f"{role} credential for {connector}{names} stored ({sealed}); id {credential.id}"
        )

    def _env(self, items: list[str]) -> dict[str, str]:
        """The variables of an env secret: named by --env, values from stdin unless
        given with the name."""
        env: dict[str, str] = {}
        if not items:
            if sys.stdin.isatty():
                self.stderr.write("NAME=VALUE, one a line; an empty line ends")
            while line := sys.stdin.readline().strip():
                items.append(line)
                if "=" not in line:
                    raise CommandError("each line read for --scheme env is NAME=VALUE")
        for item in items:
            name, sep, value = item.partition("=")
            name = name.strip()
            if not name:
                raise CommandError("--env needs a variable name")
            if name in env:
                raise CommandError(f"the variable {name} is given twice")
            env[name] = value if sep else self._read(f"{name}: ")
        return env

    def _read(self, prompt: str, *, hidden: bool = True) -> str:
        if sys.stdin.isatty():
            value = getpass.getpass(prompt) if hidden else input(prompt)
        else:
            value = sys.stdin.readline()
        value = value.strip()
        if not value:
            raise CommandError(f"empty {prompt.rstrip(': ')}")
        return value
