"""Serve the MCP server on standard input and output, for desktop MCP clients.

The agent token comes from an environment variable (never a command-line argument,
which other local users can read in the process list)::

    COUNTERSIGN_AGENT_TOKEN=cs_… python manage.py mcp

Nothing but protocol messages goes to standard output; logs go to standard error.
"""

from __future__ import annotations

import os
import sys

import anyio
from django.core.management.base import BaseCommand, CommandError

from actions.services import agent_authenticate

DEFAULT_TOKEN_ENV = "COUNTERSIGN_AGENT_TOKEN"


class Command(BaseCommand):
    help = "Serve the MCP server over stdio for the agent whose token is in the environment."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--token-env",
            default=DEFAULT_TOKEN_ENV,
            help=f"the environment variable holding the agent token (default {DEFAULT_TOKEN_ENV})",
        )

    def handle(self, *args, token_env: str, **options) -> None:
        token = os.environ.get(token_env, "").strip()
        if not token:
            raise CommandError(f"set the agent token in the environment variable {token_env}")

        # Only this command needs the MCP SDK, which takes a while to import.
        from approvals.mcp.protocol import serve_stdio  # noqa: PLC0415

        if agent_authenticate(token) is None:
            # Serve anyway: the client then gets the precise refusal on every request,
            # which a desktop client shows, instead of a server that merely died.
            print(
                f"warning: the token in {token_env} is not an active agent's; "
                "every request will be refused",
                file=sys.stderr,
            )
        anyio.run(serve_stdio, token)
