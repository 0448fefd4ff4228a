"""``modefsm demo --protocol 2``: the Session Modes story with the official ACP v2 client.

The same story as :mod:`modefsm.cli._demo`, told in ACP v2 (Preview): the mode is the
``configOptions`` entry with ``category: "mode"``, set with ``session/set_config_option``
(``type: "id"``); switches report ``state_update``; after a restart ``session/resume``
restores the mode.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

from acp import RequestError
from acp.experimental import v2
from acp.experimental.v2 import schema as s2

from modefsm.cli._transcript import (
    _PLAN,
    TOOL_ENDS,
    TOOLS_ACT,
    TOOLS_PRESET,
    DemoFailedError,
    _copy,
    _expect,
    _Transcript,
    next_answer,
    tool_act,
)

__all__ = ["DemoClientV2", "story_v2"]


class DemoClientV2:
    """The v2 client side of the demo: records the mode and the session state.

    Attributes:
        answers: the ``optionId`` to select for each permission request, in order
            (``None`` answers ``cancelled``).
        modes: every mode announced by ``config_option_update``, in order.
        states: every ``state_update`` state, in order.
        tool_ends: the final status of each tool call (``completed``/``failed``), in order.
        asked: how many permission requests came.
        before_answer: awaited once before the next answer (the user acts meanwhile).
    """

    def __init__(self, answers: list[str | None]) -> None:
        """Answer permission requests with *answers*, in order."""
        self.answers = answers
        self.modes: list[str] = []
        self.states: list[str] = []
        self.tool_ends: list[str] = []
        self.asked = 0
        self.before_answer: Callable[[], Awaitable[None]] | None = None

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        """Record ``config_option_update``, ``state_update`` and the tool calls' ends."""
        del session_id, kwargs
        if isinstance(update, s2.ConfigOptionUpdate):
            self.modes.append(_mode(update.config_options))
        elif update.session_update == "state_update":
            self.states.append(update.state)
        elif update.session_update == "tool_call_update" and update.status in TOOL_ENDS:
            self.tool_ends.append(update.status)

    async def request_permission(
        self, session_id: str, title: str, options: list[Any], **kwargs: Any
    ) -> s2.RequestPermissionResponse:
        """Answer with the next scripted choice."""
        del session_id, title, options, kwargs
        choice = await next_answer(self)
        if choice is None:
            return s2.RequestPermissionResponse(outcome=s2.CancelledPermissionOutcome())
        return s2.RequestPermissionResponse(
            outcome=s2.SelectedPermissionOutcomeVariant(option_id=choice)
        )


def _mode(options: list[Any]) -> str:
    for option in options:
        if getattr(option, "category", None) == "mode":
            return str(option.current_value)
    msg = "no configOptions entry has category 'mode'"
    raise DemoFailedError(msg)


_COPYING: set[asyncio.Task[None]] = set()
"""The tasks copying the agents' stderr (kept referenced until they end)."""


async def _spawn(
    client: DemoClientV2, command: tuple[str, ...], observers: list[Callable[[Any], None]]
) -> tuple[Any, asyncio.subprocess.Process]:
    # as in the v1 demo: the agent starts with Ctrl-C ignored and speaks through our stderr
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    copying = asyncio.create_task(_copy(process.stderr, sys.stderr))  # ends with the agent
    _COPYING.add(copying)
    copying.add_done_callback(_COPYING.discard)
    assert process.stdin is not None  # noqa: S101
    assert process.stdout is not None  # noqa: S101
    conn = v2.connect_to_agent(client, process.stdin, process.stdout, observers=observers)
    info = s2.Implementation(name="modefsm-demo", version="0")
    init = await conn.initialize(protocol_version=2, info=info)
    _expect("protocolVersion", init.protocol_version, 2)
    return conn, process


async def _stop(conn: Any, process: asyncio.subprocess.Process) -> None:
    await conn.close()
    if process.stdin is not None:
        process.stdin.close()
    await process.wait()


async def story_v2(log: Path, out: TextIO, *, raw: bool) -> tuple[list[str], str, str]:  # noqa: PLR0915
    """Tell the story over ACP v2; return the modes visited and the two ``sessionId`` s.

    Raises:
        DemoFailedError: a step did not do what ACP v2 says it should.
    """
    transcript = _Transcript(out, raw=raw)
    client = DemoClientV2(answers=["code", "reject"])
    command = (sys.executable, "-m", "modefsm", "serve", "--preset", "seed", "--log", str(log))
    observers: list[Callable[[Any], None]] = [transcript.frame]
    visited: list[str] = []
    cwd = str(Path.cwd())

    transcript.say("initialize protocolVersion 2 (frames abridged: --json prints them whole)")
    conn, process = await _spawn(client, command, observers)
    try:
        transcript.say("session/new: the mode is a config option (category mode), in ask")
        new = await conn.new_session(cwd=cwd)
        session_id = new.session_id
        _expect("initial mode", _mode(new.config_options or []), "ask")
        visited.append("ask")

        transcript.say("session/set_config_option architect (type id): announced, then answered")
        result = await conn.set_config_option(
            config_id="mode", session_id=session_id, value="architect", type="id"
        )
        _expect("answered mode", _mode(result.config_options), "architect")
        _expect("announced mode", client.modes[-1], "architect")
        visited.append("architect")

        transcript.say("prompt in architect: requires_action while the user decides; code")
        turn = await conn.prompt(session_id=session_id, prompt=[s2.TextContentBlock(text=_PLAN)])
        _expect("messageId", bool(turn.message_id), True)  # noqa: FBT003
        _expect("mode after the approved switch", client.modes[-1], "code")
        _expect("states", client.states, ["running", "requires_action", "running", "idle"])
        visited.append("code")

        transcript.say("back to architect; the next proposal is rejected: nothing changes")
        await conn.set_config_option(
            config_id="mode", session_id=session_id, value="architect", type="id"
        )
        visited.append("architect")
        count = len(client.modes)
        await conn.prompt(
            session_id=session_id, prompt=[s2.TextContentBlock(text="Let's just start.")]
        )
        _expect("announcements after a rejection", len(client.modes), count)

        transcript.say("session/set_config_option to an unknown mode: -32602, nothing changes")
        try:
            await conn.set_config_option(
                config_id="mode", session_id=session_id, value="does-not-exist", type="id"
            )
        except RequestError as exc:
            _expect("error code", exc.code, -32602)
        else:
            msg = "an unknown mode was accepted"
            raise DemoFailedError(msg)
        _expect("announcements after an error", len(client.modes), count)

        transcript.say("session/set_config_option code")
        await conn.set_config_option(
            config_id="mode", session_id=session_id, value="code", type="id"
        )
        visited.append("code")
    finally:
        await _stop(conn, process)

    transcript.say("restart the agent process; session/resume restores the mode from the log")
    conn, process = await _spawn(client, command, observers)
    try:
        resumed = await conn.resume_session(session_id=session_id, cwd=cwd)
        _expect("mode after restart", _mode(resumed.config_options or []), "code")
        _expect("state before the answer", client.states[-1], "idle")
    finally:
        await _stop(conn, process)

    tools = (sys.executable, "-m", "modefsm", "serve", "--preset", TOOLS_PRESET, "--log", str(log))
    transcript.say(TOOLS_ACT)
    conn, process = await _spawn(client, tools, observers)
    try:

        async def new_session() -> str:
            return str((await conn.new_session(cwd=cwd)).session_id)

        async def set_mode(session: str, mode: str) -> None:
            await conn.set_config_option(
                config_id="mode", session_id=session, value=mode, type="id"
            )

        async def prompt(session: str, text: str) -> None:
            await conn.prompt(session_id=session, prompt=[s2.TextContentBlock(text=text)])
            _expect("state at the end of the turn", client.states[-1], "idle")

        tool_session = await tool_act(
            transcript, client, new_session=new_session, set_mode=set_mode, prompt=prompt
        )
    finally:
        await _stop(conn, process)
    return visited, session_id, tool_session
