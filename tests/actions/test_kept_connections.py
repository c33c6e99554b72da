"""The kept upstream connections (actions/lib/http.py): reused across executions and
previews, but never across roles or connectors, never carrying a credential of their
own, never inherited by a forked child, and never the cause of a write sent twice."""

from __future__ import annotations

import os
import socketserver
import threading
import time
from types import SimpleNamespace

import pytest

from actions.lib import http
from actions.lib.exceptions import UpstreamError
from actions.lib.http import ReadOnlyClient, WriteClient


class _Upstream(socketserver.ThreadingTCPServer):
    """A bare HTTP/1.1 server that logs every request with the connection it came on.

    ``after_answer = "close"``: it closes each connection after answering (without saying
    so), as a server does when a kept connection has been idle too long.
    ``drop_second``: the second request on a connection is read in full and the
    connection closed without an answer, as a server going away just then would."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.log: list[tuple[int, str, str | None]] = []
        self.connections = 0
        self.after_answer = "keep"
        self.drop_second = False
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        server = self.server
        with server.lock:
            server.connections += 1
            number = server.connections
        served = 0
        while True:
            request = self._read_request()
            if request is None:
                return
            line, headers = request
            with server.lock:
                server.log.append((number, line, headers.get("authorization")))
            served += 1
            if server.drop_second and served == 2:
                return
            body = b'{"ok": true}'
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            self.wfile.flush()
            if server.after_answer == "close":
                return

    def _read_request(self):
        line = self.rfile.readline().decode().strip()
        if not line:
            return None
        headers = {}
        while (header := self.rfile.readline().decode().strip()) != "":
            name, _, value = header.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.rfile.read(int(headers.get("content-length", "0")))
        return line, headers


@pytest.fixture
def upstream_raw():
    server = _Upstream()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    http.kept_clients_clear()
    yield server
    http.kept_clients_clear()
    server.shutdown()
    server.server_close()


def _connector(url: str, pk: int = 1, **overrides) -> SimpleNamespace:
    fields = {"pk": pk, "name": "raw", "base_url": url, "connect_timeout": 3.0}
    return SimpleNamespace(**{**fields, "read_timeout": 5.0, **overrides})


def test_reads_and_writes_keep_their_own_connections_and_credentials(upstream_raw):
    connector = _connector(upstream_raw.url)
    for n in range(3):
        with ReadOnlyClient(connector, {"Authorization": "Bearer read-token"}) as reader:
            assert reader.get("/things/x").status == 200
        with WriteClient(connector, {"Authorization": "Bearer write-token"}) as writer:
            assert writer.request("PUT", "/things/x", body={"n": n}).status == 200
    # Two connections for six requests: one kept per role, reused across clients.
    assert upstream_raw.connections == 2
    by_connection: dict[int, set] = {}
    for number, line, authorization in upstream_raw.log:
        by_connection.setdefault(number, set()).add((line.split()[0], authorization))
    assert sorted(map(sorted, by_connection.values())) == [
        [("GET", "Bearer read-token")],
        [("PUT", "Bearer write-token")],
    ]


def test_a_kept_client_carries_no_credential(upstream_raw):
    connector = _connector(upstream_raw.url)
    with WriteClient(connector, {"Authorization": "Bearer write-token"}) as writer:
        writer.request("POST", "/things", body={})
    with WriteClient(connector, None) as anonymous:
        assert anonymous._http is writer._http  # the same kept client ...
        anonymous.request("POST", "/things", body={})
    # ... and the request made without a credential went without one.
    assert [entry[2] for entry in upstream_raw.log] == ["Bearer write-token", None]
    assert not writer._http.headers.get("authorization") and not writer._http.auth


@pytest.mark.parametrize(
    "change",
    [
        {"base_url": "http://127.0.0.1:9"},
        {"connect_timeout": 1.0},
        {"read_timeout": 2.0},
        {"pk": 2},
    ],
)
def test_a_connector_configured_otherwise_gets_another_client(upstream_raw, change):
    connector = _connector(upstream_raw.url)
    kept = ReadOnlyClient(connector)._http
    assert ReadOnlyClient(_connector(upstream_raw.url))._http is kept
    assert ReadOnlyClient(_connector(upstream_raw.url, **change))._http is not kept
    assert WriteClient(connector)._http is not kept


def test_the_kept_clients_are_few(upstream_raw):
    for pk in range(http.KEPT_CLIENTS_MAX + 10):
        ReadOnlyClient(_connector(upstream_raw.url, pk=pk))
    assert len(http._kept) == http.KEPT_CLIENTS_MAX
    # The least recently used went: the newest are still kept.
    newest = ReadOnlyClient(_connector(upstream_raw.url, pk=http.KEPT_CLIENTS_MAX + 9))._http
    assert len(http._kept) == http.KEPT_CLIENTS_MAX
    assert list(http._kept.values())[-1] is newest


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_forked_child_does_not_inherit_the_kept_connections(upstream_raw):
    connector = _connector(upstream_raw.url)
    with ReadOnlyClient(connector) as reader:
        assert reader.get("/things/x").status == 200
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing kept, and its own connection when it reads
        try:
            fresh = ReadOnlyClient(connector)
            ok = not http._kept or fresh._http is not reader._http
            ok = ok and fresh.get("/things/y").status == 200
            os.write(write_end, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 1)
    os.waitpid(pid, 0)
    os.close(read_end)
    assert answer == b"1"
    # The parent's kept connection is still its own and still works.
    assert ReadOnlyClient(connector)._http is reader._http
    assert reader.get("/things/z").status == 200
    assert upstream_raw.connections == 2  # the parent's one, and the child's own


def test_a_write_after_the_upstream_closed_the_kept_connection_goes_once_on_a_new_one(
    upstream_raw,
):
    upstream_raw.after_answer = "close"
    connector = _connector(upstream_raw.url)
    writer = WriteClient(connector, {"Authorization": "Bearer write-token"})
    assert writer.request("PUT", "/things/1", body={}).status == 200
    time.sleep(0.05)  # the server's close has arrived
    assert writer.request("PUT", "/things/2", body={}).status == 200
    assert [line for _, line, _ in upstream_raw.log] == [
        "PUT /things/1 HTTP/1.1",
        "PUT /things/2 HTTP/1.1",
    ]
    assert upstream_raw.connections == 2


def test_a_write_lost_on_a_kept_connection_is_never_sent_again(upstream_raw):
    upstream_raw.drop_second = True
    connector = _connector(upstream_raw.url)
    writer = WriteClient(connector, {"Authorization": "Bearer write-token"})
    assert writer.request("PUT", "/things/1", body={}).status == 200
    with pytest.raises(UpstreamError) as lost:
        writer.request("PUT", "/things/2", body={})
    # It reached the upstream once, on the kept connection, and is reported as sent: the
    # worker settles it as unknown (or resends it only with its idempotency key).
    assert lost.value.sent
    assert [line for _, line, _ in upstream_raw.log] == [
        "PUT /things/1 HTTP/1.1",
        "PUT /things/2 HTTP/1.1",
    ]
    assert upstream_raw.connections == 1


def test_a_write_connection_idle_past_its_keepalive_is_not_reused(upstream_raw, monkeypatch):
    monkeypatch.setattr(http, "WRITE_KEEPALIVE_SECONDS", 0.5)
    connector = _connector(upstream_raw.url)
    writer = WriteClient(connector)
    writer.request("PUT", "/things/1", body={})
    writer.request("PUT", "/things/2", body={})
    assert upstream_raw.connections == 1
    time.sleep(0.7)
    writer.request("PUT", "/things/3", body={})
    assert upstream_raw.connections == 2
