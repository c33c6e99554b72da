"""B9: a submission previewed through an MCP server over stdio, against the official MCP
client calling the same read tool on a kept session, in the same run.

The upstream is the real filesystem server (``@modelcontextprotocol/server-filesystem``,
installed by ``npm ci --prefix tests/mcp/upstreams``), fronted by an action whose preview
is a paired read: every submission calls ``read_text_file`` once through the web
process's kept session (and checks the tools' pins against its cached tool list). The
floor is the load generator's own MCP client calling ``read_text_file`` on one session it
keeps: what a preview through that server cannot beat.

(Not named ``mcp.py``: ``bench/run.py`` runs from this directory, where that name would
hide the ``mcp`` package.)

It also counts the server processes the web processes start while the submissions run,
after a warm-up: sessions are kept, so the count must be 0 per 1,000 previews."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench.procs import children_of

ROOT = Path(__file__).resolve().parent.parent
SERVER = (
    ROOT
    / "tests"
    / "mcp"
    / "upstreams"
    / "node_modules"
    / "@modelcontextprotocol"
    / "server-filesystem"
    / "dist"
    / "index.js"
)
BUDGET_B9_RATIO = 0.3

CARD = {
    "effect": "Replaces the text of one file.",
    "scope": "One file under the benchmark's directory.",
    "result": "The file holds the new text.",
    "consent": "A reviewer approves each change.",
    "retry": "Propose again after a stale plan.",
}


def _catalog(node: str, root: Path) -> dict:
    return {
        "version": 1,
        "connectors": {"bench-files": {"mcp": {"command": node, "args": [str(SERVER), str(root)]}}},
        "actions": {
            "bench_write_note": {
                "title": "Replace a note's text",
                "connector": "bench-files",
                "tool": "write_file",
                "kind": "replace",
                "consequence_class": "reversible",
                "card": CARD,
                "target": "{path}",
                "input_schema": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["path", "content"],
                    "properties": {
                        "path": {"type": "string", "maxLength": 300},
                        "content": {"type": "string", "maxLength": 1000},
                    },
                },
                "preview": {
                    "recipe": "paired_read",
                    "read": {
                        "tool": "read_text_file",
                        "arguments": {"path": {"$input": "path"}},
                        "result": "text",
                    },
                    "document": {"$input": "content"},
                },
            }
        },
    }


def _servers(d) -> set[int]:
    """The filesystem server processes the web server's processes started (read from
    /proc; nothing is signalled)."""
    found = set()
    for pid in children_of(d.web.proc.pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"server-filesystem" in cmdline:
            found.add(pid)
    return found


def b9_mcp(d, sizes, say) -> dict:
    from actions.catalog import load_catalog
    from actions.connectors.mcp.pins import tools_confirm
    from actions.connectors.mcp.reading import McpReader
    from actions.models import Connector
    from actions.services import agent_create

    node = shutil.which("node")
    if node is None or not SERVER.is_file():
        raise RuntimeError("B9 needs Node.js and npm ci --prefix tests/mcp/upstreams")
    root = d.work / "b9-files"
    root.mkdir(exist_ok=True)
    note = root / "note.txt"
    note.write_text("a note the benchmark reads\n" * 20)
    load_catalog(json.dumps(_catalog(node, root)))
    connector = Connector.objects.get(name="bench-files")
    with McpReader(connector) as reader:
        tools_confirm(connector, reader.tools(), names=None, actor="bench")
    _, token = agent_create(name="bench-mcp-agent", action_names=["bench_write_note"], active=True)
    body = {
        "action": "bench_write_note",
        "input": {"path": str(note), "content": "{tag} {i}\n"},
        "reason": "bench",
    }
    half = sizes.b1_seconds / sizes.b1_alternations
    runs: dict[str, list[dict]] = {"submit": [], "direct": [], "http": []}
    contacts = d.contacts(sizes.b1_contacts)
    http_offset = 0
    started_during = 0
    previews = 0
    offset = 0
    for round_ in range(sizes.b1_alternations):
        say(f"B9 submit through the MCP server {half:g} s x{sizes.b1_concurrency}")
        before = _servers(d)
        run = d.load(
            {
                "mode": "submit",
                "token": token,
                "path": "/api/v1/plans",
                "contacts": [""],
                "body": body,
                "offset": offset,
                "seconds": half,
                "concurrency": sizes.b1_concurrency,
                "tag": f"b9r{round_}",
                "warmup": 2.0,
            }
        )
        offset = run["next"]
        run.pop("plans", None)
        after = _servers(d)
        if round_ > 0:  # the first round's warm-up starts the sessions
            started_during += len(after - before)
            previews += run["count"]
        runs["submit"].append(run)
        say(f"B9 direct MCP client {half:g} s x{sizes.b1_concurrency}")
        runs["direct"].append(
            d.load(
                {
                    "mode": "mcp_read",
                    "command": node,
                    "args": [str(SERVER), str(root)],
                    "tool": "read_text_file",
                    "arguments": {"path": str(note)},
                    "seconds": half,
                    "concurrency": sizes.b1_concurrency,
                }
            )
        )
        # The same submission on the demo's HTTP upstream, in the same alternation: what
        # fronting an MCP server costs beside fronting an HTTP API.
        say(f"B9 submit through the HTTP upstream {half:g} s x{sizes.b1_concurrency}")
        run = d.load(
            {
                "mode": "submit",
                "path": "/api/v1/plans",
                "contacts": contacts,
                "offset": http_offset,
                "seconds": half,
                "concurrency": sizes.b1_concurrency,
                "tag": f"b9h{round_}",
                "warmup": 1.0,
            }
        )
        http_offset = run["next"]
        run.pop("plans", None)
        runs["http"].append(run)
    out: dict = {"concurrency": sizes.b1_concurrency, "seconds": sizes.b1_seconds}
    for name, parts in runs.items():
        count = sum(p["count"] for p in parts)
        elapsed = sum(p["elapsed"] for p in parts)
        errors: dict[str, int] = {}
        for p in parts:
            for k, v in p["errors"].items():
                errors[k] = errors.get(k, 0) + v
        latencies = sorted(x for p in parts for x in p["latencies"])
        out[name] = {
            "count": count,
            "per_second": count / elapsed if elapsed else 0.0,
            "errors": errors,
            "p50_ms": latencies[len(latencies) // 2] if latencies else 0.0,
        }
    out["ratio"] = out["submit"]["per_second"] / max(out["direct"]["per_second"], 1e-9)
    out["of_http"] = out["submit"]["per_second"] / max(out["http"]["per_second"], 1e-9)
    out["previews_after_warmup"] = previews
    out["processes_started"] = started_during
    out["processes_per_1000"] = started_during * 1000 / max(previews, 1)
    out["budget_ratio"] = BUDGET_B9_RATIO
    return out
