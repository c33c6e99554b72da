"""Sessions with upstream MCP servers (actions/connectors/mcp/sessions.py), against real
servers: the suite's hostile stdio server (tests/mcp/upstreams/hostile.py) in each of its
modes, and the SDK's own server over Streamable HTTP (tests/mcp/upstreams/http_server.py).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import uuid
import warnings
from pathlib import Path

import pytest

from actions.connectors.mcp import sessions
from actions.connectors.mcp.sessions import (
    McpCallLost,
    McpProtocolError,
    McpUnavailable,
    ServerSpec,
    pool_clear,
    processes_started,
    session_for,
)
from actions.lib.redaction import forget_secrets, remember_secrets
from tests.mcp.upstreams.servers import require_git_server

UPSTREAMS = Path(__file__).resolve().parent.parent / "mcp" / "upstreams"
HOSTILE = str(UPSTREAMS / "hostile.py")
SECRET = "hostile-secret-" + uuid.uuid4().hex


@pytest.fixture(autouse=True)
def clean_pool():
    pool_clear()
    yield
    pool_clear()
    forget_secrets()


def stdio(mode: str, *, env: dict[str, str] | None = None, **kw) -> ServerSpec:
    return ServerSpec(
        transport="stdio",
        command=sys.executable,
        args=(HOSTILE, mode),
        env=tuple((env or {}).items()),
        **kw,
    )


def alive(pid: int) -> bool:
    """Is ``pid`` a live process (a zombie counts: it was never reaped)?"""
    return Path(f"/proc/{pid}").exists()


def running(pid: int) -> bool:
    """Is ``pid`` running (not a zombie)? For a process that is not this one's child:
    only its own parent, or init, can reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def wait_gone(pid_list: list[int], timeout: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(pid) for pid in pid_list):
        time.sleep(0.05)
    return [pid for pid in pid_list if alive(pid)]


# --- a well-behaved server ---------------------------------------------------------------


def test_a_pooled_session_is_reused_and_falls_back_to_the_handshake():
    spec = stdio("ok")
    session = session_for(("connector", "read"), spec)
    assert session.call_tool("add", {"a": 2, "b": 3}).structured == {"sum": 5}
    warm = processes_started()
    for n in range(50):
        result = session_for(("connector", "read"), spec).call_tool("echo", {"n": n})
        assert result.structured == {"echo": {"n": n}} and not result.is_error
    assert processes_started() == warm
    # The hostile server only speaks the handshake era: "auto" fell back to initialize.
    assert session.protocol_version == "2025-11-25"
    tools = session.list_tools()
    assert [tool["name"] for tool in tools] == ["echo", "add"]
    assert tools[1]["outputSchema"]["required"] == ["sum"]
    assert tools[1]["annotations"] == {"readOnlyHint": True}


def test_a_result_is_shaped_and_capped(settings):
    session = session_for("k", stdio("ok"))
    result = session.call_tool("echo", {"text": "hello"})
    assert result.text == '{"text": "hello"}'
    assert result.content == [{"type": "text", "text": '{"text": "hello"}'}]
    assert result.raw.startswith(b'{"content":') and b'"isError":false' in result.raw
    assert result.elapsed_ms >= 0 and result.secret_echoed is False
    refused = session.call_tool("fail", {})
    assert refused.is_error and refused.error_code == -32000
    settings.COUNTERSIGN_MCP_MAX_RESULT_BYTES = 1000
    with pytest.raises(McpProtocolError) as caught:
        session.call_tool("echo", {"text": "z" * 5000})
    assert caught.value.sent is True and "over 1000 bytes" in str(caught.value)


def test_tools_are_listed_page_by_page_and_notes_kept(tmp_path):
    note = tmp_path / "note.txt"
    note.write_text("first")
    spec = stdio("ok", env={"PAGE_SIZE": "1", "NOTE_FILE": str(note)})
    session = session_for("notes", spec)
    assert [tool["name"] for tool in session.list_tools()] == [
        "echo",
        "add",
        "read_note",
        "write_note",
    ]
    assert session.call_tool("write_note", {"text": "second"}).text == "first"
    assert note.read_text() == "second"
    assert session.call_tool("read_note", {}).structured == {"text": "second"}


def test_descriptions_are_capped():
    session = session_for("long", stdio("ok", env={"LONG_DESCRIPTION": "50000"}))
    description = session.list_tools()[0]["description"]
    assert len(description) == sessions.MAX_DESCRIPTION_CHARS + 1 and description.endswith("…")


def test_a_session_handed_out_before_pool_clear_is_closed_for_good(tmp_path):
    pid_file = tmp_path / "pids"
    session = session_for("kept", stdio("ok", env={"PID_FILE": str(pid_file)}))
    session.call_tool("echo", {})
    pool_clear()
    with pytest.raises(McpUnavailable, match="ask session_for for a new one"):
        session.call_tool("echo", {})
    assert len(pids(pid_file)) == 1 and wait_gone(pids(pid_file)) == []


def test_concurrent_callers_share_at_most_the_pool_size(settings):
    settings.COUNTERSIGN_MCP_SESSIONS_PER_SERVER = 2
    spec = stdio("ok")
    before = processes_started()
    results, errors = [], []

    def work(n: int) -> None:
        try:
            for i in range(5):
                results.append(session_for("busy", spec).call_tool("add", {"a": n, "b": i}))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors and len(results) == 40
    assert 1 <= processes_started() - before <= 2


def test_a_changed_spec_replaces_the_pooled_sessions(tmp_path):
    pid_file = tmp_path / "pids"
    first = session_for("k", stdio("ok", env={"PID_FILE": str(pid_file)}))
    first.call_tool("echo", {})
    (old,) = pids(pid_file)
    second = session_for("k", stdio("ok", env={"PID_FILE": str(pid_file), "X": "1"}))
    second.call_tool("echo", {})
    assert wait_gone([old]) == []
    assert len(pids(pid_file)) == 2 and alive(pids(pid_file)[1])


# --- failures: start, crash, hang --------------------------------------------------------


def test_a_server_that_never_starts_is_unavailable_in_bounded_time():
    started = time.monotonic()
    with pytest.raises(McpUnavailable) as caught:
        session_for("a", stdio("never-starts")).call_tool("echo", {})
    assert str(caught.value).startswith("the MCP server did not start")
    assert caught.value.sent is False
    assert time.monotonic() - started < 5

    started = time.monotonic()
    with pytest.raises(McpUnavailable) as caught:
        session_for("b", stdio("mute", connect_timeout=1.0)).call_tool("echo", {})
    assert "within 1 s" in str(caught.value)
    assert time.monotonic() - started < 5

    wrong = ServerSpec(transport="stdio", command="/nonexistent/mcp-server", env=(("K", SECRET),))
    with pytest.raises(McpUnavailable) as caught:
        session_for("c", wrong).list_tools()
    assert "could not be run" in str(caught.value) and SECRET not in str(caught.value)


def test_a_crashed_server_is_restarted_with_backoff(tmp_path):
    pid_file = tmp_path / "pids"
    spec = stdio("die-on-call", env={"PID_FILE": str(pid_file)})
    with pytest.raises(McpCallLost) as caught:
        session_for("d", spec).call_tool("echo", {})
    assert caught.value.sent is True
    assert "closed the connection" in str(caught.value)
    # At once: the server is not started again in a tight loop.
    with pytest.raises(McpUnavailable, match="started again in"):
        session_for("d", spec).call_tool("echo", {})
    assert len(pids(pid_file)) == 1
    time.sleep(0.6)
    with pytest.raises(McpCallLost):
        session_for("d", spec).call_tool("echo", {})
    assert len(pids(pid_file)) == 2
    # The second failure waits longer (1 s).
    time.sleep(0.6)
    with pytest.raises(McpUnavailable, match="failed 2 time"):
        session_for("d", spec).call_tool("echo", {})
    assert len(pids(pid_file)) == 2
    assert wait_gone(pids(pid_file)) == []


def test_a_hung_call_is_lost_and_the_session_still_serves():
    session = session_for("h", stdio("hang"))
    assert session.list_tools()
    started = time.monotonic()
    with pytest.raises(McpCallLost) as caught:
        session.call_tool("echo", {}, timeout=0.5)
    assert caught.value.sent is True and "within 0.5 s" in str(caught.value)
    assert time.monotonic() - started < 3
    warm = processes_started()
    session._conn.tools = None  # force a fresh tools/list
    assert [tool["name"] for tool in session.list_tools()] == ["echo", "add"]
    assert processes_started() == warm


# --- hostile output ----------------------------------------------------------------------


def test_a_huge_line_drops_the_session_in_bounded_memory(settings, tmp_path):
    settings.COUNTERSIGN_MCP_MAX_MESSAGE_BYTES = 1024 * 1024
    pid_file = tmp_path / "pids"
    session = session_for("huge", stdio("huge-line", env={"PID_FILE": str(pid_file)}))
    session.list_tools()
    tracemalloc.start()
    try:
        with pytest.raises(McpProtocolError) as caught:
            session.call_tool("echo", {})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.sent is True
    assert "over 1048576 bytes" in str(caught.value)
    # The server wrote 32 MiB on one line; at most the limit and a chunk were held.
    assert peak < 8 * 1024 * 1024
    assert wait_gone(pids(pid_file)) == []


def test_invalid_lines_are_tolerated_up_to_a_bound():
    few = session_for("few", stdio("invalid-json", env={"INVALID_LINES": "5"}))
    assert few.call_tool("echo", {"x": 1}).structured == {"echo": {"x": 1}}
    many = session_for("many", stdio("invalid-json", env={"INVALID_LINES": "150"}))
    with pytest.raises(McpProtocolError, match="too many invalid messages") as caught:
        many.call_tool("echo", {})
    assert caught.value.sent is True


def test_a_stderr_flood_neither_blocks_calls_nor_grows_memory():
    session = session_for("noisy", stdio("stderr-flood"))
    started = time.monotonic()
    for n in range(20):
        assert session.call_tool("add", {"a": n, "b": 1}).structured == {"sum": n + 1}
    assert time.monotonic() - started < 10
    tail = session.stderr_tail()
    assert 0 < len(tail) <= 8 * 1024 + 20 and set(tail.replace("\n", "")) <= {"E", "…"}
    assert len(session._last_stdio._stderr) <= 8 * 1024


def test_a_notification_flood_drops_the_session():
    calm = session_for("calm", stdio("notification-flood", env={"FLOOD_COUNT": "500"}))
    assert calm.call_tool("add", {"a": 1, "b": 1}).structured == {"sum": 2}
    flood = session_for("flood", stdio("notification-flood"))
    with pytest.raises(McpProtocolError, match="too many notifications"):
        flood.call_tool("echo", {})


def test_a_flood_of_answers_nobody_asked_for_drops_the_session():
    calm = session_for("calm", stdio("answer-flood", env={"FLOOD_COUNT": "500"}))
    assert calm.call_tool("add", {"a": 1, "b": 1}).structured == {"sum": 2}
    flood = session_for("flood", stdio("answer-flood"))
    with pytest.raises(McpProtocolError, match="answers nobody asked for"):
        flood.call_tool("echo", {})


def test_sampling_elicitation_and_roots_are_refused_and_the_call_answered(caplog):
    caplog.set_level(logging.WARNING, logger="actions.connectors.mcp.sessions")
    session = session_for("asks", stdio("sampling"))
    first = session.call_tool("echo", {})
    session.call_tool("echo", {})
    refused, capabilities = first.text.split("; capabilities: ")
    # Each answered with a JSON-RPC error, none with a result; none advertised.
    assert refused.startswith("refused: ") and "answered" not in refused
    assert all(code.startswith("-32") for code in refused[len("refused: ") :].split(","))
    for capability in ("sampling", "elicitation", "roots"):
        assert capability not in capabilities
    warnings_logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sorted(warnings_logged) == [
        f"An MCP server asked for {kind}; Countersign refused it"
        for kind in ("elicitation", "roots", "sampling")
    ]
    assert not any("password" in message for message in warnings_logged)


def test_echoed_secrets_are_scrubbed_everywhere():
    spec = stdio("echo-secrets", env={"SECRET_TOKEN": SECRET}, secrets=(SECRET,))
    session = session_for("echo", spec)
    tools = session.list_tools()
    assert SECRET not in repr(tools) and "[redacted]" in tools[0]["description"]
    result = session.call_tool("echo", {"a": 1})
    assert result.secret_echoed is True
    everything = repr((result.text, result.content, result.structured, result.raw))
    assert SECRET not in everything and "[redacted]" in result.text
    refused = session.call_tool("fail", {})
    assert refused.error_code == -32000 and refused.secret_echoed
    assert SECRET not in refused.text and SECRET.encode() not in refused.raw
    time.sleep(0.1)
    assert "starting with token" in session.stderr_tail()
    assert SECRET not in session.stderr_tail()


def test_what_the_sdk_logs_of_an_upstream_is_scrubbed(caplog):
    remember_secrets([SECRET])
    try:
        raise ValueError(f"input_value='{SECRET}'")
    except ValueError:
        logging.getLogger("mcp.client.streamable_http").exception("Bad JSON: %s", SECRET)
    (record,) = [r for r in caplog.records if r.name == "mcp.client.streamable_http"]
    assert record.getMessage() == "Bad JSON: [redacted] (ValueError)"
    assert record.exc_info is None and SECRET not in caplog.text


def test_list_changed_updates_the_time_and_the_listing():
    session = session_for("changes", stdio("list-changed"))
    assert session.list_tools()[0]["description"] == "Echo the arguments back"
    assert session.tools_changed_at == 0.0
    before = time.monotonic()
    session.call_tool("echo", {})
    assert session.tools_changed_at >= before
    assert session.list_tools()[0]["description"] == "Echo, version 2"


# --- process hygiene ---------------------------------------------------------------------


def test_pool_clear_leaves_no_server_process(tmp_path):
    pid_file = tmp_path / "pids"
    for key in ("one", "two", "three"):
        session_for(key, stdio("ok", env={"PID_FILE": str(pid_file)})).list_tools()
    hang = session_for("hang", stdio("hang", env={"PID_FILE": str(pid_file)}))
    with pytest.raises(McpCallLost):
        hang.call_tool("echo", {}, timeout=0.2)
    started = pids(pid_file)
    assert len(started) == 4 and all(alive(pid) for pid in started)
    pool_clear()
    assert wait_gone(started, timeout=1.0) == []


def test_what_a_server_started_goes_with_it(tmp_path):
    grandchildren = tmp_path / "grandchildren"
    session = session_for("family", stdio("ok", env={"GRANDCHILD_PID_FILE": str(grandchildren)}))
    session.call_tool("echo", {})
    (sleeper,) = pids(grandchildren)
    assert running(sleeper)
    pool_clear()
    deadline = time.monotonic() + 3
    while running(sleeper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(sleeper)


def test_a_forked_child_gets_a_fresh_pool(tmp_path):
    pid_file = tmp_path / "pids"
    spec = stdio("ok", env={"PID_FILE": str(pid_file)})
    parent = session_for("fork", spec)
    parent.call_tool("echo", {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
        child = os.fork()
    if child == 0:
        code = 1
        try:
            fresh = processes_started() == 0 and not sessions._pool
            mine = session_for("fork", spec)
            ok = mine is not parent and mine.call_tool("add", {"a": 1, "b": 2}).text == "3"
            pool_clear()
            code = 0 if fresh and ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # The child started a server of its own and left the parent's alone.
    assert len(pids(pid_file)) == 2
    assert parent.call_tool("add", {"a": 2, "b": 2}).text == "4"


# --- Streamable HTTP ---------------------------------------------------------------------


@pytest.fixture(params=["sse", "json"])
def http_upstream(request):
    """The SDK's MCPServer under uvicorn on 127.0.0.1, checking a bearer token."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token = "http-token-" + uuid.uuid4().hex
    args = [sys.executable, str(UPSTREAMS / "http_server.py"), str(port)]
    if request.param == "json":
        args.append("json")
    process = subprocess.Popen(
        args, env={**os.environ, "MCP_TOKEN": token}, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", token
    finally:
        process.terminate()
        process.wait(10)


def test_a_streamable_http_server_with_a_header_credential(http_upstream):
    url, token = http_upstream
    spec = ServerSpec(
        transport="http",
        url=url,
        headers=(("Authorization", f"Bearer {token}"),),
        secrets=(token,),
    )
    session = session_for("http", spec)
    assert [tool["name"] for tool in session.list_tools()] == ["echo", "big", "whoami"]
    assert session.call_tool("echo", {"text": "hi"}).text == "hi"
    assert session.protocol_version == "2026-07-28"
    warm = processes_started()
    for n in range(10):
        assert session_for("http", spec).call_tool("echo", {"text": str(n)}).text == str(n)
    assert processes_started() == warm
    echoed = session.call_tool("whoami", {})
    assert echoed.secret_echoed and token not in echoed.text and token.encode() not in echoed.raw

    with pytest.raises(McpProtocolError) as caught:
        session.call_tool("big", {"size": 5 * 1024 * 1024})
    assert caught.value.sent is True

    wrong = ServerSpec(transport="http", url=url, headers=(("Authorization", "Bearer nope-nope"),))
    with pytest.raises(McpUnavailable, match=r"refused the credential \(HTTP 401\)"):
        session_for("wrong", wrong).call_tool("echo", {"text": "x"})


def test_an_unreachable_http_server_is_unavailable():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spec = ServerSpec(transport="http", url=f"http://127.0.0.1:{port}/mcp", connect_timeout=2)
    started = time.monotonic()
    with pytest.raises(McpUnavailable, match="did not start"):
        session_for("gone", spec).list_tools()
    assert time.monotonic() - started < 5


# --- a real stdio server ---------------------------------------------------------------


def test_a_real_stdio_server_of_the_2026_era(tmp_path):
    """The reference git server (the SDK's own server code, both eras over stdio)."""
    require_git_server()
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "a.txt").write_text("hi\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    spec = ServerSpec(
        transport="stdio",
        command=sys.executable,
        args=("-m", "mcp_server_git", "--repository", str(repo)),
        connect_timeout=30,
    )
    session = session_for("git", spec)
    names = [tool["name"] for tool in session.list_tools()]
    assert "git_status" in names and "git_commit" in names
    assert session.protocol_version == "2026-07-28"
    status = session.call_tool("git_status", {"repo_path": str(repo)})
    assert not status.is_error and "nothing to commit" in status.text
