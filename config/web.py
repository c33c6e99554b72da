"""The web server: ``python -m config.web --workers N`` runs N uvicorn processes that each
listen on a socket of their own, bound to the same address with ``SO_REUSEPORT``, so the
kernel spreads new connections over the processes.

``uvicorn --workers N`` shares one listening socket instead, and the process whose event
loop wakes first accepts every connection waiting (asyncio accepts in a loop): eight
agents connecting at once all landed on one of two processes, which then did all the
work on one core while the other idled (docs/benchmarks/analysis.md, *The web
processes*). Kept-alive connections stay where they landed, so that imbalance lasted as
long as they did.

The options are uvicorn's, with its defaults, for what the deployment files use; each
worker process runs ``config.asgi:application``. A worker that dies is replaced, unless
they keep dying as they start (a bad setting): then the server stops with status 1.
SIGTERM or SIGINT stop them all (each finishes the requests it has, as uvicorn does). A
port held by another program is refused at once; two of these servers started on one
port by the same user would share it, as ``SO_REUSEPORT`` allows.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time

import uvicorn

APP = "config.asgi:application"
logger = logging.getLogger("uvicorn.error")
# A worker that exits sooner than this after it started failed to start; this many such
# exits in a row, with none lasting longer in between, stop the server.
FAILED_START_SECONDS = 10.0
FAILED_STARTS = 5


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m config.web", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1, help="web processes")
    parser.add_argument("--backlog", type=int, default=2048)
    parser.add_argument("--timeout-keep-alive", type=int, default=5)
    # uvicorn's defaults: X-Forwarded-* trusted from FORWARDED_ALLOW_IPS, else 127.0.0.1.
    parser.add_argument("--proxy-headers", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--forwarded-allow-ips", default=None)
    parser.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--lifespan", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--log-level", default=None)
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if not 0 < args.port < 65536:
        parser.error("--port must be between 1 and 65535")
    return args


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    return sock


def config_for(args: argparse.Namespace):
    return uvicorn.Config(
        APP,
        host=args.host,
        port=args.port,
        backlog=args.backlog,
        timeout_keep_alive=args.timeout_keep_alive,
        proxy_headers=args.proxy_headers,
        forwarded_allow_ips=args.forwarded_allow_ips,
        access_log=args.access_log,
        lifespan=args.lifespan,
        log_level=args.log_level,
    )


def serve(args: argparse.Namespace) -> None:
    """One worker process: its own socket on the shared port, then uvicorn on it."""
    config = config_for(args)
    sock = listening_socket(args.host, args.port, args.backlog)
    uvicorn.Server(config).run(sockets=[sock])


class Supervisor:
    """Starts the worker processes, replaces one that dies, stops them all on a signal."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.context = multiprocessing.get_context("spawn")
        self.processes: list[tuple[multiprocessing.process.BaseProcess, float]] = []
        self.stopping = threading.Event()

    def start_one(self) -> tuple[multiprocessing.process.BaseProcess, float]:
        process = self.context.Process(target=serve, args=(self.args,), name="countersign-web")
        process.start()
        return process, time.monotonic()

    def stop(self, *_signal) -> None:
        self.stopping.set()

    def run(self) -> int:
        # Bind once here first, so a port in use fails now, with one message, not once per
        # worker; the probe is closed before any worker binds.
        listening_socket(self.args.host, self.args.port, self.args.backlog).close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.stop)
        logger.info("Started parent process [%d]", os.getpid())
        self.processes = [self.start_one() for _ in range(self.args.workers)]
        failed_starts, last_failure, status = 0, 0.0, 0
        while not self.stopping.wait(0.5):
            for index, (process, started) in enumerate(self.processes):
                if process.is_alive() or self.stopping.is_set():
                    # One started after the last failure is up and stays up: it started.
                    if started > last_failure and time.monotonic() - started > FAILED_START_SECONDS:
                        failed_starts = 0
                    continue
                if time.monotonic() - started < FAILED_START_SECONDS:
                    failed_starts, last_failure = failed_starts + 1, time.monotonic()
                if failed_starts >= FAILED_STARTS:
                    logger.error(
                        "web processes keep exiting as they start (%d in a row); stopping",
                        failed_starts,
                    )
                    status = 1
                    self.stopping.set()
                    break
                logger.warning(
                    "web process %d exited with %s; starting another",
                    process.pid,
                    process.exitcode,
                )
                self.processes[index] = self.start_one()
        for process, _ in self.processes:
            if process.is_alive():
                os.kill(process.pid, signal.SIGTERM)
        for process, _ in self.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join()
        logger.info("Stopping parent process [%d]", os.getpid())
        return status


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    config = config_for(args)  # also sets up uvicorn's logging, for the lines below
    try:
        if args.workers == 1:
            uvicorn.Server(config).run()
            return 0
        return Supervisor(args).run()
    except OSError as exc:
        print(f"countersign web: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
