"""``modefsm demo``: the ACP Session Modes story, end to end, over a real stdio connection.

The demo spawns ``modefsm serve`` (the seed preset) as a subprocess and drives it with the
official SDK client through the story of the ACP "Session Modes" page: a new session in
``ask``, the client switches to ``architect``, a prompt makes the agent ask to switch to
``code`` and the user selects ``code``; a second proposal is rejected; an unknown mode is
refused with ``-32602``; ``set_config_option`` moves the mode; then the agent process is
restarted and ``session/load`` restores the last mode from the transition log.

Every JSON-RPC frame is printed as it crosses the wire (abridged; ``--json`` prints them
raw), each step is checked, and the demo exits 0 only if every step did what it should.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

import acp
from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    RequestPermissionResponse,
    TextContentBlock,
)

from modefsm.cli._serve import check_log_path
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
from modefsm.log import TransitionLog
from modefsm.protocol import require_v2

__all__ = ["AGENT_EXIT_WAIT", "DemoClient", "DemoFailedError", "run_demo"]

AGENT_EXIT_WAIT = 60.0
"""Seconds the demo waits for an agent to end once its input ends, before stopping it."""


@dataclass
class DemoClient:
    """The client side of the demo: records updates and answers permission requests.

    Attributes:
        answers: the ``optionId`` to select for each permission request, in order
            (``None`` answers ``cancelled``).
        modes: every ``currentModeId`` announced, in order.
        tool_ends: the final status of each tool call (``completed``/``failed``), in order.
        asked: how many permission requests came.
        before_answer: awaited once before the next answer (the user acts meanwhile).
    """

    answers: list[str | None] = field(default_factory=list)
    modes: list[str] = field(default_factory=list)
    tool_ends: list[str] = field(default_factory=list)
    asked: int = 0
    before_answer: Callable[[], Awaitable[None]] | None = None

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        """Record ``current_mode_update`` notifications and the tool calls' ends."""
        del session_id, kwargs
        if update.session_update == "current_mode_update":
            self.modes.append(update.current_mode_id)
        elif update.session_update == "tool_call_update" and update.status in TOOL_ENDS:
            self.tool_ends.append(update.status)

    async def request_permission(
        self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any
    ) -> RequestPermissionResponse:
        """Answer with the next scripted choice."""
        del options, session_id, tool_call, kwargs
        choice = await next_answer(self)
        if choice is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=choice)
        )


_DECIDED = b'"event":"modefsm.tool_decided"'


def _text_block(text: str) -> TextContentBlock:
    return TextContentBlock(type="text", text=text)


@contextlib.asynccontextmanager
async def _agent(
    client: DemoClient, command: tuple[str, ...], observers: list[Callable[[Any], None]]
) -> AsyncIterator[Any]:
    """``modefsm serve`` as a child, connected to *client*; its connection.

    The child starts with Ctrl-C ignored (an ignored signal stays ignored across ``exec``):
    a Ctrl-C in the terminal reaches the whole foreground process group, and one that came
    while the child's interpreter was still starting would print Python's own traceback.
    The demo alone handles it; its agents end at the end of their input, when it exits:
    it waits up to :data:`AGENT_EXIT_WAIT` seconds for that.
    Their stderr reaches the demo's through a pipe the demo drains, so nothing they say
    after the demo is gone (a closed stdout) shows in the terminal.
    """
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        async with contextlib.AsyncExitStack() as stack:
            spawned = acp.spawn_agent_process(
                cast("Any", client),
                *command,
                observers=observers,
                transport_kwargs={"shutdown_timeout": AGENT_EXIT_WAIT},
            )
            try:
                conn, process = await stack.enter_async_context(spawned)
            finally:
                signal.signal(signal.SIGINT, previous)
            copying = asyncio.create_task(_copy(process.stderr, sys.stderr))
            try:
                yield conn
            finally:
                copying.cancel()
    finally:
        signal.signal(signal.SIGINT, previous)


async def _story(log: Path, out: TextIO, *, raw: bool) -> tuple[list[str], str, str]:  # noqa: PLR0915
    transcript = _Transcript(out, raw=raw)
    client = DemoClient(answers=["code", "reject"])
    command = (sys.executable, "-m", "modefsm", "serve", "--preset", "seed", "--log", str(log))
    observers: list[Callable[[Any], None]] = [transcript.frame]
    visited: list[str] = []

    async with _agent(client, command, observers) as conn:
        transcript.say("initialize (frames abridged: `modefsm demo --json` prints them whole)")
        init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        capabilities = init.agent_capabilities
        _expect("loadSession", capabilities and capabilities.load_session, True)  # noqa: FBT003

        transcript.say("session/new: the session starts in ask")
        new = await conn.new_session(cwd=str(Path.cwd()))
        session_id = new.session_id
        assert new.modes is not None  # noqa: S101
        _expect("initial mode", new.modes.current_mode_id, "ask")
        visited.append(new.modes.current_mode_id)

        transcript.say("session/set_mode architect: announced on both channels, then answered")
        await conn.set_session_mode(session_id=session_id, mode_id="architect")
        _expect("mode after set_mode", client.modes[-1], "architect")
        visited.append("architect")

        transcript.say("prompt in architect: the agent asks to switch; the user selects code")
        turn = await conn.prompt(session_id=session_id, prompt=[_text_block(_PLAN)])
        _expect("stopReason", turn.stop_reason, "end_turn")
        _expect("mode after the approved switch", client.modes[-1], "code")
        visited.append("code")

        transcript.say("back to architect; the next proposal is rejected: nothing changes")
        await conn.set_session_mode(session_id=session_id, mode_id="architect")
        visited.append("architect")
        count = len(client.modes)
        await conn.prompt(session_id=session_id, prompt=[_text_block("Let's just start.")])
        _expect("notifications after a rejection", len(client.modes), count)

        transcript.say("session/set_mode to an unknown mode: -32602, nothing changes")
        try:
            await conn.set_session_mode(session_id=session_id, mode_id="does-not-exist")
        except acp.RequestError as exc:
            _expect("error code", exc.code, -32602)
        else:
            msg = "an unknown mode was accepted"
            raise DemoFailedError(msg)
        _expect("notifications after an error", len(client.modes), count)

        transcript.say("session/set_config_option mode=code: the complete option list comes back")
        result = await conn.set_config_option(config_id="mode", session_id=session_id, value="code")
        _expect("currentValue", result.config_options[0].current_value, "code")
        visited.append("code")

    transcript.say("restart the agent process; session/load restores the mode from the log")
    async with _agent(client, command, observers) as conn:
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        loaded = await conn.load_session(cwd=str(Path.cwd()), session_id=session_id)
        assert loaded.modes is not None  # noqa: S101
        _expect("mode after restart", loaded.modes.current_mode_id, "code")
        assert loaded.config_options is not None  # noqa: S101
        _expect("configOptions after restart", loaded.config_options[0].current_value, "code")

    tools = (sys.executable, "-m", "modefsm", "serve", "--preset", TOOLS_PRESET, "--log", str(log))
    transcript.say(TOOLS_ACT)
    async with _agent(client, tools, observers) as conn:
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)

        async def new_session() -> str:
            return str((await conn.new_session(cwd=str(Path.cwd()))).session_id)

        async def set_mode(session: str, mode: str) -> None:
            await conn.set_session_mode(session_id=session, mode_id=mode)

        async def prompt(session: str, text: str) -> None:
            turn = await conn.prompt(session_id=session, prompt=[_text_block(text)])
            _expect("stopReason", turn.stop_reason, "end_turn")

        tool_session = await tool_act(
            transcript, client, new_session=new_session, set_mode=set_mode, prompt=prompt
        )
    return visited, session_id, tool_session


def run_demo(
    log: Path | None = None, *, raw: bool = False, out: TextIO | None = None, protocol: int = 1
) -> int:
    """Run the demo; return 0 when every step behaved, 1 otherwise.

    Raises:
        LogError: *log* cannot be opened for appending, or exists and is not a transition
            log (:func:`~modefsm.cli.check_log_path`).
        SdkFeatureError: *protocol* is 2 and the installed ACP SDK has no v2 (0.12).

    Args:
        log: the transition log file to write (default: a new temporary directory's
            ``transitions.jsonl``); an existing file is appended to.
        raw: print the raw JSON-RPC frames (one JSON object a line) instead of a transcript.
        out: where to print (default: stdout).
        protocol: the ACP version the client speaks (``1``, or ``2`` for ACP v2).
    """
    out = out or sys.stdout
    if protocol == 2:  # noqa: PLR2004
        require_v2("ACP v2 (--protocol 2)")
    if log is None:
        log = Path(tempfile.mkdtemp(prefix="modefsm-demo-")) / "transitions.jsonl"
    check_log_path(log)  # not a transition log: refused before anything is written
    TransitionLog.to_file(log).close()  # a bad path fails here, with one clear LogError
    try:
        if protocol == 2:  # noqa: PLR2004
            from modefsm.cli._demo_v2 import story_v2  # noqa: PLC0415 - v2 only when asked

            visited, session_id, tool_session = asyncio.run(story_v2(log, out, raw=raw))
        else:
            visited, session_id, tool_session = asyncio.run(_story(log, out, raw=raw))
    except DemoFailedError as exc:
        print(f"modefsm demo: FAILED: {exc}", file=sys.stderr)
        return 1
    if not raw:
        with log.open("rb") as lines:
            mine = [
                line
                for line in lines
                if session_id.encode() in line or tool_session.encode() in line
            ]
        story = [line for line in mine if session_id.encode() in line]
        rejected = sum(1 for line in story if b'"modefsm.change_rejected"' in line)
        decided = sum(1 for line in mine if b'"modefsm.tool_decided"' in line)
        print("\n== summary", file=out)
        print(f"  modes visited: {' -> '.join(visited)}", file=out)
        print(f"  tool calls decided by the mode: {decided} (session {tool_session})", file=out)
        counts = f"{len(story) - rejected} records, {rejected} rejected"  # as replay counts
        print(f"  transition log: {log} ({session_id}: {counts})", file=out)
        print(f"  replay it: {invoked_as()} replay {log}", file=out)
    return 0


def invoked_as(argv0: str | None = None) -> str:
    """The ``modefsm`` command as the user ran it, for a hint to run it again.

    ``modefsm`` when that name on ``PATH`` is the program run; the path as typed
    (``.venv/bin/modefsm``) otherwise; ``python -m modefsm`` (with the interpreter's
    name) when run as a module; ``modefsm`` when it cannot tell (*argv0*, default
    ``sys.argv[0]``, names another program).
    """
    argv0 = sys.argv[0] if argv0 is None else argv0
    program = Path(argv0)
    if program.name == "__main__.py":
        return f"{Path(sys.executable).name} -m modefsm"
    if program.name != "modefsm":
        return "modefsm"
    found = shutil.which("modefsm")
    with contextlib.suppress(OSError):
        if found is not None and Path(found).samefile(program):
            return "modefsm"
    return shlex.quote(argv0)
