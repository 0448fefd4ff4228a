"""A minimal agent with modefsm's session modes, served on stdio.

Run it as an ACP client would (``python examples/embedded_agent.py LOG``): the client
sends ``initialize``, ``session/new``, ``session/set_mode``; in ``architect`` a prompt
proposes the switch to an implementation mode through ``session/request_permission``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from acp.schema import AgentMessageChunk, PromptResponse, TextContentBlock

from modefsm import FileStore, ModeAgent, preset, run_agent


class Agent(ModeAgent):
    """The prompt turn: propose the mode's switch, or say which mode the session is in."""

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        """``session/prompt``."""
        del prompt, kwargs
        mode = (await self.refresh(session_id)).state
        if mode == "architect":
            result = await self.propose_switch(session_id, plan="## Plan\n1. Write it")
            mode = self.session(session_id).state
            reply = f"switched to {mode}" if result.approved else f"still in {mode}"
        else:
            reply = f"working in {mode} mode"
        chunk = TextContentBlock(type="text", text=reply)
        await self.engine.notify(
            session_id, AgentMessageChunk(session_update="agent_message_chunk", content=chunk)
        )
        return PromptResponse(stop_reason="end_turn")


def main(log_path: str) -> None:
    """Serve :class:`Agent` on stdin and stdout, logging to *log_path*."""
    store = FileStore(log_path)
    agent = Agent(preset("seed"), store=store, unstable=True)
    try:
        asyncio.run(run_agent(agent))
    finally:
        store.close()


if __name__ == "__main__":
    try:
        (log,) = sys.argv[1:]
    except ValueError:
        sys.exit("usage: python examples/embedded_agent.py LOG")
    main(log)
