"""`session/close` while a prompt turn runs: the turn is cancelled as by `session/cancel`.

Raw frames over stdio (both moments of the close written in the same write as what they
follow, so the agent reads them in that order every run), then the official SDK clients
over HTTP and WebSocket. v1: the prompt answers a result (``cancelled``, or ``end_turn`` if
its turn had ended), never an error; v2: the turn's last updates and ``state_update idle``
with ``stopReason: "cancelled"`` come before the close's answer; a switch still pending is
withdrawn (``$/cancel_request``) and logged ``cancelled``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from modefsm.protocol._sdk import ROUTES_CANCEL_REQUEST
from tests.acp_client import select, text_block
from tests.conftest import read_log
from tests.protocol.http_wire import TIMEOUT, http_server, v1_client
from tests.protocol.raw_wire import Stdio, call, stdio
from tests.protocol.test_http_v2 import prompt_text, v2_client
from tests.protocol.v2_frames import Frames, text

pytestmark = pytest.mark.e2e

RAW = Frames(jsonrpc=True)
SELECT_CODE = {"outcome": {"outcome": "selected", "optionId": "code"}}


def cancelled_switch(session_id: str, call_id: str) -> dict[str, Any]:
    """The ``tool_call_update`` that ends a switch a cancel (or close) ended."""
    body = {
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "status": "failed",
        "content": text("Cancelled: staying in architect mode."),
    }
    return RAW.update(session_id, body)


def rejections(log: Path) -> list[tuple[str, str | None]]:
    return [(r["origin"], r.get("reason")) for r in read_log(log) if "reason" in r]


async def in_architect(peer: Stdio, version: int) -> str:
    await peer.write(call(1, "session/new", {"cwd": "/", "mcpServers": []}))
    session_id: str = (await peer.read())["result"]["sessionId"]
    if version == 1:
        params: dict[str, Any] = {"sessionId": session_id, "modeId": "architect"}
        await peer.write(call(2, "session/set_mode", params))
    else:
        params = {"sessionId": session_id, "configId": "mode", "type": "id", "value": "architect"}
        await peer.write(call(2, "session/set_config_option", params))
    while (await peer.read()).get("id") != 2:
        pass
    return session_id


async def until_permission(peer: Stdio, session_id: str) -> tuple[dict[str, Any], str]:
    """Prompt (id 3); the permission request and the switch's toolCallId."""
    prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "plan"}]}
    await peer.write(call(3, "session/prompt", prompt))
    tool_call_id = ""
    while (frame := await peer.read()).get("method") != "session/request_permission":
        update = frame["params"]["update"]
        tool_call_id = update.get("toolCallId", tool_call_id)
    return frame, tool_call_id


async def until_both_answers(peer: Stdio) -> list[dict[str, Any]]:
    """Every frame until the prompt (id 3) and the close (id 4) are both answered."""
    frames: list[dict[str, Any]] = []
    while not {3, 4} <= {f.get("id") for f in frames if "method" not in f}:
        frames.append(await peer.read())
    return frames


class TestStdio:
    @pytest.mark.sdk_compat
    async def test_v1_close_during_the_permission_cancels_the_turn(self, log_path):
        async with stdio(log_path, version=1) as peer:
            session_id = await in_architect(peer, 1)
            request, call_id = await until_permission(peer, session_id)
            await peer.write(call(4, "session/close", {"sessionId": session_id}))
            frames = await until_both_answers(peer)
            failed = cancelled_switch(session_id, call_id)
            cancel = {
                "jsonrpc": "2.0",
                "method": "$/cancel_request",
                "params": {"requestId": request["id"]},
            }
            # SDK 1.0 withdraws the permission request; 0.12 cannot ($/cancel_request)
            withdrawn = [cancel] if ROUTES_CANCEL_REQUEST else []
            assert frames[: len(withdrawn) + 1] == [*withdrawn, failed]
            assert sorted(frames[len(withdrawn) + 1 :], key=lambda f: f["id"]) == [
                {"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "cancelled"}},
                {"jsonrpc": "2.0", "id": 4, "result": {}},
            ]
            # the session is freed once the close is answered
            await peer.write(call(5, "session/prompt", {"sessionId": session_id, "prompt": []}))
            assert (await peer.read())["error"]["code"] == -32002
        assert rejections(log_path) == [("switch_mode", "cancelled")]

    @pytest.mark.sdk_compat
    async def test_v1_close_right_after_the_answer_still_answers_the_prompt(self, log_path):
        async with stdio(log_path, version=1) as peer:
            session_id = await in_architect(peer, 1)
            request, _call_id = await until_permission(peer, session_id)
            answer = {"jsonrpc": "2.0", "id": request["id"], "result": SELECT_CODE}
            close = call(4, "session/close", {"sessionId": session_id})
            await peer.write(json.dumps(answer).encode() + b"\n" + json.dumps(close).encode())
            frames = await until_both_answers(peer)
            answers = {f["id"]: f for f in frames if "method" not in f}
            assert answers[4] == {"jsonrpc": "2.0", "id": 4, "result": {}}
            stop = answers[3]["result"]["stopReason"]  # never an error
            kinds = [f["params"]["update"]["sessionUpdate"] for f in frames if "method" in f]
            if stop == "cancelled":  # the close came before the turn's last message
                assert kinds == ["current_mode_update", "config_option_update", "tool_call_update"]
            else:
                assert stop == "end_turn"
                assert kinds[-1] == "agent_message_chunk"
        records = read_log(log_path)
        assert [(r["origin"], r["to_mode"]) for r in records[-1:]] == [("switch_mode", "code")]

    async def test_v2_close_during_the_permission_ends_the_turn_before_its_answer(self, log_path):
        async with stdio(log_path) as peer:
            session_id = await in_architect(peer, 2)
            request, call_id = await until_permission(peer, session_id)
            await peer.write(call(4, "session/close", {"sessionId": session_id}))
            frames = await until_both_answers(peer)
            prompt = next(f for f in frames if f.get("id") == 3)
            assert set(prompt["result"]) == {"messageId"}
            assert [f for f in frames if f is not prompt] == [
                {
                    "jsonrpc": "2.0",
                    "method": "$/cancel_request",
                    "params": {"requestId": request["id"]},
                },
                RAW.state(session_id, "running"),
                cancelled_switch(session_id, call_id),
                RAW.state(session_id, "idle", stopReason="cancelled"),
                {"jsonrpc": "2.0", "id": 4, "result": {}},
            ]
        assert rejections(log_path) == [("switch_mode", "cancelled")]

    async def test_v2_close_right_after_the_answer(self, log_path):
        async with stdio(log_path) as peer:
            session_id = await in_architect(peer, 2)
            request, call_id = await until_permission(peer, session_id)
            answer = {"jsonrpc": "2.0", "id": request["id"], "result": SELECT_CODE}
            close = call(4, "session/close", {"sessionId": session_id})
            await peer.write(json.dumps(answer).encode() + b"\n" + json.dumps(close).encode())
            frames = await until_both_answers(peer)
            closed = frames.index({"jsonrpc": "2.0", "id": 4, "result": {}})
            updates = [f["params"]["update"] for f in frames[:closed] if "method" in f]
            idle = updates[-1]
            assert idle["sessionUpdate"] == "state_update"
            assert idle["state"] == "idle"
            if idle["stopReason"] == "cancelled":
                kinds = [u["sessionUpdate"] for u in updates]
                assert kinds == [
                    "state_update",
                    "config_option_update",
                    "tool_call_update",
                    "state_update",
                ]
            else:
                assert idle["stopReason"] == "end_turn"
            assert not [f for f in frames[closed + 1 :] if "method" in f]  # nothing after
            assert {"toolCallId": call_id, "status": "completed"}.items() <= updates[2].items()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    log = tmp_path_factory.mktemp("close") / "modes.jsonl"
    with http_server(log) as url:
        yield url, log


@pytest.mark.parametrize("kind", ["http", "ws"])
class TestOfficialClients:
    async def test_v1_client_close_during_the_permission(self, server, kind):
        url, _log = server
        never = asyncio.Event()

        async def undecided(options: Any, tool_call: Any) -> Any:
            await never.wait()
            return select("code")

        async with v1_client(url, kind) as (conn, client):
            session_id = (await conn.new_session(cwd="/")).session_id
            await conn.set_session_mode(session_id=session_id, mode_id="architect")
            client.answer = undecided
            turn = asyncio.ensure_future(
                conn.prompt(session_id=session_id, prompt=[text_block("plan")])
            )
            await asyncio.wait_for(client.pending.wait(), TIMEOUT)
            await asyncio.wait_for(conn.close_session(session_id=session_id), TIMEOUT)
            assert (await asyncio.wait_for(turn, TIMEOUT)).stop_reason == "cancelled"

    async def test_v2_client_close_during_the_permission(self, server, kind):
        url, _log = server
        async with v2_client(url, kind) as (conn, client):
            session_id = (await conn.new_session(cwd="/")).session_id
            await conn.set_config_option(
                config_id="mode", session_id=session_id, value="architect", type="id"
            )
            client.release = asyncio.Event()  # never set: the user does not decide
            turn = asyncio.ensure_future(
                conn.prompt(session_id=session_id, prompt=prompt_text("p"))
            )
            await asyncio.wait_for(client.asked.wait(), TIMEOUT)
            mark = client.mark()
            await asyncio.wait_for(conn.close_session(session_id=session_id), TIMEOUT)
            answered = await asyncio.wait_for(turn, TIMEOUT)
            assert answered.message_id.startswith("msg_")
            got = client.since(mark)
            updates = [f["params"]["update"] for f in got if f.get("method") == "session/update"]
            assert updates[-1] == {
                "sessionUpdate": "state_update",
                "state": "idle",
                "stopReason": "cancelled",
            }
            assert {"method": "$/cancel_request", "params": {"requestId": 0}} in got
