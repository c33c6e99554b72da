"""What a tool's answer means. ``isError: true`` is the server refusing the call: the
plan is ``rejected``, and the agent reads Countersign's words, never the server's (its
text is kept, filtered, for people). Any other answer is a completed call; whether the
change is the one planned is for the read-back to say."""

from __future__ import annotations

from ..base import Outcome, Verdict


def verdict(spec, answer) -> Verdict:
    if answer.is_error:
        return Verdict(
            Outcome.REJECTED,
            f"the tool {spec.mcp.tool} reported an error; nothing is known to have changed",
        )
    return Verdict(Outcome.COMPLETED, f"the tool {spec.mcp.tool} completed")


def read_refusal(spec, answer) -> str | None:
    """Why an observation's answer gives nothing to the agent (None: it is the target)."""
    if answer.secret_echoed:
        return "the MCP server's answer repeated a credential; nothing is returned"
    if answer.is_error:
        return f"the tool {spec.mcp.tool} reported an error; nothing is returned"
    return None
