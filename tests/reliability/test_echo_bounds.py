"""Client strings come back cut: no answer or log line holds more than 256 characters of one.

Every request that carries a client string (``sessionId`` in each ``session/*`` method,
``modeId``, ``configId``, ``value``, v2's ``type`` and ``replayFrom``, the method name,
params the SDK's models refuse, whose ``input`` echoes them, an ``optionId`` in a
permission answer, a notification) is sent with a string of 300 characters (ending in a
quote and a newline, which ``repr`` escapes) and one of 100,000 over real transports --
``modefsm serve`` on stdio, and ``serve --http`` over streamable HTTP and WebSocket -- as
v1 and as v2 client, in raw frames (the SDK's clients would refuse some of them first).
Each answer is compared whole with its expected shape: wherever the error echoes the
string (as sent or as ``repr`` writes it), its first 256 characters and
``...[+N chars]``, the rest of the message whole. The raw text of every frame, HTTP body,
log line and stdio agent's stderr is then searched for a run of more than 256 of the
string's characters. String ids are the exception JSON-RPC makes: an id of 1,024
characters comes back whole, a longer one is answered ``-32600`` with id ``null``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

from modefsm.protocol import MAX_CWD_CHARS
from tests.acp_client import start_serve
from tests.protocol.http_wire import auth, shared_server, ws_connect

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

TIMEOUT = 30.0
ECHO = 256
STRINGS = ("Z" * 298 + "'\n", "Z" * 100_000)
"""Client strings just over the bound (the whole answer stays small; ``repr`` escapes it
differently) and far over it."""
LONG_RUN = re.compile(f"Z{{{ECHO + 1},}}")
"""More of a client string (all ``Z``) than any answer or record may hold."""
ID_CHARS = 1024

Received = tuple[dict[str, Any], str]
"""A frame the agent sent, and its raw text."""


def cut(text: str) -> str:
    return text if len(text) <= ECHO else f"{text[:ECHO]}...[+{len(text) - ECHO} chars]"


def echoes_cut(value: Any, *sent: str) -> Any:
    """*value* with each string *sent* (the longest first), as given or as ``repr`` writes
    it, cut in every string and key."""
    if isinstance(value, str):
        forms = {form for text in sent for form in (text, repr(text)[1:-1])}
        for form in sorted(forms, key=len, reverse=True):
            value = value.replace(form, cut(form))
        return value
    if isinstance(value, dict):
        return {echoes_cut(k, *sent): echoes_cut(v, *sent) for k, v in value.items()}
    if isinstance(value, list):
        return [echoes_cut(v, *sent) for v in value]
    return value


def assert_bounded(text: str, where: str) -> None:
    found = LONG_RUN.search(text)
    assert found is None, f"{where} holds {len(found.group())} chars of a client string"


# -- raw clients of the three transports ------------------------------------------------


class Wire:
    """Send raw frames; read every frame the agent sends, with its raw text."""

    name = "?"

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[Received] = asyncio.Queue()
        self.texts: list[str] = []
        self.next_id = 0

    async def send(self, frame: dict[str, Any]) -> tuple[int, str] | None:
        """Send *frame*; an HTTP answer other than ``202`` as ``(status, body)``."""
        raise NotImplementedError

    def arrived(self, text: str) -> None:
        self.texts.append(text)
        self.inbox.put_nowait((json.loads(text), text))

    async def read(self) -> Received:
        return await asyncio.wait_for(self.inbox.get(), TIMEOUT)

    async def until(self, request_id: Any) -> list[dict[str, Any]]:
        """Every frame up to and including the answer to *request_id*."""
        frames = [(await self.read())[0]]
        while "method" in frames[-1] or frames[-1].get("id") != request_id:
            frames.append((await self.read())[0])
        return frames

    async def call(self, method: str, params: Any, request_id: Any = None) -> Any:
        """The answer to one request (``(status, body)`` if HTTP refused it); nothing else
        may arrive before it."""
        if request_id is None:
            self.next_id += 1
            request_id = self.next_id
        frame = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        refused = await self.send(frame)
        if refused is not None:
            return refused
        frames = await self.until(request_id)
        assert len(frames) == 1, frames
        return frames[0]

    async def result(self, method: str, params: Any) -> Any:
        answer = await self.call(method, params)
        assert "result" in answer, answer
        return answer["result"]

    async def opened(self, session_id: str) -> None:
        """*session_id* was created on this connection."""


class StdioWire(Wire):
    name = "stdio"

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        super().__init__()
        self.process = process
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            self.arrived(line.decode())

    async def send(self, frame: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(frame).encode() + b"\n")
        await self.process.stdin.drain()


class WebSocketWire(Wire):
    name = "ws"

    def __init__(self, socket: Any) -> None:
        super().__init__()
        self.socket = socket
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for text in self.socket:
                self.arrived(text)

    async def send(self, frame: dict[str, Any]) -> None:
        await self.socket.send(json.dumps(frame))


class HttpWire(Wire):
    """``POST`` each frame; answers come on the connection's and the session's SSE streams.

    A request is sent with ``Acp-Session-Id`` of the session this connection created, so
    that it reaches the agent whatever its params say (a client that puts a long
    ``sessionId`` in the header gets the SDK's ``404``: see the header test).
    """

    name = "http"

    def __init__(self, client: Any, url: str) -> None:
        super().__init__()
        self.client = client
        self.url = url
        self.connection_id = ""
        self.session_id: str | None = None
        self.streams: list[asyncio.Future[None]] = []

    def _stream(self, session_id: str | None) -> None:
        headers = {
            "Accept": "text/event-stream",
            "Acp-Connection-Id": self.connection_id,
            **auth(self.url),
        }
        if session_id is not None:
            headers["Acp-Session-Id"] = session_id
        self.streams.append(asyncio.ensure_future(self._consume(headers)))

    async def _consume(self, headers: dict[str, str]) -> None:
        async with self.client.stream("GET", self.url, headers=headers) as response:
            assert response.status_code == 200, response.status_code
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    self.arrived(line.removeprefix("data: "))

    async def send(self, frame: dict[str, Any]) -> tuple[int, str] | None:
        headers = {"Content-Type": "application/json", **auth(self.url)}
        if self.connection_id:
            headers["Acp-Connection-Id"] = self.connection_id
        if self.session_id is not None:
            headers["Acp-Session-Id"] = self.session_id
        response = await self.client.post(self.url, content=json.dumps(frame), headers=headers)
        if frame.get("method") == "initialize" and response.status_code == 200:
            self.connection_id = response.headers["Acp-Connection-Id"]
            self.arrived(response.text)
            self._stream(None)
            return None
        if response.status_code == 202:
            return None
        self.texts.append(response.text)
        return response.status_code, response.text

    async def opened(self, session_id: str) -> None:
        self.session_id = session_id
        self._stream(session_id)


@contextlib.asynccontextmanager
async def stdio_wire(tmp_path: Path) -> AsyncIterator[tuple[Wire, Path, Path]]:
    """``modefsm serve --log LOG`` on pipes; yields the wire, the log and stderr's file."""
    log, stderr = tmp_path / "modes.jsonl", tmp_path / "stderr.txt"
    with stderr.open("wb") as errors:
        process = await start_serve(log, stderr=errors, limit=2**24)
        wire = StdioWire(process)
        try:
            yield wire, log, stderr
        finally:
            assert process.stdin is not None
            process.stdin.close()
            try:
                assert await asyncio.wait_for(process.wait(), TIMEOUT) == 0
            finally:
                if process.returncode is None:  # pragma: no cover - a hang is the failure
                    process.kill()
                wire.reader.cancel()


@contextlib.asynccontextmanager
async def ws_wire(url: str) -> AsyncIterator[Wire]:
    async with ws_connect(url, max_size=None) as socket:
        wire = WebSocketWire(socket)
        try:
            yield wire
        finally:
            wire.reader.cancel()


@contextlib.asynccontextmanager
async def http_wire(url: str) -> AsyncIterator[Wire]:
    import httpx2

    async with httpx2.AsyncClient(timeout=httpx2.Timeout(TIMEOUT, read=None)) as client:
        wire = HttpWire(client, url)
        try:
            yield wire
        finally:
            for stream in wire.streams:
                stream.cancel()
            if wire.connection_id:
                headers = {"Acp-Connection-Id": wire.connection_id, **auth(url)}
                await client.request("DELETE", url, headers=headers)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with shared_server(tmp_path_factory, "echo") as served:
        yield served


# -- what each client string gets --------------------------------------------------------

MODES = ["ask", "architect", "code"]
RESULT = object()
"""Expected: a result (which holds none of the string, as every frame is searched)."""


def unknown_session(version: int, s: str) -> dict[str, Any]:
    if version == 1:
        return {
            "code": -32002,
            "message": f"sessionId: unknown sessionId {s!r}",
            "data": {"uri": s},
        }
    return {"code": -32002, "message": f"sessionId: {s}", "data": {"sessionId": s}}


def refused(field: str, value: str, message: str, **valid: Any) -> dict[str, Any]:
    data = {"field": field, "value": value, **valid, "message": message}
    return {"code": -32602, "message": message, "data": data}


def invalid_params(kind: str, loc: str, msg: str, given: Any) -> dict[str, Any]:
    version = ".".join(pydantic.VERSION.split(".")[:2])
    error = {
        "type": kind,
        "loc": [loc],
        "msg": msg,
        "input": given,
        "url": f"https://errors.pydantic.dev/{version}/v/{kind}",
    }
    return {"code": -32602, "message": "Invalid params", "data": {"errors": [error]}}


def not_found(method: str) -> dict[str, Any]:
    return {"code": -32601, "message": "Method not found", "data": {"method": method}}


Case = tuple[str, dict[str, Any], Any]
"""``(method, params, expected error)``; ``RESULT``, or ``{}`` for that exact result."""


def cases(version: int, sid: str, s: str) -> list[Case]:
    """Each request carrying the client string *s* on a v*version* connection with *sid*."""
    text = [{"type": "text", "text": "hi"}]
    typed = {"type": "id"} if version == 2 else {}
    unknown = unknown_session(version, s)
    value_message = f"value: unknown mode {s!r}; available modes: 'ask', 'architect', 'code'"
    config_message = f"configId: unknown config option {s!r}; config options: 'mode'"
    both: list[Case] = [
        ("session/resume", {"sessionId": s, "cwd": "/"}, unknown),
        ("session/close", {"sessionId": s}, unknown if version == 1 else {}),
        ("session/prompt", {"sessionId": s, "prompt": text}, unknown),
        (
            "session/set_config_option",
            {"sessionId": s, "configId": "mode", **typed, "value": "code"},
            unknown,
        ),
        (
            "session/set_config_option",
            {"sessionId": sid, "configId": s, **typed, "value": "code"},
            refused("configId", s, config_message, valid=["mode"]),
        ),
        (
            "session/set_config_option",
            {"sessionId": sid, "configId": "mode", **typed, "value": s},
            refused("value", s, value_message, valid=MODES),
        ),
        (
            "session/prompt",
            {"sessionId": s},
            invalid_params("missing", "prompt", "Field required", {"sessionId": s}),
        ),
        (
            "session/prompt",
            {"sessionId": sid, "prompt": s},
            invalid_params("list_type", "prompt", "Input should be a valid list", s),
        ),
        (s, {}, not_found(s)),
        ("_" + s, {"sessionId": s}, not_found("_" + s)),
    ]
    if version == 1:
        mode_message = f"modeId: unknown mode {s!r}; available modes: 'ask', 'architect', 'code'"
        return [
            *both,
            ("session/load", {"sessionId": s, "cwd": "/", "mcpServers": []}, unknown),
            ("session/set_mode", {"sessionId": s, "modeId": "code"}, unknown),
            (
                "session/set_mode",
                {"sessionId": sid, "modeId": s},
                refused("modeId", s, mode_message, valid=MODES),
            ),
            (
                "session/set_mode",
                {"sessionId": sid, "modeId": [s]},
                invalid_params("string_type", "modeId", "Input should be a valid string", [s]),
            ),
            (
                "session/new",
                {"cwd": s},
                invalid_params("missing", "mcpServers", "Field required", {"cwd": s}),
            ),
        ]
    cursor_message = (
        f"replayFrom: {s!r} is not a replay cursor this agent serves "
        "(valid: {'type': 'start'}, {'type': '_modefsm/message', 'messageId': ...})"
    )
    kept_message = f"replayFrom.messageId: {s!r} is not in the session's kept conversation"
    cursors = [{"type": "start"}, {"type": "_modefsm/message", "messageId": "<messageId>"}]
    return [
        *both,
        (
            "session/set_config_option",
            {"sessionId": sid, "configId": "mode", "type": s, "value": "code"},
            refused("type", s, f"type: {s!r} is not 'id'", valid=["id"]),
        ),
        (
            "session/resume",
            {"sessionId": sid, "cwd": "/", "replayFrom": {"type": s}},
            {
                "code": -32602,
                "message": cursor_message,
                "data": {"field": "replayFrom", "valid": cursors, "message": cursor_message},
            },
        ),
        (
            "session/resume",
            {
                "sessionId": sid,
                "cwd": "/",
                "replayFrom": {"type": "_modefsm/message", "messageId": s},
            },
            {
                "code": -32602,
                "message": kept_message,
                "data": {"field": "replayFrom.messageId", "value": s, "message": kept_message},
            },
        ),
        ("session/new", {"cwd": s}, RESULT if len(s) <= MAX_CWD_CHARS else long_cwd(s)),
    ]


def long_cwd(s: str) -> dict[str, Any]:
    """A ``cwd`` longer than a path can be: ``-32602``, echoing nothing of it."""
    text = f"cwd: a path of at most {MAX_CWD_CHARS} characters, not {len(s)}"
    data = {"field": "cwd", "limit": "cwd_chars", "max": MAX_CWD_CHARS, "message": text}
    return {"code": -32602, "message": text, "data": data}


async def initialize(wire: Wire, version: int) -> str:
    """Initialize as a v*version* client; the id of a new session."""
    params: dict[str, Any] = {"protocolVersion": version}
    if version == 2:
        params["info"] = {"name": "echo", "version": "0"}
    assert (await wire.result("initialize", params))["protocolVersion"] == version
    session_id: str = (await wire.result("session/new", {"cwd": "/", "mcpServers": []}))[
        "sessionId"
    ]
    await wire.opened(session_id)
    return session_id


async def every_case(wire: Wire, version: int) -> None:
    """Send every case at every length; compare each answer whole."""
    sid = await initialize(wire, version)
    for s in STRINGS:
        for method, params, expected in cases(version, sid, s):
            answer = await wire.call(method, params)
            where = (wire.name, version, len(s), method[:40], list(params))
            assert answer.get("jsonrpc") == "2.0", where
            if expected is RESULT:
                assert "result" in answer, (where, answer)
            elif "code" in expected:
                assert answer == {
                    "jsonrpc": "2.0",
                    "id": wire.next_id,
                    "error": echoes_cut(expected, s, method),
                }, where
            else:
                assert answer == {"jsonrpc": "2.0", "id": wire.next_id, "result": expected}, where
        # a notification is never answered: the next request's answer comes first
        await wire.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": s}})
        await wire.send({"jsonrpc": "2.0", "method": "_" + s, "params": {"sessionId": s}})
    await ids(wire, version)
    await permission_answer(wire, version, sid)


async def ids(wire: Wire, version: int) -> None:
    """A string id of 1,024 characters comes back whole; one of 1,025 gets id ``null``."""
    s = "Z" * 100_000
    longest = "I" * ID_CHARS
    prompt = {"sessionId": s, "prompt": []}
    answer = await wire.call("session/prompt", prompt, request_id=longest)
    assert answer == {
        "jsonrpc": "2.0",
        "id": longest,
        "error": echoes_cut(unknown_session(version, s), s),
    }
    too_long = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": "Invalid request",
            "data": {
                "details": f"id: a string of at most {ID_CHARS} characters, not {ID_CHARS + 1}",
                "limit": "id_chars",
                "max": ID_CHARS,
            },
        },
    }
    frame = {"jsonrpc": "2.0", "id": longest + "I", "method": "session/prompt", "params": prompt}
    refused = await wire.send(frame)
    if wire.name == "http":
        assert refused is not None
        assert (refused[0], json.loads(refused[1])) == (400, too_long)
    else:
        assert refused is None
        assert (await wire.read())[0] == too_long


async def permission_answer(wire: Wire, version: int, sid: str) -> None:
    """A permission answer selecting an ``optionId`` of 100,000 characters is refused."""
    if version == 1:
        method, params = "session/set_mode", {"sessionId": sid, "modeId": "architect"}
    else:
        method = "session/set_config_option"
        params = {"sessionId": sid, "configId": "mode", "type": "id", "value": "architect"}
    await wire.send({"jsonrpc": "2.0", "id": "architect", "method": method, "params": params})
    assert "result" in (await wire.until("architect"))[-1]
    prompt_id = "plan"
    text = [{"type": "text", "text": "## Plan"}]
    prompt = {"sessionId": sid, "prompt": text}
    await wire.send(
        {"jsonrpc": "2.0", "id": prompt_id, "method": "session/prompt", "params": prompt}
    )
    while (request := (await wire.read())[0]).get("method") != "session/request_permission":
        pass
    outcome = {"outcome": "selected", "optionId": "Z" * 100_000}
    answer = {"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": outcome}}
    assert await wire.send(answer) is None  # HTTP: 202
    frames = await wire.until(prompt_id)
    failed = [
        f["params"]["update"]
        for f in frames
        if f.get("method") == "session/update"
        and f["params"]["update"].get("sessionUpdate") == "tool_call_update"
    ]
    assert [(u["status"], u["content"][0]["content"]["text"]) for u in failed] == [
        ("failed", "Refused: the answer selected an option that was not offered.")
    ]
    assert "result" in frames[-1], frames[-1]
    # a second answer changes nothing and is logged (duplicate_answer), cut
    assert await wire.send(answer) is None
    assert (await wire.call("x/after", {}))["error"] == not_found("x/after")


def check_log(lines: list[str]) -> None:
    """No log line holds more than 256 chars of a client string, but the ``cwd`` a session
    was created with (kept whole, for ``session/list``: at most ``MAX_CWD_CHARS``); the
    refused optionId is logged cut, once as not offered and once as a second answer."""
    records = [json.loads(line) for line in lines]
    for number, record in enumerate(records, 1):
        assert len(record.pop("cwd", "")) <= MAX_CWD_CHARS
        assert_bounded(json.dumps(record), f"log line {number}")
    refused = [(r["reason"], r["option_id"]) for r in records if "option_id" in r]
    option_id = cut("Z" * 100_000)
    assert refused == [("option_not_offered", option_id), ("duplicate_answer", option_id)]


# -- the tests -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
async def test_stdio(tmp_path: Path, version: int) -> None:
    async with stdio_wire(tmp_path) as (wire, log, stderr):
        await every_case(wire, version)
    for text in wire.texts:
        assert_bounded(text, "a frame")
    check_log(log.read_text().splitlines())
    assert stderr.read_text() == ""


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("kind", ["http", "ws"])
async def test_http_and_websocket(server: tuple[str, Path], kind: str, version: int) -> None:
    url, log = server
    opened: Callable[[str], Any] = http_wire if kind == "http" else ws_wire
    before = len(log.read_text().splitlines()) if log.exists() else 0
    async with opened(url) as wire:
        await every_case(wire, version)
    for text in wire.texts:
        assert_bounded(text, "a frame or body")
    check_log(log.read_text().splitlines()[before:])


@pytest.mark.parametrize("method", ["POST", "GET", "DELETE"])
@pytest.mark.parametrize("header", ["Acp-Session-Id", "Acp-Connection-Id"])
async def test_long_http_headers_get_the_sdk_answer(
    server: tuple[str, Path], header: str, method: str
) -> None:
    """A long ``Acp-Session-Id`` (what the SDK's client sends for a long ``sessionId``) or
    ``Acp-Connection-Id`` is never echoed: the SDK's ``404`` (a ``DELETE`` names no session).

    10,000 characters: a request head over 16 KiB that reaches uvicorn in pieces gets its
    ``400`` (``Invalid HTTP request received.``, no echo either) and a closed connection,
    one that arrives whole is served, so only a shorter head has one answer.
    """
    import httpx2

    url, _log = server
    async with http_wire(url) as wire:
        assert isinstance(wire, HttpWire)
        sid = await initialize(wire, 1)
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Acp-Connection-Id": wire.connection_id,
            "Acp-Session-Id": sid,
            **auth(url),
            header: "Z" * 10_000,
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": "session/set_mode"}
        body["params"] = {"sessionId": sid, "modeId": "code"}
        content = json.dumps(body) if method == "POST" else None
        async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
            response = await client.request(method, url, content=content, headers=headers)
    unknown = "Unknown session id" if header == "Acp-Session-Id" else "Unknown connection id"
    expected = {"error": unknown}
    if method == "DELETE" and header == "Acp-Session-Id":
        assert response.status_code == 202
        return
    assert (response.status_code, response.json()) == (404, expected)
