"""``modefsm serve``: a runnable stdio ACP agent hosting a spec, with a scripted prompt turn.

The agent's ``session/prompt`` is small and deterministic so that any client can
exercise every mode path:

- in a mode that has a switch (``architect`` in the seed preset), the prompt proposes it
  through ``session/request_permission``, with the prompt's text as the plan, and answers
  with a message saying how it ended;
- in any other mode, it answers one ``agent_message_chunk`` naming the current mode.

stdout carries only ACP messages. The transition log goes to ``--log FILE`` (JSON
lines), or to stderr without one. Frames are checked on the wire (:mod:`modefsm.wire`): a
malformed one is answered with a JSON-RPC error and never reaches the agent.

Nothing waits on stderr for long: diagnostics are written only when the pipe has room
(and at a bounded rate; the ones dropped are counted), and a record of the log on stderr
waits at most :data:`STDERR_LOG_WAIT` seconds for room, after which the change fails
(``-32603``, mode unchanged) -- and later ones fail at once while the pipe stays full.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import sys
from pathlib import Path
from typing import Any

from acp.schema import AgentMessageChunk, PromptResponse, TextContentBlock

from modefsm.agent import ModeAgent
from modefsm.errors import ModefsmError
from modefsm.records import TransitionLog
from modefsm.spec import ModeSpec
from modefsm.wire import BoundedPipeWriter, Diagnostics, OutputClosedError, run_agent

__all__ = ["STDERR_LOG_WAIT", "ScriptedAgent", "index_path", "serve"]

STDERR_LOG_WAIT = 2.0
"""Seconds a record of the log on stderr (no ``--log``) waits for the reader to make room."""


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
                try:
                    result = await self.propose_switch(
                        session_id, plan=text or "## Plan", cancelled=cancelled
                    )
                except ConnectionError:  # the client hung up; logged as session_closed
                    return PromptResponse(stop_reason="cancelled")
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


def _check_stdio() -> None:
    """Refuse to start unless stdin and stdout are pipes, sockets or terminals.

    Raises:
        ModefsmError: one of them is a regular file or a device such as ``/dev/null``
            (asyncio's pipe transport cannot serve those).
    """
    for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)):
        mode = os.fstat(stream.fileno()).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stream.isatty()):
            msg = (
                f"{name} must be a pipe or a terminal: an ACP client starts `modefsm serve` "
                "with pipes (to try it by hand: cat requests.jsonl | modefsm serve | cat)"
            )
            raise ModefsmError(msg)


def index_path(log_path: Path) -> Path:
    """The restore index kept next to the log *log_path*: the same name plus ``.index``."""
    return log_path.with_name(log_path.name + ".index")


def serve(spec: ModeSpec, log_path: Path | None = None, *, fsync: bool = False) -> int:
    """Serve *spec* over stdio until the client closes stdin; return the exit status.

    Every request read is answered before the end (see :func:`modefsm.wire.run_agent`);
    the status is ``0`` then, and ``1`` when the client closed stdout first (one line on
    stderr says how many requests were left unanswered).

    Args:
        spec: the modes and policy.
        log_path: the JSON-lines transition log; its restore index (SQLite, see
            :func:`index_path`) answers ``session/load`` after a restart. ``None`` writes the
            log to stderr and cannot restore after a restart.
        fsync: sync every record to disk before it takes effect.

    Raises:
        LogError: the log file cannot be opened.
    """
    _check_stdio()
    if log_path is None:
        stream = BoundedPipeWriter(sys.stderr.fileno(), STDERR_LOG_WAIT)
        log = TransitionLog.to_stream(stream, path="<stderr>")  # type: ignore[arg-type]
        restore = None
    else:
        log = TransitionLog.to_file(log_path, fsync=fsync, index=index_path(log_path))
        restore = log.index
    agent = ScriptedAgent(spec, log=log, restore=restore, unstable=True)
    diagnostics = Diagnostics(sys.stderr.fileno(), prefix="modefsm serve")
    root = logging.getLogger()
    root.addHandler(diagnostics)
    logging.captureWarnings(True)  # noqa: FBT003 - the logging API
    status = 0
    try:
        transport = asyncio.run(run_agent(agent))
    except OutputClosedError as exc:
        diagnostics.say(str(exc), force=True)
        status = 1
    else:
        if transport.open_requests:
            noun = "request" if transport.open_requests == 1 else "requests"
            diagnostics.say(
                f"{transport.open_requests} {noun} still unanswered at the end of input",
                force=True,
            )
        if transport.unrouted:
            noun = "notification" if transport.unrouted == 1 else "notifications"
            diagnostics.say(
                f"ignored {transport.unrouted} {noun} of methods not served", force=True
            )
    finally:
        log.close()
        logging.captureWarnings(False)  # noqa: FBT003
        root.removeHandler(diagnostics)
        diagnostics.close()
    return status
