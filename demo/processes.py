"""Countersign's own processes on this machine: the ASGI web server and Celery workers,
started as a deployment starts them, for the end-to-end tests, the benchmarks and the
screenshots (which import this module; the product never does).

They run against a database and a broker given in their environment, with the same
settings module as production code. Only a worker is given the private key.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url(settings_dict: dict) -> str:
    user = settings_dict.get("USER") or "postgres"
    password = settings_dict.get("PASSWORD") or ""
    auth = f"{user}:{password}@" if password else f"{user}@"
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or "5432"
    return f"postgres://{auth}{host}:{port}/{settings_dict['NAME']}"


class Process:
    """A process started in ``cwd``: this checkout, or another release's
    (tests/e2e/test_upgrade.py runs the previous release beside this one)."""

    def __init__(
        self, name: str, args: list[str], env: dict[str, str], log_dir: Path, cwd: Path = ROOT
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            args,
            cwd=cwd,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group we started (the worker forks children)."""
        if self.alive():
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, timeout: float = 10) -> None:
        if self.alive():
            self.kill(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill(signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()


def base_env(db_url: str, broker_url: str, queue: str, public_key: str, extra=None) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COUNTERSIGN_", "DATABASE_URL", "CELERY_"))
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "COUNTERSIGN_ENV": "test",
            "DATABASE_URL": db_url,
            "CELERY_BROKER_URL": broker_url,
            "COUNTERSIGN_QUEUE": queue,
            "COUNTERSIGN_WORKER_PUBLIC_KEY": public_key,
            "COUNTERSIGN_DB_CONN_MAX_AGE": "0",
            "PYTHONUNBUFFERED": "1",
        }
    )
    # Keys that web and worker must share with the test process.
    from django.conf import settings

    env["COUNTERSIGN_SECRET_KEY"] = settings.SECRET_KEY
    env["COUNTERSIGN_FERNET_KEYS"] = ",".join(settings.COUNTERSIGN_FERNET_KEYS)
    # Everyone may verify audit checkpoints; only a sealer is given the private key.
    env["COUNTERSIGN_AUDIT_PUBLIC_KEY"] = settings.COUNTERSIGN_AUDIT_PUBLIC_KEY
    env["COUNTERSIGN_AUDIT_ORIGIN"] = settings.COUNTERSIGN_AUDIT_ORIGIN
    env.update(extra or {})
    return env


def start_web(
    env: dict,
    log_dir: Path,
    *,
    name: str = "web",
    workers: int | None = None,
    port: int | None = None,
    host_name: str = "127.0.0.1",
    python: str = sys.executable,
    cwd: Path = ROOT,
    access_log: bool = False,
) -> tuple[Process, str]:
    """The web server (``python -m config.web``) on ``port`` (a free one by default);
    ``workers`` > 1 runs that many uvicorn processes under its supervisor, each on a
    listening socket of its own (as in production). It listens on 127.0.0.1;
    ``host_name`` is the name its public URL uses (``localhost`` for passkeys, which an
    IP address cannot be the relying party of). ``python`` and ``cwd``: another
    checkout's interpreter and directory. ``access_log``: a line per request in its log,
    as uvicorn writes by default (off unless asked: the suite's logs stay readable)."""
    port = port or free_port()
    url = f"http://{host_name}:{port}"
    env = {**env, "COUNTERSIGN_PUBLIC_URL": url}
    args = [
        python,
        "-m",
        "config.web",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--access-log" if access_log else "--no-access-log",
        "--lifespan",
        "off",
    ]
    if workers:
        args += ["--workers", str(workers)]
    proc = Process(name, args, env, log_dir, cwd)
    deadline = time.monotonic() + 30 + 10 * (workers or 0)
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"web server exited:\n{proc.log()}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=1)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.stop()
    raise RuntimeError(f"web server did not start:\n{proc.log()}")


def worker_args(
    name: str,
    concurrency: int = 1,
    beat_schedule: Path | None = None,
    python: str = sys.executable,
) -> list[str]:
    """The command line of a Celery worker; with ``beat_schedule`` it also runs the
    sweeper's beat (embedded, ``-B``), keeping its schedule in that file."""
    args = [
        python,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        "--loglevel=INFO",
        f"--concurrency={concurrency}",
        "--pool=prefork",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-n",
        f"{name}@%h",
    ]
    if beat_schedule is not None:
        args += ["-B", "-s", str(beat_schedule)]
    return args


def wait_ready(proc: Process, timeout: float = 40) -> Process:
    """Wait for a worker started with ``start_worker(wait=False)`` to consume."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"worker exited:\n{proc.log()}")
        if " ready." in proc.log():
            return proc
        time.sleep(0.1)
    proc.stop()
    raise RuntimeError(f"worker did not become ready:\n{proc.log()}")


def start_worker(
    env: dict,
    log_dir: Path,
    name: str = "worker",
    concurrency: int = 1,
    *,
    beat_schedule: Path | None = None,
    wait: bool = True,
    python: str = sys.executable,
    cwd: Path = ROOT,
) -> Process:
    args = worker_args(name, concurrency, beat_schedule, python)
    proc = Process(name, args, env, log_dir, cwd)
    return wait_ready(proc) if wait else proc
