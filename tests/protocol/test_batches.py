"""JSON-RPC batches: served on ACP v2 connections (stdio, HTTP, WebSocket), refused on v1.

Each test drives a real `modefsm serve` with raw frames (the official SDKs send no
batches) and compares every answer whole.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from modefsm.protocol import MAX_FRAME_BYTES, MAX_VALUES
from modefsm.protocol.transport._batch import MAX_BATCH
from tests.protocol.http_wire import TIMEOUT, auth, http_server, ws_connect
from tests.protocol.raw_wire import INIT_V2, Stdio, call, note, stdio
from tests.protocol.v2_frames import option_v2

pytestmark = pytest.mark.e2e


def invalid(details: str, request_id: Any = None, **data: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {
            "code": -32600,
            "message": "Invalid request",
            "data": {"details": details, **data},
        },
    }


NO_BATCHES = invalid("a frame is an object, not an array (ACP has no batches)")
EMPTY = invalid("a batch is a non-empty array")
NOT_AN_OBJECT = invalid("a batch entry is an object, not a scalar")


def listed(request_id: Any, *sessions: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": {"sessions": list(sessions)}}


def new_session(request_id: Any, session_id: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {"sessionId": session_id, "configOptions": [option_v2("ask")]},
    }


async def fence(peer: Stdio, request_id: int) -> list[Any]:
    """Every frame up to the answer of a lone ``session/list`` (*request_id*) sent now: what
    the agent wrote for the frames before it."""
    await peer.write(call(request_id, "session/list", {"cwd": "/fence"}))
    frames = []
    while (frame := await peer.read()) != listed(request_id):
        frames.append(frame)
    return frames


class TestStdio:
    async def test_calls_notifications_and_bad_entries_get_one_array_in_order(self, log_path):
        async with stdio(log_path) as peer:
            await peer.write(
                [
                    call("n", "session/new", {"cwd": "/a", "mcpServers": []}),
                    note("session/cancel", {"sessionId": "sess_nothing"}),
                    7,
                    {"jsonrpc": "2.0", "id": 3, "method": 5},
                    {"jsonrpc": "2.0", "id": 3.5, "method": "session/list"},
                    call(2, "session/list", {"cwd": "/nowhere"}),
                    call(0, "no/such_method", {}),
                ]
            )
            answer = await peer.read()
            session_id = answer[0]["result"]["sessionId"]
            assert answer == [
                new_session("n", session_id),
                NOT_AN_OBJECT,
                invalid("method: a string", 3),
                invalid("id: a string, an integer or null"),
                listed(2),
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "error": {
                        "code": -32601,
                        "message": "Method not found",
                        "data": {"method": "no/such_method"},
                    },
                },
            ]
            assert await fence(peer, 9) == []

    async def test_a_notification_only_batch_gets_no_output_at_all(self, log_path):
        async with stdio(log_path) as peer:
            await peer.write([note("session/cancel", {"sessionId": "s"}), note("_x/y", {})])
            assert await fence(peer, 9) == []

    async def test_empty_and_entry_only_batches(self, log_path):
        async with stdio(log_path) as peer:
            await peer.write([])
            assert await peer.read() == EMPTY
            await peer.write([1, "x"])
            assert await peer.read() == [NOT_AN_OBJECT, NOT_AN_OBJECT]

    async def test_the_frame_limits_apply_to_the_batch_whole(self, log_path):
        async with stdio(log_path) as peer:
            await peer.write([note("_x/y", {}) for _ in range(MAX_BATCH + 1)])
            assert await peer.read() == invalid(
                f"a batch holds at most {MAX_BATCH} entries, not {MAX_BATCH + 1}",
                limit="batch",
                max=MAX_BATCH,
            )
            many = b"[" + b",".join([b"0"] * (MAX_VALUES + 1)) + b"]"
            await peer.write(many)
            assert await peer.read() == invalid(
                f"a frame holds at most {MAX_VALUES} values, not {MAX_VALUES + 1}",
                limit="values",
                max=MAX_VALUES,
            )
            huge = json.dumps([call(1, "session/list", {"cwd": "x" * MAX_FRAME_BYTES})]).encode()
            await peer.write(huge)
            assert await peer.read() == invalid(
                f"a frame is at most {MAX_FRAME_BYTES} bytes, not {len(huge) + 1}",
                limit="bytes",
                max=MAX_FRAME_BYTES,
            )
            assert await fence(peer, 9) == []  # nothing of them was served

    async def test_a_prompt_in_a_batch_holds_the_array_until_its_turn_ends(self, log_path):
        async with stdio(log_path) as peer:
            await peer.write(call(1, "session/new", {"cwd": "/", "mcpServers": []}))
            session_id = (await peer.read())["result"]["sessionId"]
            mode = {"sessionId": session_id, "configId": "mode", "type": "id"}
            await peer.write(call(2, "session/set_config_option", {**mode, "value": "architect"}))
            assert (await peer.read())["params"]["update"][
                "sessionUpdate"
            ] == "config_option_update"
            assert (await peer.read())["id"] == 2
            prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "plan"}]}
            await peer.write([call(3, "session/prompt", prompt), call(4, "session/list", {})])
            frames = []
            while not isinstance(frame := await peer.read(), list):
                if frame.get("method") == "session/request_permission":
                    break
                frames.append(frame)
            assert not isinstance(frame, list), "the array came before the turn ended"
            kinds = [f["params"]["update"]["sessionUpdate"] for f in frames]
            assert kinds == ["user_message", "state_update", "tool_call_update", "state_update"]
            reject = {"outcome": {"outcome": "selected", "optionId": "reject"}}
            await peer.write({"jsonrpc": "2.0", "id": frame["id"], "result": reject})
            while not isinstance(frame := await peer.read(), list):
                frames.append(frame)
            assert frames[-1]["params"]["update"] == {
                "sessionUpdate": "state_update",
                "state": "idle",
                "stopReason": "end_turn",
            }
            assert [entry["id"] for entry in frame] == [3, 4]
            assert set(frame[0]["result"]) == {"messageId"}
            assert frame[1]["result"]["sessions"][0]["sessionId"] == session_id

    async def test_ids_are_echoed_exactly(self, log_path):
        async with stdio(log_path) as peer:
            ids: list[Any] = ["1", 1, "1.5", "ü", -7, 2**62]
            await peer.write([call(i, "session/list", {"cwd": "/x"}) for i in ids])
            raw = await peer.read()
            assert [entry["id"] for entry in raw] == ids
            assert [type(entry["id"]) for entry in raw] == [type(i) for i in ids]

    async def test_v1_and_before_initialize_an_array_is_one_minus_32600(self, log_path):
        async with stdio(log_path, version=None) as peer:
            await peer.write([call(0, "initialize", INIT_V2)])
            assert await peer.read() == NO_BATCHES
            await peer.write(call(0, "initialize", {"protocolVersion": 1}))
            assert (await peer.read())["result"]["protocolVersion"] == 1
            await peer.write([call(1, "session/list", {})])
            assert await peer.read() == NO_BATCHES
            await peer.write([])
            assert await peer.read() == invalid(
                "a frame is an object, not an array (ACP has no batches)"
            )


class Http:
    """Raw HTTP to one `modefsm serve --http`: POSTs, and the connection's event stream."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = parts.hostname or "", parts.port or 80, parts.path
        self.auth = auth(url)
        self.connection_id = ""
        self.events: queue.Queue[Any] = queue.Queue()
        self.streams: list[http.client.HTTPConnection] = []
        self.threads: list[threading.Thread] = []
        self.responses: list[http.client.HTTPResponse] = []

    def post(self, body: Any, *, session_id: str | None = None) -> tuple[int, Any]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **self.auth,
        }
        if self.connection_id:
            headers["Acp-Connection-Id"] = self.connection_id
        if session_id is not None:
            headers["Acp-Session-Id"] = session_id
        connection = http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT)
        try:
            connection.request("POST", self.path, json.dumps(body), headers)
            response = connection.getresponse()
            data = response.read()
            if not self.connection_id:
                self.connection_id = response.headers.get("Acp-Connection-Id", "")
            return response.status, json.loads(data) if data else None
        finally:
            connection.close()

    def listen(self, session_id: str | None = None) -> None:
        """Read the connection's (or a session's) event stream into :attr:`events`."""
        headers = {
            "Accept": "text/event-stream",
            "Acp-Connection-Id": self.connection_id,
            **self.auth,
        }
        if session_id is not None:
            headers["Acp-Session-Id"] = session_id

        connection = http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT * 4)
        connection.request("GET", self.path, headers=headers)
        response = connection.getresponse()
        self.streams.append(connection)

        self.responses.append(response)

        def read() -> None:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                while line := response.readline():
                    if line.startswith(b"data:"):
                        self.events.put(json.loads(line[5:]))

        self.threads.append(threading.Thread(target=read, daemon=True))
        self.threads[-1].start()

    def close(self) -> None:
        for connection in self.streams:
            if connection.sock is not None:
                connection.sock.shutdown(2)
        for thread in self.threads:
            thread.join(TIMEOUT)
        for response in self.responses:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                response.close()
        for connection in self.streams:
            connection.close()

    def event(self) -> Any:
        return self.events.get(timeout=TIMEOUT)


@pytest.fixture(scope="module")
def http_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with http_server(tmp_path_factory.mktemp("batches") / "modes.jsonl") as url:
        yield url


@pytest.fixture
def peers() -> Iterator[list[Http]]:
    made: list[Http] = []
    yield made
    for peer in made:
        peer.close()


@pytest.fixture
def connected(peers: list[Http]) -> Any:
    def connect(url: str, version: int = 2) -> Http:
        peer = Http(url)
        peers.append(peer)
        params = INIT_V2 if version == 2 else {"protocolVersion": 1}
        status, answer = peer.post(call(0, "initialize", params))
        assert (status, answer["result"]["protocolVersion"]) == (200, version)
        peer.listen()
        return peer

    return connect


class TestHttp:
    def test_a_batch_post_is_answered_by_one_array_on_the_stream(self, http_url, connected):
        peer = connected(http_url)
        assert peer.post(
            [
                call("n", "session/new", {"cwd": "/h", "mcpServers": []}),
                note("_x/y", {}),
                7,
                call(2, "session/list", {"cwd": "/nowhere"}),
            ]
        ) == (202, None)
        answer = peer.event()
        session_id = answer[0]["result"]["sessionId"]
        assert answer == [new_session("n", session_id), NOT_AN_OBJECT, listed(2)]
        peer.listen(session_id)
        mode = {"sessionId": session_id, "configId": "mode", "type": "id", "value": "code"}
        # session-scoped methods: the Acp-Session-Id header is needed as for one request,
        # and the array comes on the stream the first answer would take alone
        assert peer.post([call(3, "session/set_config_option", mode)])[0] == 400
        status, _ = peer.post([call(3, "session/set_config_option", mode)], session_id=session_id)
        assert status == 202
        update = peer.event()
        assert update["params"]["update"]["sessionUpdate"] == "config_option_update"
        assert peer.event() == [
            {"jsonrpc": "2.0", "id": 3, "result": {"configOptions": [option_v2("code")]}}
        ]

    def test_refused_batches(self, http_url, connected):
        peer = connected(http_url)
        assert peer.post([]) == (400, EMPTY)
        status, body = peer.post([note("_x/y", {})] * (MAX_BATCH + 1))
        assert (status, body["error"]["data"]["limit"]) == (400, "batch")
        assert peer.post([note("_x/y", {}), note("_x/z", {})]) == (202, None)
        assert peer.post([1]) == (202, None)
        assert peer.event() == [NOT_AN_OBJECT]  # the notifications got nothing
        v1 = connected(http_url, version=1)
        assert v1.post([call(1, "session/list", {})]) == (400, NO_BATCHES)
        assert Http(http_url).post([call(0, "initialize", INIT_V2)]) == (400, NO_BATCHES)


class TestWebSocket:
    async def test_a_batch_message_is_answered_by_one_array_message(self, http_url):
        async with ws_connect(http_url) as socket:
            await socket.send(json.dumps([call(0, "initialize", INIT_V2)]))
            assert json.loads(await socket.recv()) == NO_BATCHES  # before initialize
            await socket.send(json.dumps(call(0, "initialize", INIT_V2)))
            assert json.loads(await socket.recv())["result"]["protocolVersion"] == 2
            await socket.send(
                json.dumps(
                    [
                        call("n", "session/new", {"cwd": "/w", "mcpServers": []}),
                        note("session/cancel", {"sessionId": "s"}),
                        call(2, "session/list", {"cwd": "/nowhere"}),
                    ]
                )
            )
            answer = json.loads(await socket.recv())
            session_id = answer[0]["result"]["sessionId"]
            assert answer == [new_session("n", session_id), listed(2)]
            await socket.send("[]")
            assert json.loads(await socket.recv()) == EMPTY
            await socket.send(json.dumps([note("_x/y", {})]))
            await socket.send(json.dumps([1]))
            assert json.loads(await socket.recv()) == [NOT_AN_OBJECT]
