"""The integration examples in docs/integrations.md, run as documented with scripted
models against a live Countersign: the agent proposes, a person approves, the agent
reads the outcome."""

from __future__ import annotations

import re

import anyio
import pytest
from langchain_core.messages import AIMessage, ToolMessage

from actions.models import Agent
from approvals.grants import grant_create
from approvals.models import Plan
from demo.processes import ROOT
from tests.e2e.support import NEW_EMAIL
from tests.mcp.scripted import (
    ScriptedAgentsModel,
    ScriptedChatModel,
    call,
    last_tool_output,
    say,
    tool_call,
)

pytestmark = pytest.mark.e2e

PLAN_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def example(name: str) -> dict:
    """Run the documented code block ``name`` and return what it defined."""
    text = (ROOT / "docs" / "integrations.md").read_text()
    match = re.search(rf"<!-- example: {name} -->\n```python\n(.*?)\n```", text, re.DOTALL)
    assert match, f"docs/integrations.md has no example {name!r}"
    namespace: dict = {"__name__": f"docs_integrations_{name}"}
    exec(compile(match.group(1), f"docs/integrations.md ({name})", "exec"), namespace)
    return namespace


@pytest.fixture
def reads_granted(live, agent, reviewer):
    """The agent works in ws-blue, and a reviewer granted it contact look-ups."""
    Agent.objects.filter(pk=agent.pk).update(attributes={"workspace": "ws-blue"})
    grant_create(creator=reviewer, agent=agent, action_names=["get_contact"], duration_seconds=600)


def test_openai_agents_sdk_example(live, agent_token, rita, upstream, reads_granted):
    from agents import set_tracing_disabled

    set_tracing_disabled(True)  # nothing may leave for a tracing backend
    doc = example("openai-agents")
    state: dict = {}

    def script(items, tools):
        if "read" not in state:
            assert {"get_contact", "update_contact_email", "get_plan"} <= set(tools)
            state["read"] = None
            return call("get_contact", contact_id="c-1001")
        output = last_tool_output(items)
        if state["read"] is None:
            assert "**Read proposed and approved**" in output
            state["read"] = PLAN_ID.search(output).group(0)
            return call("get_plan", plan_id=state["read"], wait=10)
        if "plan" not in state:
            if "**Plan `completed`**" not in output:
                return call("get_plan", plan_id=state["read"], wait=10)
            # The model acts on what was read: the current address, from the result.
            state["old_email"] = re.search(r"- `email`: `([^`]+)`", output)[1]
            state["plan"] = None
            return call(
                "update_contact_email",
                contact_id="c-1001",
                email=NEW_EMAIL,
                reason=f"the customer asked by phone (was {state['old_email']})",
            )
        if state["plan"] is None:
            # The preview the model reads: nothing written yet, the ids a person needs.
            assert "nothing has been written" in output
            state["plan"] = PLAN_ID.search(output).group(0)
            state["short_code"] = re.search(r"`([0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4})`", output)[1]
            rita.decide(state["plan"], "approve")  # meanwhile, a person approves
            return call("get_plan", plan_id=state["plan"], wait=10)
        if "**Plan `completed`**" not in output:
            return call("get_plan", plan_id=state["plan"], wait=10)
        return say(f"Done: plan {state['short_code']} was applied.")

    model = ScriptedAgentsModel(script)
    answer = anyio.run(
        doc["run"], live["url"], agent_token, "Contact c-1001 moved to ada@new.example", model
    )

    assert answer == f"Done: plan {state['short_code']} was applied."
    assert state["old_email"] == "ada@example.test"  # what the upstream held
    read = Plan.objects.get(id=state["read"])
    assert read.status == "completed" and read.result["email"] == state["old_email"]
    plan = Plan.objects.get(id=state["plan"])
    assert plan.status == "completed"
    assert plan.reason == f"the customer asked by phone (was {state['old_email']})"
    assert len(upstream.writes()) == 1


def test_langgraph_example(live, agent_token, rita, upstream, reads_granted):
    from clients.countersign_client import Countersign

    doc = example("langgraph")
    seen: list[str] = []

    state: dict = {}

    def script(messages):
        last = messages[-1]
        if isinstance(last, ToolMessage):
            seen.append(last.content)
        if not seen:
            return tool_call("get_contact", contact_id="c-1001")
        if "read" not in state:
            assert "Proposed read" in seen[0]
            state["read"] = PLAN_ID.search(seen[0]).group(0)
            return tool_call("get_plan", plan_id=state["read"], wait=10)
        if "email" not in state:
            if "is completed" not in seen[-1]:  # approved, executing: ask again
                return tool_call("get_plan", plan_id=state["read"], wait=10)
            state["email"] = re.search(r"'email': '([^']+)'", seen[-1])[1]
            # A first try with a field the action does not have.
            return tool_call("update_contact_email", contact_id="c-1001", mail=NEW_EMAIL)
        if "refused" not in state:
            state["refused"] = seen[-1]
            assert "Refused; nothing was created" in seen[-1]
            assert "/input/mail: unknown field" in seen[-1]
            return tool_call(
                "update_contact_email", contact_id="c-1001", email=NEW_EMAIL, reason="asked"
            )
        if "plan" not in state:
            assert "Nothing is written until a person approves it" in seen[-1]
            state["plan"] = PLAN_ID.search(seen[-1]).group(0)
            rita.decide(state["plan"], "approve")
        if "is completed" not in seen[-1]:
            return tool_call("get_plan", plan_id=state["plan"], wait=10)
        return AIMessage(content=f"Applied {state['plan']}.")

    model = ScriptedChatModel(script=script)
    with Countersign(live["url"], agent_token) as cs:
        graph = doc["build_graph"](model, doc["countersign_tools"](cs))
        result = graph.invoke({"messages": [("user", "Contact c-1001 moved")]})

    assert {"get_contact", "update_contact_email", "get_plan"} <= set(model.bound)
    plan = Plan.objects.get(action__name="update_contact_email")
    assert result["messages"][-1].content == f"Applied {plan.id}."
    assert plan.status == "completed"
    assert state["email"] == "ada@example.test"  # what the read returned
    assert Plan.objects.get(action__name="get_contact").status == "completed"
    assert len(upstream.writes()) == 1
