"""A frame refused for its size or shape is answered with its request's id when it can be read.

On stdio (a real ``modefsm serve`` over pipes), HTTP (``POST`` bodies against a real
``serve --http``) and WebSocket (text frames on a real socket): the client waiting for
that id gets its answer instead of waiting for ever. ``id: null`` only when no id can be
known (no ``"id"`` member near either end of an over-long frame, or an id of a type
JSON-RPC does not allow).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modefsm.protocol import MAX_BODY_BYTES, MAX_FRAME_BYTES, MAX_VALUES
from tests.protocol.http_wire import http_server, post, ws_connect

from .harness import TIMEOUT, Agent

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

PAD = "a"


def refused(request_id: Any, code: int, details: str, **limit: Any) -> dict[str, Any]:
    """The whole error answer to a refused frame."""
    data: dict[str, Any] = {"details": details}
    if limit:
        data["limit"], data["max"] = limit["limit"], limit["max"]
    message = {-32600: "Invalid request", -32700: "Parse error"}[code]
    error = {"code": code, "message": message, "data": data}
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def too_big(size: int, request_id: Any, limit: int = MAX_FRAME_BYTES) -> dict[str, Any]:
    details = f"a frame is at most {limit} bytes, not {size}"
    return refused(request_id, -32600, details, limit="bytes", max=limit)


def oversized(request_id: Any, size: int, *, id_first: bool = True) -> bytes:
    """A request of *size* bytes (without the newline): its id first, or last."""
    head = b'{"jsonrpc":"2.0",'
    ident = b'"id":' + json.dumps(request_id).encode()
    method = b'"method":"session/new","params":{"cwd":".","mcpServers":[],"_meta":{"pad":"'
    tail = b'"}}'
    if id_first:
        start, end = head + ident + b"," + method, tail + b"}"
    else:
        start, end = head + method, tail + b"," + ident + b"}"
    return start + PAD.encode() * (size - len(start) - len(end)) + end


def many_values(request_id: Any) -> bytes:
    """A request with one value more than MAX_VALUES (zeros in a ``_meta`` array)."""
    zeros = b",".join([b"0"] * MAX_VALUES)
    return (
        b'{"jsonrpc":"2.0","id":' + json.dumps(request_id).encode()
        + b',"method":"session/new","params":{"cwd":".","mcpServers":[],"_meta":{"z":['
        + zeros + b"]}}}"
    )  # fmt: skip


VALUES = f"a frame holds at most {MAX_VALUES} values, not {MAX_VALUES + 9}"


class Stdio:
    """``modefsm serve`` over pipes (:class:`Agent`), asked one line at a time."""

    def __init__(self, log: Path) -> None:
        self.agent = Agent(log=log)
        self.agent.read()

    def ask(self, data: bytes) -> dict[str, Any]:
        """Write one line; its one answer (the next message)."""
        agent = self.agent
        count = len(agent.messages)
        agent.send(data + b"\n")
        agent.wait(lambda: len(agent.messages) > count)
        assert len(agent.messages) == count + 1
        return agent.messages[count]


@pytest.fixture
def stdio(tmp_path: Path) -> Iterator[Stdio]:
    peer = Stdio(tmp_path / "modes.jsonl")
    try:
        yield peer
        assert peer.agent.finish() == (0, "")
    finally:
        peer.agent.kill()


class TestStdio:
    @pytest.mark.parametrize("id_first", [True, False], ids=["id first", "id last"])
    @pytest.mark.parametrize("request_id", [7, "call-\u00e9", None], ids=["int", "str", "null"])
    def test_an_over_long_frame(self, stdio: Stdio, id_first: bool, request_id: Any):
        size = MAX_FRAME_BYTES + 1
        answer = stdio.ask(oversized(request_id, size, id_first=id_first))
        assert answer == too_big(size + 1, request_id)  # the newline counts
        after = stdio.ask(b'{"jsonrpc":"2.0","id":8,"method":"nope"}')
        assert (after["id"], after["error"]["code"]) == (8, -32601)

    def test_an_over_long_frame_with_its_id_in_the_middle_gets_null(self, stdio: Stdio):
        size = MAX_FRAME_BYTES + 1
        frame = oversized(7, size)
        frame = frame.replace(b'"id":7,', b'"a":"' + PAD.encode() * 70_000 + b'","id":7,', 1)
        assert stdio.ask(frame) == too_big(len(frame) + 1, None)

    def test_a_nested_id_is_not_the_requests(self, stdio: Stdio):
        size = MAX_FRAME_BYTES + 1
        frame = oversized(None, size, id_first=False)
        frame = frame.replace(b'"params":{', b'"params":{"toolCall":{"id":3},', 1)
        frame = frame[: -len(b',"id":null}')] + b"}"
        assert stdio.ask(frame) == too_big(len(frame) + 1, None)

    def test_too_many_values(self, stdio: Stdio):
        assert stdio.ask(many_values("v-1")) == refused(
            "v-1", -32600, VALUES, limit="values", max=MAX_VALUES
        )

    def test_nested_past_the_parser(self, stdio: Stdio):
        deep = b'{"jsonrpc":"2.0","id":12,"method":"x","params":{"a":' + b"[" * 5000
        frame = deep + b"]" * 5000 + b"}}"
        assert stdio.ask(frame) == refused(12, -32700, "nested too deeply")

    def test_a_frame_of_no_known_kind_with_an_id(self, stdio: Stdio):
        answer = stdio.ask(b'{"jsonrpc":"2.0","id":9,"params":{}}')
        details = "neither a request, a notification nor a response"
        assert answer == refused(9, -32600, details)

    def test_a_lone_surrogate_outside_the_id(self, stdio: Stdio):
        frame = b'{"jsonrpc":"2.0","id":10,"method":"x","params":{"a":"\\ud800"}}'
        details = "a string holds a lone surrogate: not Unicode text"
        assert stdio.ask(frame) == refused(10, -32700, details)
        frame = b'{"jsonrpc":"2.0","id":"\\ud800","method":"x"}'
        assert stdio.ask(frame) == refused(None, -32700, details)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with http_server(tmp_path_factory.mktemp("ids") / "modes.jsonl") as url:
        yield url


def body_too_big(request_id: Any, size: int | None) -> dict[str, Any]:
    details = f"a request body is at most {MAX_BODY_BYTES} bytes"
    if size is not None:
        details += f", not {size}"
    return refused(request_id, -32600, details, limit="bytes", max=MAX_BODY_BYTES)


class TestHttp:
    @pytest.mark.parametrize("request_id", [5, "post-1"])
    def test_an_oversized_body_announced_by_its_length(self, server: str, request_id: Any):
        body = oversized(request_id, MAX_BODY_BYTES + 1)
        assert post(server, body) == (413, body_too_big(request_id, MAX_BODY_BYTES + 1))

    def test_an_oversized_body_sent_in_chunks(self, server: str):
        body = oversized(6, MAX_BODY_BYTES + 1)
        chunks = (body[i : i + 65536] for i in range(0, len(body), 65536))
        assert post(server, chunks) == (413, body_too_big(6, None))  # type: ignore[arg-type]

    def test_too_many_values(self, server: str):
        expected = refused(11, -32600, VALUES, limit="values", max=MAX_VALUES)
        assert post(server, many_values(11)) == (400, expected)


class TestWebSocket:
    async def test_too_many_values_and_no_known_kind(self, server: str):
        async with ws_connect(server, max_size=None) as ws:
            await ws.send(many_values(13).decode())
            first = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
            await ws.send('{"jsonrpc":"2.0","id":"k","params":{}}')
            second = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
        assert first == refused(13, -32600, VALUES, limit="values", max=MAX_VALUES)
        details = "neither a request, a notification nor a response"
        assert second == refused("k", -32600, details)
