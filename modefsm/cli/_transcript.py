"""What both demo stories share: the transcript printer, the checks and the plan text.

:mod:`modefsm.cli._demo` (ACP v1) and :mod:`modefsm.cli._demo_v2` (ACP v2) import it;
it imports neither.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TextIO

import orjson

__all__ = ["DemoFailedError"]

_WIDTH = 170
_ID_WIDTH = 14


class DemoFailedError(Exception):
    """A step of the demo did not do what the protocol says it should."""


class _Transcript:
    """Prints frames and story lines to *out*."""

    def __init__(self, out: TextIO, *, raw: bool) -> None:
        self.out: TextIO | None = out
        self.raw = raw

    def _print(self, text: str) -> None:
        if self.out is None:
            return
        try:
            print(text, file=self.out, flush=True)
        except BrokenPipeError:  # `modefsm demo | head`: the story still runs to the end
            self.out = None

    def say(self, text: str) -> None:
        if not self.raw:
            self._print(f"\n== {text}")

    def frame(self, event: Any) -> None:
        message = event.message
        arrow = "client -> agent" if event.direction.value == "outgoing" else "agent -> client"
        if self.raw:
            self._print(orjson.dumps({"dir": arrow.replace(" ", ""), "frame": message}).decode())
            return
        body = orjson.dumps(_abridge(message)).decode()
        if len(body) > _WIDTH:
            body = body[: _WIDTH - 1] + "…"
        self._print(f"  {arrow}  {body}")


def _abridge(value: Any) -> Any:
    """Shorten what is long and repetitive: option lists and descriptions."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in ("availableModes", "options") and isinstance(item, list) and item:
                ids = [o.get("id") or o.get("value") or o.get("optionId") for o in item]
                out[key] = [f"{i}…" for i in ids]  # each object shortened to its id
            elif key in ("description", "jsonrpc"):
                continue
            elif (
                key in ("sessionId", "toolCallId")
                and isinstance(item, str)
                and len(item) > _ID_WIDTH
            ):
                out[key] = item[:12] + "…"
            else:
                out[key] = _abridge(item)
        return out
    if isinstance(value, list):
        return [_abridge(v) for v in value]
    return value


def _expect(what: str, actual: object, expected: object) -> None:
    if actual != expected:
        msg = f"{what}: expected {expected!r}, got {actual!r}"
        raise DemoFailedError(msg)


async def _copy(source: asyncio.StreamReader | None, sink: TextIO) -> None:
    """Copy *source* to *sink*, line by line, until its end."""
    while source is not None and (line := await source.readline()):
        sink.write(line.decode("utf-8", "replace"))
        sink.flush()


_PLAN = "## Implementation Plan\n1. Add the /items endpoint\n2. Write its tests"


TOOLS_PRESET = "permission"
"""The preset of the demo's second agent, whose modes decide its tool calls."""

TOOLS_ACT = "a second agent, the permission preset: each tool call decided by the mode"
"""The heading of the tool-call act, said before its agent starts."""


class _ToolClient(Protocol):
    """What the tool-call act needs of a demo client (v1 or v2)."""

    answers: list[str | None]
    tool_ends: list[str]
    asked: int
    before_answer: Callable[[], Awaitable[None]] | None


TOOL_ENDS = ("completed", "failed")
"""The final statuses of a tool call (ACP ``ToolCallStatus``) that a demo client records."""


async def next_answer(client: _ToolClient) -> str | None:
    """Count a permission request and pick its scripted answer, once the user acted.

    Awaits the client's ``before_answer`` (then clears it), and takes the next of its
    ``answers``.

    Returns:
        The ``optionId`` to select, or ``None`` to answer ``cancelled``.
    """
    client.asked += 1
    hook, client.before_answer = client.before_answer, None
    if hook is not None:
        await hook()
    return client.answers.pop(0) if client.answers else None


async def tool_act(
    transcript: _Transcript,
    client: _ToolClient,
    *,
    new_session: Callable[[], Awaitable[str]],
    set_mode: Callable[[str, str], Awaitable[None]],
    prompt: Callable[[str, str], Awaitable[None]],
) -> str:
    """Tool calls decided by the mode, on an agent serving :data:`TOOLS_PRESET`.

    The caller announces the act (:data:`TOOLS_ACT`) before it starts that agent, so the
    agent's ``initialize`` is shown under it.

    Returns:
        The act's ``sessionId``.

    Raises:
        DemoFailedError: a tool call did not end as the mode says it should.
    """

    async def turn(text: str, ends: list[str], asked: int) -> None:
        client.tool_ends.clear()
        before = client.asked
        await prompt(session_id, text)
        _expect(f"tool calls of {text!r}", client.tool_ends, ends)
        _expect(f"permission requests of {text!r}", client.asked - before, asked)

    session_id = await new_session()
    transcript.say("plan: `edit notes.txt` is denied; the tool call fails with the rule's reason")
    await set_mode(session_id, "plan")
    await turn("edit notes.txt", ["failed"], 0)
    transcript.say("default: the edit is asked; the user allows it once")
    await set_mode(session_id, "default")
    client.answers.append("allow_once")
    await turn("edit notes.txt", ["completed"], 1)
    transcript.say("acceptEdits: the edit is allowed without asking")
    await set_mode(session_id, "acceptEdits")
    await turn("edit notes.txt", ["completed"], 0)
    transcript.say(
        "default, mid-turn: while `run make` is asked the user picks acceptEdits, then allows "
        "it; the turn's next tool call, the edit, is decided by acceptEdits: no question"
    )
    await set_mode(session_id, "default")

    async def accept_edits() -> None:
        await set_mode(session_id, "acceptEdits")

    client.before_answer = accept_edits
    client.answers.append("allow_once")
    await turn("run make\nedit notes.txt", ["completed", "completed"], 1)
    return session_id
