"""Helpers of the HTTP end-to-end tests: a real `modefsm serve --http` and the SDK's clients."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import re
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Self, cast

import acp

from modefsm import preset
from tests.acp_client import TestClient
from tests.conftest import mode_option, modes_state

SEED = preset("seed")
TIMEOUT = 30


LISTENING = re.compile(
    r"modefsm serve: listening on (?P<url>http://\S+/acp) "
    r"\((?:token in (?P<file>.+)|no authentication)\)\n"
)
"""The line `modefsm serve --http` prints once it listens."""


class Served(str):
    """The URL of a running server, with the bearer token its clients send (``None``:
    ``--no-auth``) and the file it was read from."""

    __slots__ = ("token", "token_file")

    def __new__(cls, url: str, token_file: str | None) -> Self:
        served = super().__new__(cls, url)
        served.token_file = None if token_file is None else Path(token_file)
        served.token = None if token_file is None else served.token_file.read_text().strip()
        return served

    token: str | None
    token_file: Path | None


def listening(line: str) -> Served:
    """The server a ``listening on`` line of `modefsm serve --http` names."""
    found = LISTENING.fullmatch(line)
    assert found, line
    return Served(found.group("url"), found.group("file"))


def auth(url: str) -> dict[str, str]:
    """The ``Authorization`` header of *url*'s server (none for ``--no-auth``)."""
    token = getattr(url, "token", None)
    return {} if token is None else {"Authorization": f"Bearer {token}"}


@contextlib.contextmanager
def http_server(log: Path, *args: str) -> Iterator[Served]:
    """`modefsm serve --http 127.0.0.1:0 --log LOG ARGS`; yields its URL (with its token);
    SIGTERM at the end."""
    with http_process(log, *args) as (url, _process):
        yield url


@contextlib.contextmanager
def http_process(log: Path, *args: str) -> Iterator[tuple[Served, subprocess.Popen[bytes]]]:
    """:func:`http_server`, yielding its URL (with its token) and its process."""
    command = [sys.executable, "-m", "modefsm", "serve", "--http", "127.0.0.1:0"]
    process = subprocess.Popen(
        [*command, "--log", str(log), *args], stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    assert process.stderr is not None
    try:
        yield listening(process.stderr.readline().decode()), process
    finally:
        end(process)
        process.stderr.close()
    assert process.returncode == 0


def end(process: subprocess.Popen[bytes], timeout: float = 15) -> None:
    """SIGTERM *process* and wait *timeout* seconds for it to end; kill it if it has not."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def transport_to(url: str, kind: str, headers: dict[str, str] | None = None) -> Any:
    """The SDK's client transport: streamable HTTP (``http``) or WebSocket (``ws``), sending
    *headers* (default: the server's ``Authorization``)."""
    from acp.http import create_http_stream
    from acp.ws import create_websocket_stream

    headers = auth(url) if headers is None else headers
    if kind == "http":
        return create_http_stream(url, headers=headers)
    return await create_websocket_stream(url.replace("http://", "ws://"), headers=headers)


def ws_connect(url: str, **kwargs: Any) -> Any:
    """``websockets.connect`` to *url*'s WebSocket with the server's ``Authorization``."""
    import websockets

    headers = {**auth(url), **kwargs.pop("additional_headers", {})}
    return websockets.connect(url.replace("http://", "ws://"), additional_headers=headers, **kwargs)


@contextlib.asynccontextmanager
async def v1_client(url: str, kind: str) -> AsyncIterator[tuple[Any, TestClient]]:
    """The SDK's v1 client, initialized, recording every frame."""
    client = TestClient()
    transport = await transport_to(url, kind)
    conn = acp.connect_to_agent(cast("Any", client), transport, observers=[client.observe])
    try:
        await asyncio.wait_for(conn.initialize(protocol_version=acp.PROTOCOL_VERSION), TIMEOUT)
        yield conn, client
    finally:
        await conn.close()


def modes(current: str) -> dict[str, Any]:
    """The v1 ``modes`` of the seed preset in mode *current*."""
    return modes_state(SEED, current)


def mode_updates(session_id: str, mode: str) -> list[dict[str, Any]]:
    """The two v1 notifications of a change to *mode* (frames without ``jsonrpc``)."""
    return [
        {
            "method": "session/update",
            "params": {
                "sessionId": session_id,
                "update": {"sessionUpdate": "current_mode_update", "currentModeId": mode},
            },
        },
        {
            "method": "session/update",
            "params": {
                "sessionId": session_id,
                "update": {
                    "sessionUpdate": "config_option_update",
                    "configOptions": [mode_option(SEED, mode)],
                },
            },
        },
    ]


async def until(check: Any, what: str) -> None:
    """Wait (event loop free) until ``check()`` is true."""
    deadline = time.monotonic() + TIMEOUT
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One raw POST (with the server's ``Authorization`` unless *headers* give one); the
    status and the JSON body (``None`` when empty)."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=TIMEOUT)
    try:
        sent = {"Content-Type": "application/json", **auth(url), **(headers or {})}
        connection.request("POST", parts.path, body, {k: v for k, v in sent.items() if v})
        response = connection.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else None
    finally:
        connection.close()


def session_records(log: Path, session_id: str) -> list[dict[str, Any]]:
    """The records of *log* about *session_id*, in order."""
    lines = (json.loads(line) for line in log.read_bytes().splitlines())
    return [record for record in lines if record.get("session_id") == session_id]


def chain(log: Path, session_id: str) -> list[tuple[str, int, str | None]]:
    """``(event, seq, to_mode)`` of every record of *log* about *session_id*."""
    return [
        (r["event"].removeprefix("modefsm."), r["seq"], r.get("to_mode"))
        for r in session_records(log, session_id)
    ]


@contextlib.contextmanager
def shared_server(factory: Any, name: str) -> Iterator[tuple[str, Path]]:
    """One server for a module's tests (*factory*: pytest's ``tmp_path_factory``)."""
    log = factory.mktemp(name) / "modes.jsonl"
    with http_server(log) as url:
        yield url, log


def verify(log: Path, *args: str) -> str:
    """`modefsm replay LOG --verify ARGS`'s last line (``RESULT  clean`` for a sound chain)."""
    result = subprocess.run(
        [sys.executable, "-m", "modefsm", "replay", str(log), "--verify", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return next(line for line in result.stdout.splitlines() if line.startswith("RESULT"))
