"""`modefsm serve --http`: the official SDK client over streamable HTTP and WebSocket, and
hostile requests against the same real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from modefsm import preset
from modefsm.protocol import MAX_BODY_BYTES, MAX_CONNECTIONS, create_app, serve_http
from tests.acp_client import select, selecting, text_block
from tests.conftest import mode_result
from tests.protocol.http_wire import auth, http_server, post, v1_client, ws_connect

from .test_conversation_replay import a_conversation, expected_replay

pytestmark = pytest.mark.e2e

SEED = preset("seed")
BAD_JSON_ANSWER = {
    "jsonrpc": "2.0",
    "id": None,
    "error": {
        "code": -32700,
        "message": "Parse error",
        "data": {
            "details": "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
        },
    },
}
"""The whole answer to the frame ``{bad``, over HTTP and WebSocket alike."""


def initialize(request_id: int = 0) -> bytes:
    frame = {"jsonrpc": "2.0", "id": request_id, "method": "initialize"}
    return json.dumps({**frame, "params": {"protocolVersion": 1}}).encode()


@pytest.mark.parametrize("kind", ["http", "ws"])
class TestOverTheWire:
    async def test_set_mode_switch_and_load_after_a_restart(self, log_path, kind):
        with http_server(log_path) as url:
            async with v1_client(url, kind) as (conn, client):
                session_id, rejected, approved = await a_conversation(conn, client)
                kinds = [u["update"]["sessionUpdate"] for u in client.updates(session_id)]
        assert kinds == [
            "current_mode_update",  # set_mode to architect
            "config_option_update",
            "tool_call",  # rejected
            "tool_call_update",
            "agent_message_chunk",
            "tool_call",  # approved
            "current_mode_update",
            "config_option_update",
            "tool_call_update",
            "agent_message_chunk",
            "agent_message_chunk",  # in code mode
        ]
        with http_server(log_path) as url:
            async with v1_client(url, kind) as (conn, client):
                mark = client.mark()
                response = await conn.load_session(cwd=".", session_id=session_id)
                frames = client.since(mark)
                set_back = await conn.set_config_option(
                    config_id="mode", session_id=session_id, value="ask"
                )
        assert frames == [
            *expected_replay(session_id, rejected, approved),
            {
                "id": 1,
                "result": mode_result(SEED, "code"),
            },
        ]
        assert response.modes.current_mode_id == "code"
        assert set_back.config_options[0].current_value == "ask"

    async def test_permission_request_round_trip(self, log_path, kind):
        with http_server(log_path) as url:
            async with v1_client(url, kind) as (conn, client):
                client.answer = selecting("ask")
                session_id = (await conn.new_session(cwd=".")).session_id
                await conn.set_session_mode(session_id=session_id, mode_id="architect")
                result = await conn.prompt(session_id=session_id, prompt=[text_block("go")])
                requests = [
                    m for m in client.received() if m.get("method") == "session/request_permission"
                ]
                last = client.updates(session_id)[-2]["update"]
        assert result.stop_reason == "end_turn"
        assert [r["params"]["toolCall"]["kind"] for r in requests] == ["switch_mode"]
        assert last["status"] == "completed"
        assert last["content"] == [
            {"type": "content", "content": {"type": "text", "text": "Switched to ask mode."}}
        ]


@pytest.fixture(scope="module")
def one_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("http") / "modes.jsonl"
    with http_server(log) as url:
        yield url


class TestHostileRequests:
    """Each gets its exact error; the server keeps serving."""

    def test_an_oversized_body_is_refused_before_it_is_read(self, one_server):
        body = b" " * (MAX_BODY_BYTES + 1)
        assert post(one_server, body) == (
            413,
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": -32600,
                    "message": "Invalid request",
                    "data": {
                        "details": f"a request body is at most {MAX_BODY_BYTES} bytes, "
                        f"not {MAX_BODY_BYTES + 1}",
                        "limit": "bytes",
                        "max": MAX_BODY_BYTES,
                    },
                },
            },
        )

    def test_bad_json_gets_a_parse_error(self, one_server):
        assert post(one_server, b"{bad") == (400, BAD_JSON_ANSWER)

    def test_nan_and_scalars_and_batches_are_refused(self, one_server):
        status, body = post(one_server, b'{"jsonrpc":"2.0","id":NaN,"method":"initialize"}')
        assert (status, body["error"]["code"]) == (400, -32700)
        assert post(one_server, b"5")[1]["error"]["data"] == {
            "details": "a frame is an object, not a scalar"
        }
        assert post(one_server, b"[]")[1]["error"]["data"] == {
            "details": "a frame is an object, not an array (ACP has no batches)"
        }

    def test_a_bad_envelope_is_answered_with_its_id(self, one_server):
        frame = b'{"jsonrpc":"2.0","id":7,"method":null}'
        assert post(one_server, frame) == (
            400,
            {
                "jsonrpc": "2.0",
                "id": 7,
                "error": {
                    "code": -32600,
                    "message": "Invalid request",
                    "data": {"details": "method: a string"},
                },
            },
        )

    def test_an_unknown_connection_id(self, one_server):
        frame = b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"."}}'
        headers = {"Acp-Connection-Id": "0" * 32}
        assert post(one_server, frame, headers) == (404, {"error": "Unknown connection id"})

    def test_a_wrong_content_type(self, one_server):
        status, body = post(one_server, initialize(), {"Content-Type": "text/plain"})
        assert (status, body) == (415, {"error": "Content-Type must be application/json"})

    async def test_the_server_still_serves_after_all_of_them(self, one_server):
        async with v1_client(one_server, "http") as (conn, _client):
            session = await conn.new_session(cwd=".")
            await conn.set_session_mode(session_id=session.session_id, mode_id="code")


def notify() -> bytes:
    """An extension notification: accepted (``202``) on a live connection, ignored."""
    return b'{"jsonrpc":"2.0","method":"_test/ping","params":{}}'


def connection_of(url: str, request_id: int) -> str:
    """A new HTTP connection's id (a raw ``initialize``)."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        headers = {"Content-Type": "application/json", **auth(url)}
        connection.request("POST", parts.path, initialize(request_id), headers)
        response = connection.getresponse()
        response.read()
        assert response.status == 200
        return response.headers["Acp-Connection-Id"]
    finally:
        connection.close()


@contextlib.asynccontextmanager
async def in_process(host: Any = None, **limits: Any) -> Any:
    """`serve_http` in this process with *limits*; yields its URL. Each connection's agent
    is a *host* (a ``ModeAgent`` class; the scripted agent by default) on one engine."""
    from modefsm.cli._serve import ScriptedAgent
    from modefsm.protocol import SharedEngine

    engine = SharedEngine(SEED)
    kind = host or ScriptedAgent

    def factory(conn: Any) -> Any:
        agent = kind(SEED, unstable=True, engine=engine)
        agent.on_connect(conn)
        return agent

    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(
        serve_http(factory, "127.0.0.1", 0, token=None, ready=ready.set_result, **limits)
    )
    try:
        yield await asyncio.wait_for(ready, 30)
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server


class TestLimits:
    def test_a_connection_beyond_the_cap_ends_the_longest_idle_one(self, log_path):
        with http_server(log_path) as url:
            ids = [connection_of(url, n) for n in range(MAX_CONNECTIONS)]
            assert post(url, notify(), {"Acp-Connection-Id": ids[0]}) == (202, None)
            newest = connection_of(url, 99)  # the cap is reached: ids[1] is idle the longest
            assert post(url, notify(), {"Acp-Connection-Id": ids[1]}) == (
                404,
                {"error": "Unknown connection id"},
            )
            for kept in (ids[0], *ids[2:], newest):
                assert post(url, notify(), {"Acp-Connection-Id": kept}) == (202, None)

    async def test_a_connection_beyond_the_cap_gets_503_when_every_one_is_busy(self):
        undecided: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        async def wait(options: Any, tool_call: Any) -> Any:
            return await undecided

        async with (
            in_process(max_connections=1) as url,
            v1_client(url, "http") as (conn, client),
        ):
            client.answer = wait
            session_id = (await conn.new_session(cwd=".")).session_id
            await conn.set_session_mode(session_id=session_id, mode_id="architect")
            turn = asyncio.ensure_future(
                conn.prompt(session_id=session_id, prompt=[text_block("go")])
            )
            await asyncio.wait_for(client.pending.wait(), 30)
            refused = await asyncio.to_thread(post, url, initialize(7))
            undecided.set_result(select("reject"))
            await turn
        assert refused == (
            503,
            {
                "jsonrpc": "2.0",
                "id": 7,
                "error": {
                    "code": -32600,
                    "message": "Invalid request",
                    "data": {
                        "details": "at most 1 connections are served at once",
                        "limit": "connections",
                        "max": 1,
                    },
                },
            },
        )

    async def test_an_idle_connection_expires(self):
        async with in_process(idle_seconds=1.0) as url:
            connection_id = await asyncio.to_thread(connection_of, url, 0)
            headers = {"Acp-Connection-Id": connection_id}
            assert await asyncio.to_thread(post, url, notify(), headers) == (202, None)
            # any request would keep it alive: look once, after the reaper (a task of this
            # loop, every 0.25 s) has had many turns past the idle second
            await asyncio.sleep(4)
            assert await asyncio.to_thread(post, url, notify(), headers) == (
                404,
                {"error": "Unknown connection id"},
            )

    def test_create_app_is_an_asgi_app(self):
        app = create_app(lambda conn: None, token=None)
        assert callable(app)


class TestWebSocketFrames:
    async def test_bad_frames_are_answered_on_the_socket_and_it_keeps_serving(self, one_server):
        async with ws_connect(one_server) as socket:
            await socket.send("{bad")
            parse_error = json.loads(await asyncio.wait_for(socket.recv(), 10))
            await socket.send('{"jsonrpc":"2.0","id":3,"method":7}')
            invalid = json.loads(await asyncio.wait_for(socket.recv(), 10))
            await socket.send(initialize(4).decode())
            answer = json.loads(await asyncio.wait_for(socket.recv(), 10))
        assert parse_error == BAD_JSON_ANSWER
        assert invalid == {
            "jsonrpc": "2.0",
            "id": 3,
            "error": {
                "code": -32600,
                "message": "Invalid request",
                "data": {"details": "method: a string"},
            },
        }
        assert (answer["id"], answer["result"]["protocolVersion"]) == (4, 1)

    async def test_an_oversized_message_closes_only_its_socket(self, one_server):
        import websockets

        async with ws_connect(one_server, max_size=None) as socket:
            await socket.send("x" * (MAX_BODY_BYTES + 1))
            with pytest.raises(websockets.ConnectionClosed) as info:
                await asyncio.wait_for(socket.recv(), 10)
        assert info.value.rcvd is not None
        assert info.value.rcvd.code == 1009  # message too big
        async with v1_client(one_server, "ws") as (conn, _client):
            await conn.new_session(cwd=".")


class TestCommandLine:
    @pytest.mark.parametrize("address", ["8000", "localhost:", ":80", "127.0.0.1:99999"])
    def test_a_bad_address_is_one_line_on_stderr(self, address):
        result = subprocess.run(
            [sys.executable, "-m", "modefsm", "serve", "--http", address],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert result.returncode == 2
        assert result.stderr.splitlines()[-1] == (
            f"modefsm serve: error: argument --http: not HOST:PORT (e.g. 127.0.0.1:8000): "
            f"{address!r}"
        )

    def test_an_address_in_use_is_one_line_on_stderr(self, log_path, tmp_path):
        with http_server(log_path) as url:
            port = urllib.parse.urlsplit(url).port
            result = subprocess.run(
                [sys.executable, "-m", "modefsm", "serve", "--http", f"127.0.0.1:{port}"],
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
            )
        assert result.returncode == 2
        assert result.stderr == (
            f"modefsm serve: cannot listen on 127.0.0.1:{port}: Address already in use\n"
        )
