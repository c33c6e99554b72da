"""Process and database helpers shared by the runs that start real processes
(``bench/run.py``, the screenshots).

The process primitives themselves (``Process``, ``start_worker``, ``start_web`` ...) live
in ``demo/processes.py`` and are re-exported here; this module adds what a benchmark
needs on top: a scratch PostgreSQL database, the demo upstream as its own process, a
stack that stops everything it started, and readings from ``/proc`` of the process trees
we started (resident memory, CPU time, threads).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from demo.processes import (  # noqa: E402,F401  (re-exported)
    Process,
    base_env,
    database_url,
    free_port,
    start_web,
    start_worker,
    wait_ready,
    worker_args,
)

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


# --- scratch database ------------------------------------------------------------------


def scratch_database(url: str, suffix: str) -> tuple[str, str]:
    """Create a scratch database next to the one in ``url``; returns (its URL, its name)."""
    import psycopg

    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise SystemExit("needs DATABASE_URL=postgres://… (PostgreSQL)")
    name = f"{parts.path.lstrip('/') or 'countersign'}_{suffix}_{os.getpid()}"
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(parts._replace(path=f"/{name}")), name


def drop_database(url: str, name: str) -> None:
    import psycopg

    admin = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- starting and stopping -------------------------------------------------------------


def wait_port(port: int, proc: Process, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited:\n{proc.log()[-3000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{proc.name} did not listen on {port}:\n{proc.log()[-3000:]}")


def start_upstream(env: dict, log_dir: Path, read_token: str, write_token: str):
    """The demo upstream as a process of its own; returns (process, base URL)."""
    port = free_port()
    proc = Process(
        "upstream",
        [
            sys.executable,
            "-m",
            "demo.upstream",
            "--port",
            str(port),
            "--read-token",
            read_token,
            "--write-token",
            write_token,
        ],
        env,
        log_dir,
    )
    wait_port(port, proc)
    return proc, f"http://127.0.0.1:{port}"


class Stack:
    """Everything started, stopped in reverse order whatever happens."""

    def __init__(self) -> None:
        self.procs: list[Process] = []

    def add(self, proc: Process) -> Process:
        self.procs.append(proc)
        return proc

    def stop(self, proc: Process, timeout: float = 15) -> None:
        proc.stop(timeout=timeout)
        if proc in self.procs:
            self.procs.remove(proc)

    def close(self) -> None:
        while self.procs:
            proc = self.procs.pop()
            with contextlib.suppress(Exception):
                proc.stop(timeout=15)

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- /proc readings ----------------------------------------------------------------------


def children_of(pid: int) -> list[int]:
    """Every descendant of ``pid`` (uvicorn's workers, Celery's pool and beat)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@dataclass
class Reading:
    rss_kb: int  # VmRSS summed over the tree (shared pages counted in each process)
    cpu_seconds: float  # user + system, summed over the tree
    threads: int
    processes: int


def _status_field(pid: int, name: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    return 0


def read_tree(pid: int) -> Reading:
    rss = threads = count = 0
    cpu = 0.0
    for p in [pid, *children_of(pid)]:
        try:
            rss += _status_field(p, "VmRSS")
            threads += _status_field(p, "Threads")
            with open(f"/proc/{p}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
            count += 1
        except (OSError, ValueError, IndexError):
            continue
    return Reading(rss, cpu, threads, count)


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores (/proc/stat):
    what every process took, this run's and anyone else's."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle, iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return (total - idle) / CLOCK_TICKS, total / CLOCK_TICKS


def machine_facts() -> dict:
    import platform

    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError), open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    load = os.getloadavg()
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_at_start": [round(x, 2) for x in load],
    }
