"""No lock-out: idle, silent and slow peers cannot keep a real client from `serve --http`.

Real servers on 127.0.0.1 (`modefsm serve --http`, or the same agent through
``tests/protocol/http_serve.py`` with bounds a test chooses), real sockets: WebSockets that
say nothing, TCP connections that send half a request's headers, initialized connections
left idle, and the SDK client doing real round trips meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acp_client import select, text_block
from tests.protocol.http_wire import (
    TIMEOUT,
    Served,
    auth,
    chain,
    end,
    http_process,
    http_server,
    listening,
    v1_client,
)

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parent.parent.parent
INITIALIZE = '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}'


@contextlib.contextmanager
def bounded_server(log: Path, *args: str, prefix: tuple[str, ...] = ()) -> Iterator[Served]:
    """``tests/protocol/http_serve.py LOG ARGS`` (under *prefix*); yields its URL."""
    process = subprocess.Popen(
        [*prefix, sys.executable, "-m", "tests.protocol.http_serve", str(log), *args],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert process.stderr is not None
    try:
        yield listening(process.stderr.readline().decode())
    finally:
        end(process, 30)
        process.stderr.close()


def address(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").partition("/")[0].rpartition(":")
    return host, int(port)


def answer(status: int, reason: str, body: dict[str, Any]) -> bytes:
    """The whole raw answer the server writes before it closes a socket."""
    data = json.dumps(body, separators=(",", ":")).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + data


def limit_error(details: str, limit: str, maximum: float) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": "Invalid request",
            "data": {"details": details, "limit": limit, "max": maximum},
        },
    }


async def silent_socket(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(*address(url))


async def slow_headers(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that has sent the first line and one header of a request, no more."""
    reader, writer = await silent_socket(url)
    host, port = address(url)
    writer.write(f"POST /acp HTTP/1.1\r\nHost: {host}:{port}\r\nX-Slow: ".encode())
    await writer.drain()
    return reader, writer


async def idle_websocket(url: str) -> Any:
    """An upgraded, authenticated WebSocket that sends nothing."""
    import websockets

    headers = auth(url)
    return await websockets.connect(url.replace("http://", "ws://"), additional_headers=headers)


async def close_frame(socket: Any) -> tuple[int, str]:
    """The code and reason of the close the server sends *socket* (it sends nothing else)."""
    import websockets

    with pytest.raises(websockets.ConnectionClosed) as closed:
        await asyncio.wait_for(socket.recv(), TIMEOUT)
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code, closed.value.rcvd.reason


@contextlib.asynccontextmanager
async def closing(sockets: list[Any]) -> AsyncIterator[None]:
    try:
        yield
    finally:
        for item in sockets:
            with contextlib.suppress(Exception):
                if isinstance(item, tuple):
                    item[1].close()
                else:
                    await asyncio.wait_for(item.close(), 1)


async def round_trips(url: str, count: int) -> tuple[str, float]:
    """*count* `session/set_mode` round trips of the SDK client; its session and the seconds."""
    async with v1_client(url, "http") as (conn, _client):
        session_id = (await conn.new_session(cwd=".")).session_id
        started = time.monotonic()
        for n in range(count):
            mode = ("code", "ask")[n % 2]
            await asyncio.wait_for(
                conn.set_session_mode(session_id=session_id, mode_id=mode), TIMEOUT
            )
        return session_id, time.monotonic() - started


def descriptors(needed: int) -> None:
    """Raise this process's soft file limit to its hard one; it must allow *needed*."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    assert hard >= needed, f"the test needs {needed} file descriptors; the hard limit is {hard}"


async def gather_bounded(factories: list[Any], at_once: int = 100) -> list[Any]:
    gate = asyncio.Semaphore(at_once)

    async def one(factory: Any) -> Any:
        async with gate:
            return await factory()

    return await asyncio.gather(*(one(f) for f in factories))


async def test_a_client_is_served_while_1000_idle_websockets_and_1000_slow_headers_are_open(
    tmp_path,
):
    descriptors(4500)
    log = tmp_path / "modes.jsonl"
    # deadlines far beyond the test: what is shown is that none of these sockets takes a
    # place a client needs (the deadlines that close them are tested below)
    with bounded_server(log, "--first-frame", "600", "--header", "600") as url:
        _warm, alone = await round_trips(url, 100)
        websockets_ = await gather_bounded([lambda: idle_websocket(url)] * 1000)
        slow = await gather_bounded([lambda: slow_headers(url)] * 1000)
        async with closing([*websockets_, *slow]):
            session_id, crowded = await round_trips(url, 100)
            # every one of them is still open: the client was served while they were
            assert [ws.state.name for ws in websockets_] == ["OPEN"] * 1000
            assert [reader.at_eof() for reader, _writer in slow] == [False] * 1000
    assert chain(log, session_id) == [
        ("session_created", 1, "ask"),
        *(("mode_changed", n, ("code", "ask")[n % 2]) for n in range(2, 102)),
    ]
    print(f"100 set_mode round trips: {alone:.2f} s alone, {crowded:.2f} s beside 2,000 sockets")  # noqa: T201 - a figure for the docs


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server whose deadlines are all 1 s."""
    log = tmp_path_factory.mktemp("deadlines") / "modes.jsonl"
    args = ("--first-frame", "1", "--header", "1", "--body", "1", "--idle", "1")
    with bounded_server(log, *args) as url:
        yield url


class TestDeadlines:
    """Silent, slow and idle peers are closed, each with its exact answer."""

    async def test_a_websocket_that_sends_nothing_is_closed_1008(self, server):
        socket = await idle_websocket(server)
        assert await close_frame(socket) == (1008, "no message within 1 s")

    @pytest.mark.parametrize("opening", [silent_socket, slow_headers], ids=["silent", "slow"])
    async def test_a_connection_without_headers_gets_408_and_is_closed(self, server, opening):
        reader, writer = await opening(server)
        try:
            data = await asyncio.wait_for(reader.read(), TIMEOUT)  # to the end: closed
        finally:
            writer.close()
        details = "a request's headers must arrive within 1 s"
        assert data == answer(408, "Request Timeout", limit_error(details, "seconds", 1.0))

    async def test_a_body_that_does_not_arrive_gets_408(self, server):
        reader, writer = await silent_socket(server)
        host, port = address(server)
        token = server.token
        writer.write(
            (
                f"POST /acp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            ).encode()
        )
        try:
            data = await asyncio.wait_for(reader.read(), TIMEOUT)
        finally:
            writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        assert b"\r\nconnection: close" in head
        details = "a request body must arrive within 1 s"
        assert json.loads(body) == limit_error(details, "seconds", 1)

    @pytest.mark.parametrize(
        ("headers", "status"),
        [
            ("Content-Type: application/json\r\n", "401 Unauthorized"),  # no token
            ("Host: attacker.example\r\nContent-Type: application/json\r\n", "403 Forbidden"),
            ("Authorization: Bearer {token}\r\nContent-Type: text/plain\r\n", "415 "),
        ],
        ids=["no-token", "host", "content-type"],
    )
    async def test_a_body_trickling_after_an_answer_is_cut_at_the_body_deadline(
        self, server, headers, status
    ):
        # the request is answered at once without its body being read; the peer then
        # sends the body a byte at a time: it must not keep its socket for ever
        reader, writer = await silent_socket(server)
        host, port = address(server)
        head = headers.format(token=server.token)
        if not head.startswith("Host:"):
            head = f"Host: {host}:{port}\r\n{head}"
        writer.write(f"POST /acp HTTP/1.1\r\n{head}Content-Length: 1000000\r\n\r\n{{".encode())
        try:
            answered = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
            assert answered.startswith(f"HTTP/1.1 {status}".encode())
            started = time.monotonic()
            cut = False
            while time.monotonic() - started < TIMEOUT and not cut:
                try:
                    writer.write(b" ")
                    await writer.drain()
                    cut = await asyncio.wait_for(reader.read(65536), 0.1) == b""
                except TimeoutError:
                    continue
                except ConnectionError:
                    cut = True
            waited = time.monotonic() - started
        finally:
            writer.close()
        assert cut
        assert waited < 5  # the body deadline is 1 s

    async def test_an_initialized_websocket_left_idle_is_closed_1001(self, server):
        socket = await idle_websocket(server)
        await socket.send(INITIALIZE)
        assert json.loads(await asyncio.wait_for(socket.recv(), TIMEOUT))["id"] == 0
        assert await close_frame(socket) == (1001, "idle for 1 s")


class TestPlaces:
    """Only initialized connections take a place; a new one ends the longest idle one."""

    async def test_silent_websockets_take_no_place(self, tmp_path):
        with bounded_server(tmp_path / "modes.jsonl", "--max-connections", "2") as url:
            silent = [await idle_websocket(url) for _ in range(20)]
            async with closing(silent):
                async with v1_client(url, "ws") as (a, _), v1_client(url, "http") as (b, _):
                    await a.new_session(cwd=".")
                    await b.new_session(cwd=".")
                assert [ws.state.name for ws in silent] == ["OPEN"] * 20

    async def test_a_new_connection_ends_the_longest_idle_one(self, tmp_path):
        with bounded_server(tmp_path / "modes.jsonl", "--max-connections", "2") as url:
            oldest, recent = await idle_websocket(url), await idle_websocket(url)
            async with closing([oldest, recent]):
                for socket in (oldest, recent):
                    await socket.send(INITIALIZE)
                    await asyncio.wait_for(socket.recv(), TIMEOUT)
                async with v1_client(url, "http") as (conn, _client):
                    await conn.new_session(cwd=".")  # served: a place was made for it
                    assert await close_frame(oldest) == (
                        1001,
                        "idle the longest while the server was full",
                    )
                    await recent.send(INITIALIZE.replace('"id":0', '"id":1'))
                    assert json.loads(await asyncio.wait_for(recent.recv(), TIMEOUT))["id"] == 1

    async def test_a_websocket_finds_no_place_when_every_connection_is_busy(self, tmp_path):
        undecided: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        async def wait(options: Any, tool_call: Any) -> Any:
            return await undecided

        with bounded_server(tmp_path / "modes.jsonl", "--max-connections", "1") as url:
            async with v1_client(url, "http") as (conn, client):
                client.answer = wait
                session_id = (await conn.new_session(cwd=".")).session_id
                await conn.set_session_mode(session_id=session_id, mode_id="architect")
                turn = asyncio.ensure_future(
                    conn.prompt(session_id=session_id, prompt=[text_block("go")])
                )
                await asyncio.wait_for(client.pending.wait(), TIMEOUT)  # a request open
                socket = await idle_websocket(url)
                await socket.send(INITIALIZE)
                refused = json.loads(await asyncio.wait_for(socket.recv(), TIMEOUT))
                closed = await close_frame(socket)
                undecided.set_result(select("reject"))
                assert (await turn).stop_reason == "end_turn"  # the busy one was kept
        assert refused == {
            **limit_error("at most 1 connections are served at once", "connections", 1),
            "id": 0,
        }
        assert closed == (1013, "at most 1 connections")


class TestSockets:
    def test_serve_raises_its_soft_descriptor_limit_to_the_hard_one(self, log_path):
        prefix = ["prlimit", "--nofile=256:4096"]
        command = [sys.executable, "-m", "modefsm", "serve", "--http", "127.0.0.1:0"]
        process = subprocess.Popen(
            [*prefix, *command, "--log", str(log_path)],
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        assert process.stderr is not None
        try:
            listening(process.stderr.readline().decode())
            limits = Path(f"/proc/{process.pid}/limits").read_text().splitlines()
        finally:
            end(process, 30)
            process.stderr.close()
        [line] = [line for line in limits if line.startswith("Max open files")]
        assert line.split()[3:5] == ["4096", "4096"]

    async def test_sockets_beyond_the_cap_get_503_until_the_silent_ones_are_closed(self, tmp_path):
        prefix = ("prlimit", "--nofile=128:128")  # 64 sockets: 128 less 64 kept for the rest
        with bounded_server(tmp_path / "modes.jsonl", "--header", "2", prefix=prefix) as url:
            silent = [await silent_socket(url) for _ in range(64)]
            async with closing(silent):
                reader, writer = await silent_socket(url)
                refused = await asyncio.wait_for(reader.read(), TIMEOUT)
                writer.close()
                details = "at most 64 sockets are open at once"
                assert refused == answer(
                    503, "Service Unavailable", limit_error(details, "sockets", 64)
                )
                # the silent ones are answered 408 and closed at their deadline
                for silent_reader, _writer in silent:
                    assert (await asyncio.wait_for(silent_reader.read(), TIMEOUT)).startswith(
                        b"HTTP/1.1 408 "
                    )
                async with v1_client(url, "http") as (conn, _client):
                    await conn.new_session(cwd=".")


async def test_the_cli_server_closes_a_silent_websocket_after_10_s(log_path):
    with http_server(log_path) as url:
        socket = await idle_websocket(url)
        started = time.monotonic()
        closed = await close_frame(socket)
        waited = time.monotonic() - started
    assert closed == (1008, "no message within 10 s")
    assert waited >= 9.5


async def refused_upgrade(url: str) -> bytes:
    """A WebSocket upgrade without a token; the status line of its answer."""
    reader, writer = await silent_socket(url)
    host, port = address(url)
    writer.write(
        f"GET /acp HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    try:
        return (await asyncio.wait_for(reader.readline(), TIMEOUT)).rstrip()
    finally:
        writer.close()


async def malformed_request(url: str) -> bytes:
    """A request line h11 cannot parse; the status line of its answer."""
    reader, writer = await silent_socket(url)
    writer.write(b"NOT HTTP\r\n\r\n")
    try:
        return (await asyncio.wait_for(reader.readline(), TIMEOUT)).rstrip()
    finally:
        writer.close()


async def test_refused_peers_cannot_stall_the_server_through_an_unread_stderr(log_path):
    # a client that reads the listening line and never reads stderr again; peers without
    # a token each make the server say something on stderr: it must never wait for room
    descriptors(1000)
    with http_process(log_path) as (url, process):
        upgrades = await gather_bounded([lambda: refused_upgrade(url)] * 2000, 50)
        malformed = await gather_bounded([lambda: malformed_request(url)] * 2000, 50)
        session_id, _seconds = await round_trips(url, 10)
        end(process)
        assert process.stderr is not None
        rest = process.stderr.read().decode()
    assert process.returncode == 0
    assert set(upgrades) == {b"HTTP/1.1 401 Unauthorized"}
    assert set(malformed) == {b"HTTP/1.1 400 Bad Request"}
    assert len(chain(log_path, session_id)) == 11
    # what the server said is bounded diagnostics (the rest counted as dropped), and
    # a refused WebSocket is not an error of the server
    lines = rest.splitlines()
    assert all(line.startswith("modefsm serve: ") for line in lines), lines[:3]
    assert len(lines) < 200
    assert "handshake" not in rest
    assert url.token is not None
    assert url.token not in rest
