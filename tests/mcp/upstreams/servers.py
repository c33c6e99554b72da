"""How to launch the real upstream MCP servers the upstream-connector tests run against.

The servers are nobody's here: three Node packages pinned in package.json/package-lock.json
next to this file (installed by `npm ci --prefix tests/mcp/upstreams`, as .ci/run does) and
the Python `mcp-server-git`, pinned in requirements.lock (installed by `make venv`). A
missing install fails the test loudly with the command to run: a silent skip would let
the suite pass without ever talking to a real upstream.

See NOTES.md here for what each server actually serves (tools, annotations, results).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest
from mcp.client.stdio import StdioServerParameters

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE / "node_modules"
SCOPE = NODE_MODULES / "@modelcontextprotocol"
NPM_INSTALL = "npm ci --prefix tests/mcp/upstreams"
GIT_INSTALL = "make venv"
# Pinned versions: the smoke test checks that what is installed is what package.json pins.
NODE_PACKAGES = ("server-filesystem", "server-memory", "server-everything")


@dataclass(frozen=True)
class StdioCommand:
    """A stdio server's command line: what a connector configuration stores.

    `env` holds only the variables the server needs; the SDK's stdio client merges them
    over its own safe default environment (PATH, HOME, ...).
    """

    command: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def params(self) -> StdioServerParameters:
        """The same command line for `mcp.Client(...)`."""
        return StdioServerParameters(command=self.command, args=list(self.args), env=dict(self.env))


def node_modules_installed() -> bool:
    """True when the three pinned Node servers are installed next to this file."""
    return all((SCOPE / name / "package.json").is_file() for name in NODE_PACKAGES)


def git_server_installed() -> bool:
    """True when mcp-server-git is importable by the interpreter running the tests."""
    return importlib.util.find_spec("mcp_server_git") is not None


def require_node_servers() -> str:
    """The `node` executable, or fail the test saying what to install."""
    node = shutil.which("node")
    if node is None or not node_modules_installed():
        pytest.fail(
            "the upstream MCP servers need Node.js and their packages: "
            f"{NPM_INSTALL} (as .ci/run does)",
            pytrace=False,
        )
    return node


def require_git_server() -> None:
    """Fail the test, saying what to run, when mcp-server-git is not in the venv."""
    if not git_server_installed():
        pytest.fail(
            f"mcp-server-git is not installed in this interpreter: {GIT_INSTALL} "
            "(it is pinned in requirements.lock)",
            pytrace=False,
        )


def _node_script(package: str) -> str:
    return str(SCOPE / package / "dist" / "index.js")


def filesystem_server(root: Path | str, *more_roots: Path | str) -> StdioCommand:
    """The filesystem server, allowed to touch `root` (and `more_roots`) only.

    A client that declares the roots capability has the server replace these directories
    with its roots; `mcp.Client` declares it only when given `list_roots_callback`.
    """
    node = require_node_servers()
    dirs = [str(Path(d).resolve()) for d in (root, *more_roots)]
    return StdioCommand(node, [_node_script("server-filesystem"), *dirs])


def memory_server(memory_file: Path | str) -> StdioCommand:
    """The knowledge-graph memory server, keeping its graph (JSON lines) in `memory_file`.

    The path must be absolute: a relative one is taken relative to the package's own
    directory inside node_modules.
    """
    node = require_node_servers()
    path = str(Path(memory_file).resolve())
    return StdioCommand(node, [_node_script("server-memory")], {"MEMORY_FILE_PATH": path})


def git_server(repository: Path | str) -> StdioCommand:
    """The git server (Python), limited to `repository`, run by this same interpreter."""
    require_git_server()
    repo = str(Path(repository).resolve())
    return StdioCommand(sys.executable, ["-m", "mcp_server_git", "--repository", repo])


def everything_stdio() -> StdioCommand:
    """The "everything" reference server over stdio."""
    node = require_node_servers()
    return StdioCommand(node, [_node_script("server-everything"), "stdio"])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    """Any HTTP answer counts (a GET without a session is a 400): the server is up."""
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def start_everything_http(
    *, timeout: float = 20.0, log: IO[bytes] | None = None
) -> tuple[str, subprocess.Popen[bytes]]:
    """Start the "everything" server over Streamable HTTP; return (url, process).

    It takes its port from PORT (default 3001) and has no host setting: Express listens
    on every interface, so a free port is picked on 127.0.0.1 and the URL uses it. It
    logs a line to stdout per request; `log` receives that (and stderr), else it is
    discarded (an unread pipe would fill and stall the server). The caller stops the
    process (`stop_process`); a port lost to a race is retried with another.
    """
    node = require_node_servers()
    deadline = time.monotonic() + timeout
    last = "not started"
    while time.monotonic() < deadline:
        port = _free_port()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PORT": str(port)}
        process = subprocess.Popen(
            [node, _node_script("server-everything"), "streamableHttp"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log if log is not None else subprocess.DEVNULL,
            stderr=log if log is not None else subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}/mcp"
        while time.monotonic() < deadline and process.poll() is None:
            if _answers(url):
                return url, process
            time.sleep(0.05)
        last = f"exit code {process.returncode}" if process.poll() is not None else "timeout"
        stop_process(process)
    raise RuntimeError(f"server-everything did not answer over HTTP within {timeout}s ({last})")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Terminate, then kill if it lingers; always reaped."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


@contextmanager
def everything_http(*, timeout: float = 20.0) -> Iterator[str]:
    """`start_everything_http` as a context manager yielding the URL (for fixtures)."""
    url, process = start_everything_http(timeout=timeout)
    try:
        yield url
    finally:
        stop_process(process)
