"""ACP v1 and v2 over streamable HTTP and WebSocket: the official SDK's clients of one server.

Each test runs a real `modefsm serve --http 127.0.0.1:0` process; the SDK's v2 client and
v1 client speak to it over the SDK's own HTTP and WebSocket client transports, and every
frame they receive is compared whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import acp
import pytest

from tests.protocol.http_wire import (
    TIMEOUT,
    http_server,
    mode_updates,
    post,
    session_records,
    shared_server,
    transport_to,
    until,
    v1_client,
    ws_connect,
)
from tests.protocol.v2_frames import Frames, option_v2, text

pytestmark = pytest.mark.e2e


FRAMES = Frames(jsonrpc=False)
update, options_update, state = FRAMES.update, FRAMES.options_update, FRAMES.state


class V2Client:
    """The client side of the SDK's v2 connection: every frame kept, permissions answered."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, dict[str, Any]]] = []
        self.answer: dict[str, Any] | None = None  # the raw outcome; None: cancelled
        self.asked = asyncio.Event()  # set when a permission request arrives
        self.release: asyncio.Event | None = None  # when set: answer only once it is set

    def observe(self, event: Any) -> None:
        self.frames.append((event.direction.value, event.message))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None

    async def request_permission(
        self, session_id: str, title: str, options: list[Any], subject: Any = None, **kwargs: Any
    ) -> Any:
        from acp.experimental.v2 import schema as s2

        self.asked.set()
        if self.release is not None:
            await self.release.wait()
        outcome = self.answer or {"outcome": "cancelled"}
        return s2.RequestPermissionResponse.model_validate({"outcome": outcome})

    def mark(self) -> int:
        return len(self.frames)

    def since(self, mark: int) -> list[dict[str, Any]]:
        """Frames from the agent after *mark*, without ``jsonrpc``."""
        return [
            {k: v for k, v in m.items() if k != "jsonrpc"}
            for d, m in self.frames[mark:]
            if d == "incoming"
        ]


@contextlib.asynccontextmanager
async def v2_client(url: str, kind: str) -> AsyncIterator[tuple[Any, V2Client]]:
    """The SDK's v2 client over *kind*, initialized with protocolVersion 2."""
    from acp.experimental import v2
    from acp.experimental.v2 import schema as s2

    client = V2Client()
    transport = await transport_to(url, kind)
    conn = v2.connect_to_agent(client, transport, observers=[client.observe])
    try:
        init = await asyncio.wait_for(
            conn.initialize(protocol_version=2, info=s2.Implementation(name="t", version="0")),
            TIMEOUT,
        )
        assert init.protocol_version == 2
        yield conn, client
    finally:
        await conn.close()


def records(log: Path, session_id: str) -> list[tuple[Any, ...]]:
    return [
        (
            r["event"].removeprefix("modefsm."),
            r.get("to_mode"),
            r["origin"],
            r.get("reason"),
            r.get("protocol"),
        )
        for r in session_records(log, session_id)
    ]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with shared_server(tmp_path_factory, "v2") as served:
        yield served


def prompt_text(value: str) -> list[Any]:
    from acp.experimental.v2 import schema as s2

    return [s2.TextContentBlock(text=value)]


@pytest.mark.parametrize("kind", ["http", "ws"])
class TestV2Client:
    async def test_set_and_unknown_ids(self, server, kind):
        url, log_path = server
        async with v2_client(url, kind) as (conn, client):
            mark = client.mark()
            session_id = (await conn.new_session(cwd="/")).session_id
            await conn.set_config_option(
                config_id="mode", session_id=session_id, value="architect", type="id"
            )
            frames = client.since(mark)
            errors = []
            for config_id, value in [("model", "code"), ("mode", "nope")]:
                with pytest.raises(acp.RequestError) as info:
                    await conn.set_config_option(
                        config_id=config_id, session_id=session_id, value=value, type="id"
                    )
                errors.append((info.value.code, info.value.data["field"]))
            with pytest.raises(acp.RequestError) as unknown:
                await conn.resume_session(session_id="sess_nope", cwd="/")
        assert frames == [
            {"id": 1, "result": {"sessionId": session_id, "configOptions": [option_v2("ask")]}},
            options_update(session_id, "architect"),
            {"id": 2, "result": {"configOptions": [option_v2("architect")]}},
        ]
        assert errors == [(-32602, "configId"), (-32602, "value")]
        assert (unknown.value.code, unknown.value.data) == (-32002, {"sessionId": "sess_nope"})
        assert records(log_path, session_id) == [
            ("session_created", "ask", "new", None, 2),
            ("mode_changed", "architect", "set_config_option", None, 2),
            ("change_rejected", None, "set_config_option", "unknown_config_option", 2),
            ("change_rejected", "nope", "set_config_option", "unknown_mode", 2),
        ]

    async def test_switch_approve_reject_and_a_forged_option(self, server, kind):
        cases = [
            ({"outcome": "selected", "optionId": "reject"}, "failed", "Declined"),
            ({"outcome": "selected", "optionId": "architect"}, "failed", "Refused"),
            ({"outcome": "selected", "optionId": "code"}, "completed", "Switched"),
        ]
        url, log_path = server
        async with v2_client(url, kind) as (conn, client):
            session_id = (await conn.new_session(cwd="/")).session_id
            await conn.set_config_option(
                config_id="mode", session_id=session_id, value="architect", type="id"
            )
            turns = []
            for answer, _status, _shown in cases:
                client.answer = answer
                mark = client.mark()
                result = await conn.prompt(session_id=session_id, prompt=prompt_text("go"))
                turns.append((result.message_id, client.since(mark)))
        for (answer, status, shown), (message_id, frames) in zip(cases, turns, strict=True):
            call = frames[2]["params"]["update"]["toolCallId"]
            reply = frames[-3]["params"]["update"]["messageId"]
            switched = [options_update(session_id, "code")] if status == "completed" else []
            outcome = frames[-4]["params"]["update"]["content"][0]["content"]["text"]
            assert outcome.startswith(shown), answer
            assert frames == [
                *FRAMES.switch_asked(session_id, message_id, call, frames[4]["id"], "go"),
                state(session_id, "running"),
                *switched,
                update(
                    session_id,
                    {
                        "sessionUpdate": "tool_call_update",
                        "toolCallId": call,
                        "status": status,
                        "content": text(outcome),
                    },
                ),
                update(
                    session_id,
                    {
                        "sessionUpdate": "agent_message_chunk",
                        "messageId": reply,
                        "content": frames[-3]["params"]["update"]["content"],
                    },
                ),
                state(session_id, "idle", stopReason="end_turn"),
                {"id": frames[-1]["id"], "result": {"messageId": message_id}},
            ], answer
        assert records(log_path, session_id)[-3:] == [
            ("change_rejected", None, "switch_mode", "option_rejected", 2),
            ("change_rejected", None, "switch_mode", "option_not_offered", 2),
            ("mode_changed", "code", "switch_mode", None, 2),
        ]


@pytest.mark.parametrize("kind", ["http", "ws"])
async def test_a_change_and_a_cancel_while_the_permission_is_pending(server, kind):
    """A client change while the user decides, then the approval: the option's target lands.
    A session/cancel while the user decides: the switch fails, the mode stays."""
    url, log_path = server
    async with v2_client(url, kind) as (conn, client):
        session_id = (await conn.new_session(cwd="/")).session_id
        await conn.set_config_option(
            config_id="mode", session_id=session_id, value="architect", type="id"
        )
        client.release = asyncio.Event()
        turn = asyncio.ensure_future(conn.prompt(session_id=session_id, prompt=prompt_text("go")))
        await asyncio.wait_for(client.asked.wait(), TIMEOUT)
        mark = client.mark()
        changed = await conn.set_config_option(
            config_id="mode", session_id=session_id, value="ask", type="id"
        )
        during = client.since(mark)
        client.answer = {"outcome": "selected", "optionId": "code"}
        client.release.set()
        mark = client.mark()
        approved = await asyncio.wait_for(turn, TIMEOUT)
        after_approval = client.since(mark)

        await conn.set_config_option(
            config_id="mode", session_id=session_id, value="architect", type="id"
        )
        client.asked.clear()
        client.release = asyncio.Event()  # never set: the user does not decide
        turn = asyncio.ensure_future(conn.prompt(session_id=session_id, prompt=prompt_text("go")))
        await asyncio.wait_for(client.asked.wait(), TIMEOUT)
        mark = client.mark()
        await conn.cancel_session(session_id=session_id)
        cancelled = await asyncio.wait_for(turn, TIMEOUT)
        after_cancel = client.since(mark)
        resumed = await conn.resume_session(session_id=session_id, cwd="/")
    assert [o.current_value for o in changed.config_options] == ["ask"]
    assert during == [
        options_update(session_id, "ask"),
        {"id": during[-1]["id"], "result": {"configOptions": [option_v2("ask")]}},
    ]
    assert options_update(session_id, "code") in after_approval
    assert after_approval[-2:] == [
        state(session_id, "idle", stopReason="end_turn"),
        {"id": after_approval[-1]["id"], "result": {"messageId": approved.message_id}},
    ]
    assert all(
        f.get("params", {}).get("update", {}).get("sessionUpdate") != "config_option_update"
        for f in after_cancel
    )
    assert after_cancel[-2:] == [
        state(session_id, "idle", stopReason="cancelled"),
        {"id": after_cancel[-1]["id"], "result": {"messageId": cancelled.message_id}},
    ]
    assert resumed.config_options[0].current_value == "architect"
    assert records(log_path, session_id)[1:] == [
        ("mode_changed", "architect", "set_config_option", None, 2),
        ("mode_changed", "ask", "set_config_option", None, 2),
        ("mode_changed", "code", "switch_mode", None, 2),
        ("mode_changed", "architect", "set_config_option", None, 2),
        ("change_rejected", None, "switch_mode", "cancelled", 2),
    ]


@pytest.mark.parametrize("kind", ["http", "ws"])
async def test_v1_a_change_and_a_cancel_while_the_permission_is_pending(server, kind):
    """The same two paths for the SDK's v1 client: set_mode while the user decides, then
    the approval; session/cancel while the user decides."""
    from tests.acp_client import select, text_block

    url, log_path = server
    decided = asyncio.Event()

    async def when_decided(options: list[Any], tool_call: Any) -> Any:
        await decided.wait()
        return select("code")

    async with v1_client(url, kind) as (conn, client):
        session_id = (await conn.new_session(cwd="/")).session_id
        await conn.set_session_mode(session_id=session_id, mode_id="architect")
        client.answer = when_decided
        turn = asyncio.ensure_future(conn.prompt(session_id=session_id, prompt=[text_block("go")]))
        await asyncio.wait_for(client.pending.wait(), TIMEOUT)
        mark = client.mark()
        await conn.set_session_mode(session_id=session_id, mode_id="ask")
        during = client.since(mark)
        decided.set()
        mark = client.mark()
        approved = await asyncio.wait_for(turn, TIMEOUT)
        after_approval = client.since(mark)

        await conn.set_session_mode(session_id=session_id, mode_id="architect")
        client.pending.clear()
        decided = asyncio.Event()  # never set: the user does not decide
        turn = asyncio.ensure_future(conn.prompt(session_id=session_id, prompt=[text_block("go")]))
        await asyncio.wait_for(client.pending.wait(), TIMEOUT)
        mark = client.mark()
        await conn.cancel(session_id=session_id)
        cancelled = await asyncio.wait_for(turn, TIMEOUT)
        after_cancel = client.since(mark)
    assert during == [*mode_updates(session_id, "ask"), {"id": during[-1]["id"], "result": {}}]
    assert all(u in after_approval for u in mode_updates(session_id, "code"))
    assert approved.stop_reason == "end_turn"
    assert cancelled.stop_reason == "cancelled"
    assert not any(
        f.get("params", {}).get("update", {}).get("sessionUpdate") == "current_mode_update"
        for f in after_cancel
    )
    assert records(log_path, session_id)[1:] == [
        ("mode_changed", "architect", "set_mode", None, None),
        ("mode_changed", "ask", "set_mode", None, None),
        ("mode_changed", "code", "switch_mode", None, None),
        ("mode_changed", "architect", "set_mode", None, None),
        ("change_rejected", None, "switch_mode", "cancelled", None),
    ]


async def test_restart_and_resume_restores_the_mode(log_path):
    """Sessions made over HTTP and over WebSocket, resumed after a restart over the other."""
    made = {}
    with http_server(log_path) as url:
        for kind, mode in [("http", "code"), ("ws", "architect")]:
            async with v2_client(url, kind) as (conn, _client):
                made[kind] = (await conn.new_session(cwd="/")).session_id
                await conn.set_config_option(
                    config_id="mode", session_id=made[kind], value=mode, type="id"
                )
    with http_server(log_path) as url:
        for kind, made_over, mode in [("ws", "http", "code"), ("http", "ws", "architect")]:
            async with v2_client(url, kind) as (conn, client):
                mark = client.mark()
                resumed = await conn.resume_session(session_id=made[made_over], cwd="/")
                frames = client.since(mark)
            assert resumed.config_options[0].current_value == mode
            assert frames == [
                state(made[made_over], "idle"),
                {"id": 1, "result": {"configOptions": [option_v2(mode)]}},
            ], kind


@pytest.mark.parametrize("kind", ["http", "ws"])
async def test_v1_and_v2_clients_share_a_session_in_one_server(server, kind):
    """A v2 client makes the session; a v1 client loads and changes it; each hears the other."""
    url, log_path = server
    async with v2_client(url, kind) as (conn2, client2), v1_client(url, kind) as (conn1, seen1):
        session_id = (await conn2.new_session(cwd="/")).session_id
        await conn2.set_config_option(
            config_id="mode", session_id=session_id, value="architect", type="id"
        )
        loaded = await conn1.load_session(cwd=".", session_id=session_id)
        assert loaded.modes.current_mode_id == "architect"
        mark2 = client2.mark()
        mark1 = seen1.mark()
        await conn1.set_session_mode(session_id=session_id, mode_id="code")
        await until(lambda: client2.since(mark2), "the v2 client never heard of it")
        assert client2.since(mark2) == [options_update(session_id, "code")]
        mark2 = client2.mark()
        await conn2.set_config_option(
            config_id="mode", session_id=session_id, value="ask", type="id"
        )
        await until(lambda: len(seen1.since(mark1)) == 5, "the v1 client never heard of it")
        assert seen1.since(mark1) == [
            *mode_updates(session_id, "code"),
            {"id": 2, "result": {}},
            *mode_updates(session_id, "ask"),
        ]
    assert [r[4] for r in records(log_path, session_id)] == [2, 2, None, 2]


class TestOnTheWire:
    async def test_protocol_0_over_http_is_minus_32022_and_no_connection(self, server):
        body = {"jsonrpc": "2.0", "id": 5, "method": "initialize", "params": {"protocolVersion": 0}}
        url, _log = server
        status, answer = await asyncio.to_thread(post, url, json.dumps(body).encode())
        async with v2_client(url, "http"):
            pass  # the server still serves
        assert (status, answer) == (
            400,
            {
                "jsonrpc": "2.0",
                "id": 5,
                "error": {
                    "code": -32022,
                    "message": "protocolVersion: 0 is not supported",
                    "data": {"requested": 0, "supported": [1, 2]},
                },
            },
        )

    async def test_websocket_negotiation_and_raw_params_like_stdio(self, server):
        url, _log = server
        async with ws_connect(url) as socket:

            async def call(frame: dict[str, Any]) -> list[dict[str, Any]]:
                await socket.send(json.dumps({"jsonrpc": "2.0", **frame}))
                frames = [json.loads(await asyncio.wait_for(socket.recv(), TIMEOUT))]
                while frames[-1].get("id") != frame["id"] or "method" in frames[-1]:
                    frames.append(json.loads(await asyncio.wait_for(socket.recv(), TIMEOUT)))
                return frames

            refused = await call(
                {"id": 1, "method": "initialize", "params": {"protocolVersion": 0}}
            )
            info = {"name": "w", "version": "0"}
            init = await call(
                {
                    "id": 2,
                    "method": "initialize",
                    "params": {"protocolVersion": 2, "info": info},
                }
            )
            new = await call({"id": 3, "method": "session/new", "params": {"cwd": "/"}})
            session_id = new[-1]["result"]["sessionId"]
            untyped = await call(
                {
                    "id": 4,
                    "method": "session/set_config_option",
                    "params": {"sessionId": session_id, "configId": "mode", "value": "code"},
                }
            )
        assert refused[0]["error"]["code"] == -32022
        assert init[0]["result"]["protocolVersion"] == 2
        assert untyped == [
            {
                "jsonrpc": "2.0",
                "id": 4,
                "error": {
                    "code": -32602,
                    "message": "type: missing",
                    "data": {
                        "field": "type",
                        "value": None,
                        "valid": ["id"],
                        "message": "type: missing",
                    },
                },
            }
        ]

    async def test_bad_frames_and_unknown_ids_on_a_v2_connection(self, server):
        url, _log = server
        async with v2_client(url, "http") as (conn, client):
            session_id = (await conn.new_session(cwd="/")).session_id
            status, body = await asyncio.to_thread(post, url, b"{bad")
            assert (status, body["error"]["code"]) == (400, -32700)
            unknown = await asyncio.to_thread(
                post,
                url,
                b'{"jsonrpc":"2.0","id":9,"method":"session/new","params":{"cwd":"/"}}',
                {"Acp-Connection-Id": "f" * 32},
            )
            assert unknown == (404, {"error": "Unknown connection id"})
            answer = await conn.set_config_option(
                config_id="mode", session_id=session_id, value="code", type="id"
            )
            assert answer.config_options[0].current_value == "code"
            assert client.since(0)[-1]["result"] == {"configOptions": [option_v2("code")]}
