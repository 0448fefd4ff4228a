"""A real ACP client for the end-to-end tests: the official SDK driving `modefsm serve`.

:func:`spawn_v1` and :func:`spawn_v2` start any agent process (``modefsm serve``, or a
host's script embedding ``ModeAgent``) under the official SDK client of ACP v1 or v2 over
its stdio, initialized: the one way the tests start a host and connect to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import acp
from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse, TextContentBlock

Answer = Callable[[list[Any], Any], Awaitable[RequestPermissionResponse]]


def text_block(text: str) -> TextContentBlock:
    """A text content block (SDK 1.0 removed ``acp.text_block``)."""
    return TextContentBlock(type="text", text=text)


def select(option_id: str) -> RequestPermissionResponse:
    return RequestPermissionResponse(
        outcome=AllowedOutcome(outcome="selected", option_id=option_id)
    )


def selecting(option_id: str) -> Answer:
    """An :attr:`TestClient.answer` that selects *option_id* for every permission request."""

    async def answer(options: list[Any], tool_call: Any) -> RequestPermissionResponse:
        return select(option_id)

    return answer


def cancelled() -> RequestPermissionResponse:
    return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


class TestClient:
    """Records every raw frame and answers permission requests through :attr:`answer`."""

    __test__ = False  # not a pytest class

    def __init__(self) -> None:
        self.frames: list[tuple[str, dict[str, Any]]] = []
        self.permission_requests: list[dict[str, Any]] = []
        self.answer: Answer | None = None
        self.pending = asyncio.Event()

    def observe(self, event: Any) -> None:
        self.frames.append((event.direction.value, event.message))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None

    async def request_permission(
        self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any
    ) -> RequestPermissionResponse:
        self.pending.set()
        if self.answer is None:
            return cancelled()
        return await self.answer(options, tool_call)

    def received(self) -> list[dict[str, Any]]:
        """Frames from the agent, without the jsonrpc member."""
        out = []
        for direction, message in self.frames:
            if direction == "incoming":
                out.append({k: v for k, v in message.items() if k != "jsonrpc"})
        return out

    def updates(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The `session/update` params received, in order."""
        return [
            m["params"]
            for m in self.received()
            if m.get("method") == "session/update"
            and (session_id is None or m["params"]["sessionId"] == session_id)
        ]

    def mark(self) -> int:
        return len(self.frames)

    def since(self, mark: int) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in m.items() if k != "jsonrpc"}
            for d, m in self.frames[mark:]
            if d == "incoming"
        ]


class V2TestClient:
    """The SDK's v2 client side, as :func:`spawn_v2` connects it: keeps every frame the agent
    sent (:attr:`frames`, raw); takes ``session/update``. A test's subclass answers
    ``session/request_permission``."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []

    def observe(self, event: Any) -> None:
        if event.direction.value == "incoming":
            self.frames.append(event.message)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None

    def mark(self) -> int:
        return len(self.frames)

    def since(self, mark: int) -> list[dict[str, Any]]:
        return self.frames[mark:]


TIMEOUT = 30.0
"""Seconds a spawned agent may take to answer ``session/load``."""

STARTUP = 300.0
"""Seconds a spawned agent that is still running may take to answer ``initialize``: a
guard against a hang, not a promise (several agents starting at once under a load of
8-16 took over 30 s to import and answer). One that exits first fails at once."""


async def start_serve(log: Path, *args: str, **options: Any) -> asyncio.subprocess.Process:
    """Start ``python -m modefsm serve --log LOG ARGS...`` with its stdin and stdout piped,
    for a client that writes and reads raw frames; *options* go to
    :func:`asyncio.create_subprocess_exec` (``stderr``, ``limit``)."""
    return await asyncio.create_subprocess_exec(
        *serve_command(log, *args),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        **options,
    )


async def start_host(script: Path, *args: str | Path, **options: Any) -> asyncio.subprocess.Process:
    """Start a host's own agent script (:func:`host_command`) as :func:`start_serve` starts
    ``modefsm serve``: stdin and stdout piped, *options* to the subprocess."""
    return await asyncio.create_subprocess_exec(
        *host_command(script, *args),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        **options,
    )


async def end_agent(process: asyncio.subprocess.Process) -> None:
    """End an agent as a client does, by closing its stdin; wait up to :data:`TIMEOUT`
    seconds for it to exit (on a hang: kill it and raise the wait's :class:`TimeoutError`)."""
    if process.stdin is not None:
        process.stdin.close()
    try:
        await asyncio.wait_for(process.wait(), TIMEOUT)
    except TimeoutError:  # pragma: no cover - a hang is the failure shown
        process.kill()
        raise


@contextlib.asynccontextmanager
async def spawn_v1(
    client: Any, *command: str, unstable: bool = False, sigkill: bool = False
) -> AsyncIterator[tuple[Any, asyncio.subprocess.Process]]:
    """Start *command* (a program and its arguments) under the SDK's v1 client, initialized.

    Yields the connection and the agent process. *client* is a :class:`TestClient` (or
    one with its ``observe``); *unstable* turns on the SDK's unstable methods. With
    *sigkill*, a pipe broken because the test SIGKILLed the agent is not an error (any
    other ``ConnectionError`` is).
    """
    process = None
    try:
        async with acp.spawn_agent_process(
            cast("Any", client),
            *command,
            # the agent ends once its input ends: wait for that, not the SDK's 2 s (under
            # load an agent still ending was terminated, or ended as terminate() ran:
            # ProcessLookupError)
            transport_kwargs={"stderr": None, "shutdown_timeout": TIMEOUT},
            observers=[client.observe],
            use_unstable_protocol=unstable,
        ) as (conn, process):
            await initialized(conn, process)
            yield conn, process
    except ConnectionError:
        if not sigkill or process is None or process.returncode != -signal.SIGKILL:
            raise


@contextlib.asynccontextmanager
async def spawn_v2(
    client: Any, *command: str, sigkill: bool = False
) -> AsyncIterator[tuple[Any, asyncio.subprocess.Process]]:
    """Start *command* under the SDK's v2 client over its stdio, initialized (version 2).

    Yields the connection and the agent process; at the end the connection is closed and
    the agent ended by closing its stdin (:func:`end_agent`) unless it has exited. *client*
    has ``observe``, ``session_update`` and ``request_permission``. With *sigkill*, as in
    :func:`spawn_v1`.
    """
    from acp.experimental import v2  # not in SDK 0.12 (the sdk_compat run in .ci/run)
    from acp.experimental.v2 import schema as s2

    process = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdin is not None
    assert process.stdout is not None
    conn = v2.connect_to_agent(client, process.stdin, process.stdout, observers=[client.observe])
    try:
        info = s2.Implementation(name="tests", version="0")
        await asyncio.wait_for(conn.initialize(protocol_version=2, info=info), TIMEOUT)
        yield conn, process
    finally:
        try:
            await conn.close()
        except ConnectionError:
            if not sigkill or process.returncode != -signal.SIGKILL:
                raise
        if process.returncode is None:
            await end_agent(process)


def serve_command(log: Path | str, *args: str, option: str = "--log") -> tuple[str, ...]:
    """``python -m modefsm serve OPTION LOG ARGS...``."""
    return (sys.executable, "-m", "modefsm", "serve", option, str(log), *args)


def host_command(script: Path, *args: str | Path) -> tuple[str, ...]:
    """``python SCRIPT ARGS...``: a host's own agent script."""
    return (sys.executable, str(script), *map(str, args))


@contextlib.asynccontextmanager
async def spawn(
    log: Path,
    *args: str,
    client: TestClient | None = None,
    option: str = "--log",
    prefix: tuple[str, ...] = (),
    sigkill: bool = False,
) -> AsyncIterator[tuple[Any, asyncio.subprocess.Process, TestClient]]:
    """Spawn ``[PREFIX...] python -m modefsm serve OPTION LOG ARGS...`` under the SDK client.

    Yields the initialized connection, the agent process and the client. *prefix* runs the
    agent under another command (``prlimit --fsize=N``); *option* is ``--log`` or ``--store``;
    *sigkill* as in :func:`spawn_v1`.
    """
    client = client or TestClient()
    command = (*prefix, *serve_command(log, *args, option=option))
    async with spawn_v1(client, *command, unstable=True, sigkill=sigkill) as (conn, process):
        yield conn, process, client


async def initialized(conn: Any, process: asyncio.subprocess.Process) -> None:
    """``initialize`` answered by the agent *process*, or an error once it has exited.

    Raises:
        AssertionError: the agent exited first, or answered nothing within STARTUP.
    """
    answer = asyncio.ensure_future(conn.initialize(protocol_version=acp.PROTOCOL_VERSION))
    ended = asyncio.ensure_future(process.wait())
    try:
        await asyncio.wait({answer, ended}, timeout=STARTUP, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ended.cancel()
        if not answer.done():
            answer.cancel()
    if answer.cancelled():
        state = f"exited {process.returncode}" if ended.done() else f"silent for {STARTUP:g} s"
        raise AssertionError(f"the agent (pid {process.pid}) {state} before initialize's answer")
    answer.result()


@contextlib.asynccontextmanager
async def serve(
    log: Path,
    *args: str,
    client: TestClient | None = None,
) -> AsyncIterator[tuple[Any, TestClient]]:
    """Spawn `python -m modefsm serve --log LOG ARGS...` and connect the SDK client to it."""
    async with spawn(log, *args, client=client) as (conn, _process, connected):
        yield conn, connected


async def loaded_mode(conn: Any, session_id: str) -> str:
    """The ``currentModeId`` that ``session/load`` of *session_id* answers."""
    loaded = await asyncio.wait_for(conn.load_session(cwd=".", session_id=session_id), TIMEOUT)
    mode: str = loaded.modes.current_mode_id
    return mode
