"""The preview side of an MCP server: a session started with the connector's read
credential only, and a client that refuses every tool the catalog does not declare as a
read (a read action's tool, a paired read) or as a dry run (and then only with the
dry-run flag set to its "only show" value). That refusal is the boundary where the
server has no credential of its own to tell a reader from a writer (a local filesystem
server): it plays the part the HTTP read client's GET-only rule plays.

Reading a target: the paired read tool's result (its text, its text parsed as JSON, or
its structured content, then a pointer into it) is the document; or the tool's own dry
run's output is. Its version is the hash of that document, or a declared field."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from actions.cache import cached
from actions.lib.canonical import CanonicalJSONError, digest, loads_strict, resolve_pointer
from actions.models import Action, Credential
from actions.spec import compile_pattern

from ..base import STRONG, PreviewError, Read, UpstreamEchoesSecrets, UpstreamTimeout
from .pins import pins_of
from .servers import read_server
from .sessions import McpCallLost, McpError, McpUnavailable, session_for

log = logging.getLogger(__name__)


class ReadRefused(PreviewError):
    """The preview side was asked to call a tool that is not declared a read or a dry
    run: nothing was sent."""

    status = 409  # the catalog's declarations and the call disagree: never the agent's input
    type = "mcp-read-refused"
    title = "The preview side refuses to call this tool"


def declared_reads(connector) -> tuple[frozenset[str], dict[str, tuple[str, bool]]]:
    """(tools declared as reads, {tool: (dry-run argument, its only-show value)}) for
    ``connector``, from the catalog as of its generation."""

    def load():
        reads: set[str] = set()
        dry: dict[str, tuple[str, bool]] = {}
        for action in Action.objects.filter(connector_id=connector.pk).only("name", "definition"):
            mcp = action.spec.mcp
            if mcp is None:
                continue
            if mcp.recipe == "read":
                reads.add(mcp.tool)
            elif mcp.recipe == "paired_read":
                reads.add(mcp.paired.tool)
            elif mcp.recipe == "dry_run":
                dry[mcp.tool] = (mcp.dry_argument, mcp.dry_value)
        return frozenset(reads), dry

    return cached("mcp_reads", connector.pk, load)


def read_refusal(connector, tool: str, arguments: dict[str, Any], declared=None) -> str | None:
    """Why the preview side may not call ``tool`` with ``arguments`` (None: it may).
    ``declared``: ``declared_reads(connector)`` as the caller's snapshot saw it."""
    reads, dry = declared_reads(connector) if declared is None else declared
    if tool in reads:
        return None
    if tool in dry:
        argument, value = dry[tool]
        if arguments.get(argument) is value:
            return None
        return f"refused: {tool} may be called here only as a dry run ({argument}={value})"
    return f"refused: {tool} is not declared a read or a dry run of {connector.name}"


class McpReader:
    """The preview side's client for one MCP connector (its read credential only)."""

    def __init__(self, connector) -> None:
        self.connector = connector
        credential = connector.credential(Credential.Role.READ)
        self._spec = read_server(connector, credential)
        # What the catalog declares and confirmed, as of the moment the reader opens (a
        # submission opens it within its catalog snapshot: no further lookups).
        self.declared = declared_reads(connector)
        self.pins = pins_of(connector)

    def __enter__(self) -> McpReader:
        return self

    def __exit__(self, *exc: object) -> None:
        pass  # the session is kept for the next caller

    def close(self) -> None:
        pass

    def _session(self):
        return session_for((self.connector.pk, "read"), self._spec)

    def tools(self) -> list[dict[str, Any]]:
        try:
            return self._session().list_tools()
        except McpError as exc:
            raise _preview_error(exc, "listing its tools") from None

    def call(self, tool: str, arguments: dict[str, Any]):
        """One tool call, only if it is declared a read or a dry run."""
        why = read_refusal(self.connector, tool, arguments, self.declared)
        if why is not None:
            log.warning("MCP preview of %s: %s", self.connector.name, why)
            raise ReadRefused(why)
        try:
            return self._session().call_tool(tool, arguments, timeout=self.connector.read_timeout)
        except McpError as exc:
            raise _preview_error(exc, f"calling {tool}") from None


def _preview_error(exc: McpError, doing: str) -> PreviewError:
    if isinstance(exc, McpCallLost):
        return UpstreamTimeout(f"the MCP server did not answer in time ({doing})")
    if isinstance(exc, McpUnavailable):
        return PreviewError(f"the MCP server could not be reached: {exc}")
    return PreviewError(f"the MCP server misbehaved ({doing}): {exc}")


_ECHOED = (
    "the MCP server's answer to the read repeated a credential it was given; nothing "
    "was stored (fix the server, then propose again)"
)


def read_target(reader: McpReader, spec, values: dict[str, Any]) -> Read:
    """The target as the paired read (or the tool's own dry run) finds it."""
    mcp = spec.mcp
    if mcp.recipe == "dry_run":
        result = reader.call(mcp.tool, mcp.dry_arguments(values))
        if result.secret_echoed:
            raise UpstreamEchoesSecrets(_ECHOED)
        if result.is_error:
            raise PreviewError(
                f"the dry run of {mcp.tool} reported an error: the change cannot be made "
                "as proposed"
            )
        # What the tool shows (its text); its structured content only when it sent no text.
        document = result.text if result.text or result.structured is None else result.structured
        return Read(exists=True, body=document, version=document_version(document), strength=STRONG)
    paired = mcp.paired
    result = reader.call(paired.tool, mcp.render_read_arguments(values))
    if result.secret_echoed:
        raise UpstreamEchoesSecrets(_ECHOED)
    if result.is_error:
        if paired.error_matches and _matches(paired.error_matches, result.text):
            return Read(exists=False, body=None, version=None)
        raise PreviewError(f"the read tool {paired.tool} reported an error")
    if paired.text_matches and _matches(paired.text_matches, result.text):
        return Read(exists=False, body=None, version=None)
    document = _document(paired, result)
    if paired.pointer:
        try:
            document = resolve_pointer(document, paired.pointer)
        except (KeyError, IndexError, TypeError):
            return Read(exists=False, body=None, version=None)
    if spec.version is not None and spec.version.source == "field":
        try:
            version = resolve_pointer(document, spec.version.field)
        except (KeyError, IndexError, TypeError):
            raise PreviewError(
                f"the read tool's document has no version field {spec.version.field}"
            ) from None
    else:
        version = document_version(document)
    return Read(exists=True, body=document, version=version, strength=STRONG)


def _document(paired, result) -> Any:
    if paired.result == "text":
        return result.text
    if paired.result == "structured":
        if result.structured is None:
            raise PreviewError(f"the read tool {paired.tool} sent no structured content")
        return result.structured
    try:
        return loads_strict(result.text)
    except (CanonicalJSONError, ValueError):
        raise PreviewError(f"the read tool {paired.tool} did not answer JSON text") from None


def _matches(pattern: str, text: str) -> bool:
    return compile_pattern(pattern).search(text) is not None


def document_version(document: Any) -> str:
    """The hash of a document: its canonical JSON's, or, for one canonical JSON cannot
    carry (a number beyond its range), the hash of its sorted JSON text."""
    try:
        return digest(document)
    except CanonicalJSONError:
        text = json.dumps(document, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
