"""``modefsm serve --http`` stopped by SIGINT or SIGTERM with clients connected.

A real server holds an SDK client over streamable HTTP (its event streams open) and one
over WebSocket, each with a session; the signal must end the process within 1 s, exit 0,
with one line on stderr, and leave a log that replays clean.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.protocol.http_wire import listening, v1_client, verify

STOP_SECONDS = 1.0
"""What ``serve --http`` promises: stopped this long after the signal."""


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_stops_within_a_second_with_streams_and_a_websocket_open(tmp_path: Path, number):
    log = tmp_path / "modes.jsonl"
    command = [sys.executable, "-m", "modefsm", "serve", "--http", "127.0.0.1:0"]
    process = subprocess.Popen(  # noqa: ASYNC220 - started before any client runs
        [*command, "--log", str(log)], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    try:
        url = listening(process.stderr.readline().decode())
        async with v1_client(url, "http") as (http, _), v1_client(url, "ws") as (ws, _):
            await http.new_session(cwd="/", mcp_servers=[])
            await ws.new_session(cwd="/", mcp_servers=[])
            sent = time.monotonic()
            process.send_signal(number)
            status = await asyncio.to_thread(process.wait, 30)
            took = time.monotonic() - sent
        err = process.stderr.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()
    name = signal.Signals(number).name
    assert (0, f"modefsm serve: {name}: closing every connection and stopping\n") == (
        status,
        err,
    )
    assert took < STOP_SECONDS, f"stopped {took:.2f} s after {name}"
    assert "RESULT  clean" == verify(log)


def test_stops_at_once_without_clients(tmp_path: Path):
    log = tmp_path / "modes.jsonl"
    command = [sys.executable, "-m", "modefsm", "serve", "--http", "127.0.0.1:0"]
    process = subprocess.Popen(
        [*command, "--log", str(log)], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    listening(process.stderr.readline().decode())
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    took = time.monotonic() - sent
    assert (0, b"modefsm serve: SIGTERM: closing every connection and stopping\n") == (
        process.returncode,
        err,
    )
    assert took < STOP_SECONDS, f"stopped {took:.2f} s after SIGTERM"
