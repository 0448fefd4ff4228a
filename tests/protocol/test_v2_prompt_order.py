"""v2 ``session/prompt``: the turn ends with ``state_update idle {stopReason}``, then the answer.

The answer is ``{messageId}`` (the id of the ``user_message`` echoed first); nothing of the
turn follows it. Exact frames, the official SDK v2 client against `modefsm serve` on stdio.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from acp.experimental.v2 import schema as s2

from .test_v2_resume_replay import HOLD, TIMEOUT, serve_v2, text, tool_text, update

pytestmark = pytest.mark.e2e


def state(session_id: str, name: str, **extra: Any) -> dict[str, Any]:
    return update(session_id, sessionUpdate="state_update", state=name, **extra)


async def test_a_turn_without_a_switch_ends_idle_before_the_answer(log_path):
    async with serve_v2(log_path) as (conn, client):
        session_id = (await conn.new_session(cwd="/")).session_id
        mark = client.mark()
        response = await asyncio.wait_for(
            conn.prompt(session_id=session_id, prompt=[s2.TextContentBlock(text="hi")]), TIMEOUT
        )
        frames = client.since(mark)
    reply = frames[2]["params"]["update"]["messageId"]
    assert frames == [
        update(
            session_id,
            sessionUpdate="user_message",
            messageId=response.message_id,
            content=[text("hi")],
        ),
        state(session_id, "running"),
        update(
            session_id,
            sessionUpdate="agent_message_chunk",
            messageId=reply,
            content=text("Mode ask: hi"),
        ),
        state(session_id, "idle", stopReason="end_turn"),
        {"jsonrpc": "2.0", "id": 2, "result": {"messageId": response.message_id}},
    ]
    assert reply != response.message_id


async def test_session_cancel_during_a_pending_switch_ends_idle_cancelled_before_the_answer(
    log_path,
):
    async with serve_v2(log_path) as (conn, client):
        session_id = (await conn.new_session(cwd="/")).session_id
        await conn.set_config_option(
            config_id="mode", session_id=session_id, value="architect", type="id"
        )
        client.answers = iter([HOLD])
        mark = client.mark()
        prompt = [s2.TextContentBlock(text="go")]
        turn = asyncio.ensure_future(conn.prompt(session_id=session_id, prompt=prompt))
        await asyncio.wait_for(client.asked.wait(), TIMEOUT)
        await conn.cancel_session(session_id=session_id)
        response = await asyncio.wait_for(turn, TIMEOUT)
        frames = client.since(mark)
        # nothing of the turn arrives after its answer: the next request's frames are its own
        after = client.mark()
        await conn.resume_session(session_id=session_id, cwd="/")
        resumed = client.since(after)
    call = frames[2]["params"]["update"]["toolCallId"]
    permission = frames[4]
    pending = {"title": "Ready for implementation", "kind": "switch_mode", "status": "pending"}
    assert frames == [
        update(
            session_id,
            sessionUpdate="user_message",
            messageId=response.message_id,
            content=[text("go")],
        ),
        state(session_id, "running"),
        update(
            session_id,
            sessionUpdate="tool_call_update",
            toolCallId=call,
            **pending,
            content=tool_text("go"),
        ),
        state(session_id, "requires_action"),
        {
            "jsonrpc": "2.0",
            "id": permission["id"],
            "method": "session/request_permission",
            "params": permission["params"],
        },
        {
            "jsonrpc": "2.0",
            "method": "$/cancel_request",
            "params": {"requestId": permission["id"]},
        },
        state(session_id, "running"),
        update(
            session_id,
            sessionUpdate="tool_call_update",
            toolCallId=call,
            status="failed",
            content=tool_text("Cancelled: staying in architect mode."),
        ),
        state(session_id, "idle", stopReason="cancelled"),
        {"jsonrpc": "2.0", "id": 3, "result": {"messageId": response.message_id}},
    ]
    assert [f.get("method") for f in resumed] == ["session/update", None]
    assert resumed[0] == state(session_id, "idle")
