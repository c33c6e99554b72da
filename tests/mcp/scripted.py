"""Scripted models: they play a test's script instead of calling an LLM, so the
documented integrations run end to end with no network model."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

_ids = itertools.count(1)


# --- OpenAI Agents SDK ---------------------------------------------------------------


def call(name: str, **arguments: Any) -> ResponseFunctionToolCall:
    n = next(_ids)
    return ResponseFunctionToolCall(
        type="function_call",
        id=f"fc_{n}",
        call_id=f"call_{n}",
        name=name,
        arguments=json.dumps(arguments),
        status="completed",
    )


def say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{next(_ids)}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def last_tool_output(items: Any) -> str:
    """The text the last tool call returned, as the Agents SDK hands it to the model."""
    for item in reversed(items if isinstance(items, list) else []):
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item["output"]
            if isinstance(output, str):
                return output
            return "\n".join(part.get("text", "") for part in output if isinstance(part, dict))
    raise AssertionError("no tool output in the model's input")


class ScriptedAgentsModel(Model):
    """Each turn calls ``script(input_items, tool_names)`` for the next output item."""

    def __init__(self, script: Callable[[Any, list[str]], Any]) -> None:
        self.script = script
        self.turns: list[list[str]] = []

    async def get_response(
        self,
        system_instructions,
        input,
        model_settings,
        tools,
        output_schema,
        handoffs,
        tracing,
        *,
        previous_response_id,
        conversation_id,
        prompt,
    ) -> ModelResponse:
        names = [tool.name for tool in tools]
        self.turns.append(names)
        return ModelResponse(output=[self.script(input, names)], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the scripted model does not stream")


# --- LangChain / LangGraph -------------------------------------------------------------


def tool_call(name: str, **arguments: Any) -> AIMessage:
    return AIMessage(
        content="", tool_calls=[{"name": name, "args": arguments, "id": f"call_{next(_ids)}"}]
    )


class ScriptedChatModel(BaseChatModel):
    """A chat model whose every answer is ``script(messages)``; records the bound tools."""

    script: Any
    bound: list = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, **kwargs):
        self.bound.extend(tool.name for tool in tools)
        return self

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs):
        return ChatResult(generations=[ChatGeneration(message=self.script(messages))])
