"""The official SDK clients (ACP v1 and v2) driving `modefsm serve`'s scripted tool calls.

:func:`connect` spawns ``python -m modefsm serve OPTION LOG ARGS...`` and connects the v1
or the v2 SDK client to it. The client records every frame the agent sends (``jsonrpc``
left out) and answers each ``session/request_permission`` with :attr:`ToolClient.answer`,
an async function of the request's params that may drive the agent meanwhile (change the
mode) before it returns the ``optionId`` to select (``None``: cancelled).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from acp.experimental.v2 import schema as s2
from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse, TextContentBlock

from tests.acp_client import TIMEOUT, serve_command, spawn_v1, spawn_v2

Answer = Callable[[dict[str, Any]], Awaitable[str | None]]


class ToolClient:
    """One SDK client (v1 or v2) of one `modefsm serve` process."""

    __test__ = False

    def __init__(self, version: int) -> None:
        self.version = version
        self.frames: list[dict[str, Any]] = []
        self.answer: Answer | None = None
        self.conn: Any = None
        self.process: asyncio.subprocess.Process | None = None  # the agent, to kill
        self.seen = asyncio.Condition()

    # -- the client's side, as both SDKs call it ------------------------------------------

    def observe(self, event: Any) -> None:
        if event.direction.value == "incoming":
            frame = {k: v for k, v in event.message.items() if k != "jsonrpc"}
            self.frames.append(frame)
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self.seen:
            self.seen.notify_all()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None

    async def request_permission(self, session_id: str, **kwargs: Any) -> Any:
        params = {"sessionId": session_id, **kwargs}
        option_id = None if self.answer is None else await self.answer(params)
        if self.version == 1:
            if option_id is None:
                return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
            return RequestPermissionResponse(
                outcome=AllowedOutcome(outcome="selected", option_id=option_id)
            )
        if option_id is None:
            return s2.RequestPermissionResponse(outcome=s2.CancelledPermissionOutcome())
        return s2.RequestPermissionResponse(
            outcome=s2.SelectedPermissionOutcomeVariant(option_id=option_id)
        )

    # -- requests --------------------------------------------------------------------------

    async def new_session(self) -> str:
        response = await asyncio.wait_for(self.conn.new_session(cwd="/"), TIMEOUT)
        return str(response.session_id)

    async def load(self, session_id: str) -> None:
        if self.version == 1:
            await asyncio.wait_for(self.conn.load_session(cwd="/", session_id=session_id), TIMEOUT)
        else:
            await asyncio.wait_for(
                self.conn.resume_session(cwd="/", session_id=session_id), TIMEOUT
            )

    async def set_mode(self, session_id: str, mode: str) -> None:
        if self.version == 1:
            await self.conn.set_session_mode(session_id=session_id, mode_id=mode)
        else:
            await self.conn.set_config_option(
                config_id="mode", session_id=session_id, value=mode, type="id"
            )

    async def prompt(self, session_id: str, text: str) -> Any:
        block: Any = (
            TextContentBlock(type="text", text=text)
            if self.version == 1
            else s2.TextContentBlock(text=text)
        )
        return await asyncio.wait_for(
            self.conn.prompt(session_id=session_id, prompt=[block]), TIMEOUT
        )

    # -- what the agent sent ---------------------------------------------------------------

    def mark(self) -> int:
        return len(self.frames)

    def since(self, mark: int) -> list[dict[str, Any]]:
        return self.frames[mark:]

    def updates(self, mark: int = 0) -> list[dict[str, Any]]:
        """The ``update`` bodies of the ``session/update`` frames since *mark*."""
        return [
            f["params"]["update"] for f in self.frames[mark:] if f.get("method") == "session/update"
        ]

    async def until(self, test: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Wait (at most TIMEOUT seconds) for a frame from the agent that passes *test*."""

        def found() -> dict[str, Any] | None:
            return next((f for f in self.frames if test(f)), None)

        async with self.seen:
            await asyncio.wait_for(self.seen.wait_for(lambda: found() is not None), TIMEOUT)
        frame = found()
        assert frame is not None
        return frame


@contextlib.asynccontextmanager
async def connect(
    log: Path | str, *args: str, version: int = 1, option: str = "--log"
) -> AsyncIterator[ToolClient]:
    """``modefsm serve OPTION LOG ARGS...`` under the SDK client of ACP *version*."""
    client = ToolClient(version)
    command = serve_command(log, *args, option=option)
    started = (
        spawn_v1(client, *command, unstable=True) if version == 1 else spawn_v2(client, *command)
    )
    async with started as (conn, process):
        client.conn = conn
        client.process = process
        yield client
