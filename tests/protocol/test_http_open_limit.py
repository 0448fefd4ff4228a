"""MAX_OPEN over WebSocket and streamable HTTP: requests past the cap are refused at once,
whatever the client does with its answers, and the server keeps reading and serving."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import time
import urllib.parse
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from modefsm.protocol import MAX_OPEN
from tests.protocol.http_wire import auth, http_server, ws_connect
from tests.reliability.harness import read_log

pytestmark = pytest.mark.e2e

TIMEOUT = 60.0


def over_open(request_id: Any) -> dict[str, Any]:
    """The whole answer to a request beyond MAX_OPEN unanswered ones."""
    details = f"at most {MAX_OPEN} requests of a connection are answered at once"
    data = {"details": details, "limit": "open", "max": MAX_OPEN}
    error = {"code": -32600, "message": "Invalid request", "data": data}
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def request(request_id: Any, method: str, params: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


class Socket:
    """A raw WebSocket to the server: every frame it got, by id and in order."""

    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self.frames: list[dict[str, Any]] = []
        self.answers: dict[str, dict[str, Any]] = {}
        self.changed = asyncio.Event()

    async def read(self) -> None:
        async for text in self.socket:
            value = json.loads(text)
            self.frames.append(value)
            if "method" not in value:
                self.answers[json.dumps(value["id"])] = value
            self.changed.set()

    async def until(self, check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not check():
            remaining = deadline - time.monotonic()
            assert remaining > 0, what
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)

    async def call(self, request_id: Any, method: str, params: Any) -> dict[str, Any]:
        await self.socket.send(request(request_id, method, params))
        key = json.dumps(request_id)
        await self.until(lambda: key in self.answers, f"an answer to {method}")
        answer = self.answers[key]
        assert "result" in answer, answer
        return answer["result"]  # type: ignore[no-any-return]

    def asked(self) -> list[dict[str, Any]]:
        return [f for f in self.frames if f.get("method") == "session/request_permission"]


@contextlib.asynccontextmanager
async def raw_socket(url: str) -> AsyncIterator[Socket]:
    async with ws_connect(url, max_size=None) as socket:
        raw = Socket(socket)
        reader = asyncio.ensure_future(raw.read())
        try:
            yield raw
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader


async def in_architect(raw: Socket) -> str:
    """Initialize (id 0), make a session (1), set it to architect (2); the session's id."""
    await raw.call(0, "initialize", {"protocolVersion": 1})
    session_id: str = (await raw.call(1, "session/new", {"cwd": ".", "mcpServers": []}))[
        "sessionId"
    ]
    await raw.call(2, "session/set_mode", {"sessionId": session_id, "modeId": "architect"})
    return session_id


class TestWebSocket:
    async def test_5000_prompts_past_max_open_are_refused_and_the_rest_answered(
        self, tmp_path: Path
    ):
        log = tmp_path / "modes.jsonl"
        with http_server(log) as url:
            async with raw_socket(url) as raw:
                session_id = await in_architect(raw)
                params = {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]}
                ids = [f"a{n}" for n in range(5_000)]
                keys = [json.dumps(i) for i in ids]
                for request_id in ids:
                    await raw.socket.send(request(request_id, "session/prompt", params))

                def settled() -> bool:  # each prompt asked for permission, or was refused
                    return len(raw.asked()) + sum(k in raw.answers for k in keys) == len(ids)

                await raw.until(settled, "each prompt asked or refused")
                asked = raw.asked()
                refused = [i for i in ids if json.dumps(i) in raw.answers]
                assert len(asked) == MAX_OPEN
                assert [raw.answers[json.dumps(i)] for i in refused] == [
                    over_open(i) for i in refused
                ]
                assert len(refused) == 5_000 - MAX_OPEN
                # another client is served meanwhile
                async with raw_socket(url) as other:
                    started = time.monotonic()
                    await in_architect(other)
                    assert time.monotonic() - started < 5
                # half are rejected, the others' turns cancelled: every prompt answered
                reject = next(
                    o["optionId"]
                    for o in asked[0]["params"]["options"]
                    if o["kind"] == "reject_once"
                )
                outcome = {"outcome": {"outcome": "selected", "optionId": reject}}
                for asking in asked[: MAX_OPEN // 2]:
                    answer = {"jsonrpc": "2.0", "id": asking["id"], "result": outcome}
                    await raw.socket.send(json.dumps(answer))
                await raw.until(
                    lambda: sum(k in raw.answers for k in keys) == 5_000 - MAX_OPEN // 2,
                    "the rejected turns ended",
                )
                cancel = {"jsonrpc": "2.0", "method": "session/cancel"}
                await raw.socket.send(json.dumps({**cancel, "params": {"sessionId": session_id}}))
                await raw.until(lambda: all(k in raw.answers for k in keys), "every turn ended")
                stops = Counter(raw.answers[k].get("result", {}).get("stopReason") for k in keys)
                assert stops == {
                    "end_turn": MAX_OPEN // 2,
                    "cancelled": MAX_OPEN // 2,
                    None: 5_000 - MAX_OPEN,
                }
                # nothing is owed any more: the cap is free again
                assert (
                    await raw.call(
                        9, "session/set_mode", {"sessionId": session_id, "modeId": "ask"}
                    )
                ) == {}
        reasons = Counter(r.get("reason") for r in read_log(log).rejections())
        assert reasons == {"option_rejected": MAX_OPEN // 2, "cancelled": MAX_OPEN // 2}


class Poster:
    """One keep-alive HTTP/1.1 connection POSTing raw bodies to the server's endpoint."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.path = parts.path
        self.headers = {"Content-Type": "application/json", **auth(url)}
        self.connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)

    def post(self, body: bytes, **headers: str) -> tuple[int, Any, dict[str, str]]:
        self.connection.request("POST", self.path, body, {**self.headers, **headers})
        response = self.connection.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else None, dict(response.headers)

    def close(self) -> None:
        self.connection.close()


class TestStreamableHttp:
    def test_a_connection_whose_stream_is_not_read_queues_a_bounded_number_of_frames(
        self, tmp_path: Path
    ):
        """Answers the agent's reading loop writes itself (a v2 batch of bad entries) fill
        the connection's unread stream, so the loop stops; the POSTs behind it are queued up
        to MAX_OPEN, then refused 429, and other connections are served meanwhile."""
        sent = 2 * MAX_OPEN + 1 + 200
        with http_server(tmp_path / "modes.jsonl") as url:
            poster = Poster(url)
            try:
                status, answer, headers = poster.post(
                    request(
                        0,
                        "initialize",
                        {"protocolVersion": 2, "info": {"name": "c", "version": "0"}},
                    ).encode()
                )
                assert (status, answer["result"]["protocolVersion"]) == (200, 2)
                connection = {"Acp-Connection-Id": headers["acp-connection-id"]}
                answers = [poster.post(b"[1]", **connection)[:2] for _ in range(sent)]
            finally:
                poster.close()
            # the stream holds 1,024 arrays, the loop waits to write one more: MAX_OPEN
            # frames queued behind it, the others refused
            assert Counter(status for status, _ in answers) == {
                202: 1_024 + 1 + MAX_OPEN,
                429: sent - 1_024 - 1 - MAX_OPEN,
            }
            assert {json.dumps(a) for s, a in answers if s == 429} == {json.dumps(over_open(None))}
            other = Poster(url)
            try:
                started = time.monotonic()
                status, answer, _ = other.post(
                    request(5, "initialize", {"protocolVersion": 1}).encode()
                )
                assert (status, answer["id"]) == (200, 5)
                assert time.monotonic() - started < 5
            finally:
                other.close()
