from __future__ import annotations

from wsgiref.simple_server import WSGIRequestHandler, make_server

from django.core.management.base import BaseCommand, CommandError
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4

from actions.lib.metrics import multiprocess_dir
from approvals.ops.monitoring import metrics_allowed, metrics_configured, metrics_text


class _Quiet(WSGIRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002 - the stdlib's name
        pass  # one line per scrape would drown the log


def application(environ, start_response):
    """GET /metrics with the web processes' rules (token or allow-list); nothing else."""
    if environ.get("PATH_INFO") != "/metrics" or environ.get("REQUEST_METHOD") != "GET":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]
    if not metrics_allowed(
        authorization=environ.get("HTTP_AUTHORIZATION"), remote_addr=environ.get("REMOTE_ADDR")
    ):
        start_response(
            "401 Unauthorized",
            [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Bearer realm="metrics"')],
        )
        return [b"not allowed\n"]
    body = metrics_text(database=False)
    start_response("200 OK", [("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)])
    return [body]


class Command(BaseCommand):
    help = (
        "Serve GET /metrics for a host that runs workers and no web server: the counters "
        "and histograms of this host's processes (PROMETHEUS_MULTIPROC_DIR), guarded like "
        "the web's /metrics (COUNTERSIGN_METRICS_TOKEN / COUNTERSIGN_METRICS_ALLOW). The "
        "database's figures come from the web processes' /metrics."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=9464)

    def handle(self, *args, **options):
        if not multiprocess_dir():
            raise CommandError("set PROMETHEUS_MULTIPROC_DIR to the directory the workers use")
        if not metrics_configured():
            raise CommandError("set COUNTERSIGN_METRICS_TOKEN or COUNTERSIGN_METRICS_ALLOW")
        with make_server(
            options["host"], options["port"], application, handler_class=_Quiet
        ) as server:
            self.stdout.write(f"serving /metrics on {options['host']}:{options['port']}")
            self.stdout.flush()
            server.serve_forever()
