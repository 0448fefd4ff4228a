"""``modefsm serve``: a runnable stdio ACP agent hosting a spec, with a scripted prompt turn.

The agent's ``session/prompt`` is small and deterministic so that any client can
exercise every mode path:

- in a mode that has a switch (``architect`` in the seed preset), the prompt proposes it
  through ``session/request_permission``, with the prompt's text as the plan, and answers
  with a message saying how it ended;
- in any other mode, it answers one ``agent_message_chunk`` naming the current mode.

stdout carries only ACP messages. The transition log goes to ``--log FILE`` (JSON
lines), or to stderr without one. Frames are checked on the wire
(:mod:`modefsm.wire`): a malformed one is answered with a JSON-RPC error and never
reaches the agent.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from acp.schema import AgentMessageChunk, PromptResponse, TextContentBlock

from modefsm.agent import ModeAgent
from modefsm.records import TransitionLog
from modefsm.replay import LogRestore
from modefsm.spec import ModeSpec
from modefsm.wire import run_agent

__all__ = ["ScriptedAgent", "serve"]


class ScriptedAgent(ModeAgent):
    """A :class:`~modefsm.agent.ModeAgent` whose prompt turn is a fixed script (see module)."""

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        """``session/prompt``: propose the mode's switch, or say which mode the session is in."""
        del kwargs
        session = self.session(session_id)
        text = " ".join(getattr(block, "text", "") for block in prompt).strip()
        cancelled = self.begin_turn(session_id)
        try:
            if self.engine.spec.switch_from(session.state) is not None:
                result = await self.propose_switch(
                    session_id, plan=text or "## Plan", cancelled=cancelled
                )
                if result.approved:
                    reply = f"Approved: now in {self.session(session_id).state} mode."
                else:
                    reply = f"Not switched ({result.reason}): still in {session.state} mode."
            else:
                reply = f"Mode {session.state}: {text}" if text else f"Mode {session.state}."
            if cancelled.is_set():
                return PromptResponse(stop_reason="cancelled")
            await self.engine.notify(
                session_id,
                AgentMessageChunk(
                    session_update="agent_message_chunk",
                    content=TextContentBlock(type="text", text=reply),
                ),
            )
            return PromptResponse(stop_reason="end_turn")
        finally:
            self.end_turn(session_id, cancelled)


def serve(spec: ModeSpec, log_path: Path | None = None, *, fsync: bool = False) -> int:
    """Serve *spec* over stdio until the client closes stdin; return the exit status.

    Args:
        spec: the modes and policy.
        log_path: the JSON-lines transition log (also read back on ``session/load``);
            ``None`` writes the log to stderr and cannot restore after a restart.
        fsync: sync every record to disk before it takes effect.

    Raises:
        LogError: the log file cannot be opened.
    """
    if log_path is None:
        log = TransitionLog.to_stream(sys.stderr.buffer, path="<stderr>")
        restore = None
    else:
        log = TransitionLog.to_file(log_path, fsync=fsync)
        restore = LogRestore(log_path)
    agent = ScriptedAgent(spec, log=log, restore=restore)
    try:
        asyncio.run(run_agent(agent))
    finally:
        log.close()
    return 0
