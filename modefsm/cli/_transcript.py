"""What both demo stories share: the transcript printer, the checks and the plan text.

:mod:`modefsm.cli._demo` (ACP v1) and :mod:`modefsm.cli._demo_v2` (ACP v2) import it;
it imports neither.
"""

from __future__ import annotations

import asyncio
from typing import Any, TextIO

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
