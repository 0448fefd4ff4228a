"""An ACP agent on pydantic-ai whose tools are real Python functions, each decided by the mode.

Run it as an ACP client would: ``python examples/pydantic_ai_agent.py LOG WORKSPACE``. It
serves the ``permission`` preset on stdin and stdout. Its model is pydantic-ai's
``FunctionModel`` with a scripted reply (no network, no model weights): each line of the
user's prompt is one tool call, made one at a time --

- ``read NAME``: the ``read_file`` tool (ACP kind ``read``) returns the text of
  ``WORKSPACE/NAME``;
- ``write NAME TEXT``: the ``write_file`` tool (kind ``edit``) writes *TEXT* to it --

and its last reply lists what each tool returned. Every tool call goes through
``ModeAgent.run_tool``: the session's committed mode decides it (``plan`` refuses the
write, ``default`` asks the user first, ``acceptEdits`` lets it run), and the tool's body
runs only when that decision lets it. A refused call returns the refusal to the model as
the tool's result. The mode's ``prompt``, if the spec gives one, becomes the model's
instructions (``ModeAgent.prompt_for``).
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acp.schema import AgentMessageChunk, PromptResponse, TextContentBlock
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from modefsm import FileStore, ModeAgent, ToolCall, preset, run_agent
from modefsm.spec import ToolKind


@dataclass
class Turn:
    """What a tool needs of the turn running it: the ACP agent, the session, the workspace."""

    agent: ToolAgent
    session_id: str
    workspace: Path
    cancelled: asyncio.Event

    async def run(
        self, ctx: RunContext[Turn], kind: ToolKind, title: str, body: Callable[[], Awaitable[str]]
    ) -> str:
        """Run *body* as ACP tool call *title* of *kind*, if the session's mode lets it."""
        call = ToolCall(f"call_{uuid.uuid4().hex[:12]}", kind, ctx.tool_name, title)
        result = await self.agent.run_tool(self.session_id, call, body, cancelled=self.cancelled)
        return result.text


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model: the next tool call of the prompt's lines, or the summary once all ran."""
    del info
    prompt = next(
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    )
    lines = [line.split(" ", 2) for line in str(prompt).splitlines() if line.strip()]
    returned = [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    if len(returned) < len(lines):
        verb, name, *text = lines[len(returned)]
        tool, args = ("read_file", {"name": name})
        if verb == "write":
            tool, args = ("write_file", {"name": name, "text": " ".join(text)})
        return ModelResponse(parts=[ToolCallPart(tool, args)])
    return ModelResponse(
        parts=[TextPart("\n".join(f"{p.tool_name}: {p.content}" for p in returned))]
    )


model_agent = Agent(FunctionModel(scripted), deps_type=Turn)


@model_agent.tool
async def read_file(ctx: RunContext[Turn], name: str) -> str:
    """Read a file of the workspace."""
    path = ctx.deps.workspace / name

    async def body() -> str:
        return path.read_text(encoding="utf-8")

    return await ctx.deps.run(ctx, "read", f"Read {name}", body)


@model_agent.tool
async def write_file(ctx: RunContext[Turn], name: str, text: str) -> str:
    """Write *text* to a file of the workspace."""
    path = ctx.deps.workspace / name

    async def body() -> str:
        path.write_text(text, encoding="utf-8")
        return f"wrote {len(text)} characters to {name}"

    return await ctx.deps.run(ctx, "edit", f"Write {name}", body)


class ToolAgent(ModeAgent):
    """The ACP agent: a prompt turn is one run of the pydantic-ai agent."""

    workspace = Path()

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        """``session/prompt``: run the model; its tools are decided by the session's mode."""
        del kwargs
        await self.refresh(session_id)  # the mode another process may have set
        text = "\n".join(getattr(block, "text", "") for block in prompt)
        cancelled = self.begin_turn(session_id)
        try:
            turn = Turn(self, session_id, self.workspace, cancelled)
            result = await model_agent.run(
                text, deps=turn, instructions=self.prompt_for(session_id)
            )
        finally:
            self.end_turn(session_id, cancelled)
        chunk = TextContentBlock(type="text", text=result.output)
        await self.engine.notify(
            session_id, AgentMessageChunk(session_update="agent_message_chunk", content=chunk)
        )
        return PromptResponse(stop_reason="end_turn")


def main(log_path: str, workspace: str) -> None:
    """Serve :class:`ToolAgent` on stdin and stdout, logging to *log_path*."""
    store = FileStore(log_path)
    agent = ToolAgent(preset("permission"), store=store, unstable=True)
    agent.workspace = Path(workspace)
    try:
        asyncio.run(run_agent(agent))
    finally:
        store.close()


if __name__ == "__main__":
    try:
        log, workspace = sys.argv[1:]
    except ValueError:
        sys.exit("usage: python examples/pydantic_ai_agent.py LOG WORKSPACE")
    main(log, workspace)
