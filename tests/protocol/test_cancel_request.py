"""``$/cancel_request`` (SDK 1.0 cancels the handler task) never leaves a half-made change.

A client's ``$/cancel_request`` arrives a given number of event-loop turns after its
``session/set_mode`` or ``session/set_config_option``, at every point of the request: the
change is either made and reported in full (both notifications, then the answer) or not
made at all (``-32800``, no notification, no record).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from acp.agent.connection import AgentSideConnection

from modefsm import LogStore, TransitionLog, preset
from modefsm.protocol._sdk import ROUTES_CANCEL_REQUEST
from modefsm.protocol.v1._agent import ModeAgent
from tests.conftest import read_log
from tests.protocol.memory_wire import pipe_pair

REQUESTS = {
    "session/set_mode": lambda sid: {"sessionId": sid, "modeId": "code"},
    "session/set_config_option": lambda sid: {
        "sessionId": sid,
        "configId": "mode",
        "value": "code",
    },
}


async def _cancel_after(method: str, turns: int, log_path: Path) -> tuple[str, list[Any], Any]:
    agent_end, client_end = pipe_pair()
    log = TransitionLog.to_file(log_path)
    agent = ModeAgent(preset("seed"), store=LogStore(log))
    conn = AgentSideConnection(cast("Any", agent), agent_end, listening=True)
    try:
        await client_end.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "session/new",
                "params": {"cwd": "/", "mcpServers": []},
            }
        )
        answer = await asyncio.wait_for(client_end.receive(), 5)
        assert answer is not None
        sid = answer["result"]["sessionId"]
        params = REQUESTS[method](sid)
        await client_end.send({"jsonrpc": "2.0", "id": 2, "method": method, "params": params})
        for _ in range(turns):
            await asyncio.sleep(0)
        cancel = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 2}}
        await client_end.send(cancel)
        frames: list[Any] = []
        while not frames or frames[-1].get("id") != 2:
            frames.append(await asyncio.wait_for(client_end.receive(), 5))
        mode = agent.engine.get(sid).state
    finally:
        await conn.close()
        log.close()
    return mode, frames, sid


@pytest.mark.parametrize("method", sorted(REQUESTS))
@pytest.mark.parametrize("turns", range(12))
async def test_a_cancelled_change_is_made_in_full_or_not_at_all(
    tmp_path: Path, method: str, turns: int
):
    log_path = tmp_path / "modes.jsonl"
    mode, frames, sid = await _cancel_after(method, turns, log_path)
    answer = frames[-1]
    updates = [f["params"]["update"]["sessionUpdate"] for f in frames[:-1]]
    changes = [r for r in read_log(log_path) if r.get("to_mode") == "code"]
    if "error" in answer:
        assert answer["error"]["code"] == -32800
        assert (mode, updates, changes) == ("ask", [], [])
    else:
        assert mode == "code"
        assert updates == ["current_mode_update", "config_option_update"]
        assert [(r["session_id"], r["from_mode"]) for r in changes] == [(sid, "ask")]


@pytest.mark.sdk_compat
async def test_cancel_request_reaches_the_sdk_through_modefsm_serve(tmp_path: Path):
    """Over real pipes, ``$/cancel_request`` for a prompt waiting on a permission answer
    cancels the turn: the agent withdraws its own request (``$/cancel_request`` for it),
    the prompt is answered ``-32800``, and the mode stays where it was. On SDK 0.12 (no
    ``$/cancel_request``) it is ignored: the turn goes on with the client's answer."""
    log_path = tmp_path / "modes.jsonl"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "modefsm", "serve", "--log", str(log_path),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdin, stdout = cast("Any", process.stdin), cast("Any", process.stdout)

    async def send(message: dict[str, Any]) -> None:
        stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        await stdin.drain()

    async def until(test: Any) -> dict[str, Any]:
        while True:
            frame = json.loads(await asyncio.wait_for(stdout.readline(), 10))
            if test(frame):
                return cast("dict[str, Any]", frame)

    try:
        await send({"id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
        await until(lambda f: f.get("id") == 0)
        await send({"id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}})
        sid = (await until(lambda f: f.get("id") == 1))["result"]["sessionId"]
        params = {"sessionId": sid, "modeId": "architect"}
        await send({"id": 2, "method": "session/set_mode", "params": params})
        await until(lambda f: f.get("id") == 2 and "method" not in f)
        prompt = [{"type": "text", "text": "plan it"}]
        await send(
            {"id": 3, "method": "session/prompt", "params": {"sessionId": sid, "prompt": prompt}}
        )
        asked = await until(lambda f: f.get("method") == "session/request_permission")
        await send({"method": "$/cancel_request", "params": {"requestId": 3}})
        if ROUTES_CANCEL_REQUEST:
            withdrawn = await until(lambda f: f.get("method") == "$/cancel_request")
            assert withdrawn["params"] == {"requestId": asked["id"]}
        else:  # SDK 0.12 has no $/cancel_request: ignored, the turn waits for its answer
            selected = {"outcome": {"outcome": "selected", "optionId": "code"}}
            await send({"id": asked["id"], "result": selected})
        answer = await until(lambda f: f.get("id") == 3 and "method" not in f)
    finally:
        stdin.close()
        await asyncio.wait_for(process.wait(), 10)
    changes = [(r["from_mode"], r["to_mode"]) for r in read_log(log_path) if r.get("seq")]
    if ROUTES_CANCEL_REQUEST:
        assert answer["error"]["code"] == -32800
        assert changes == [(None, "ask"), ("ask", "architect")]
    else:
        assert answer["result"] == {"stopReason": "end_turn"}
        assert changes == [(None, "ask"), ("ask", "architect"), ("architect", "code")]
