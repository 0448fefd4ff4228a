"""``$/cancel_request`` at seeded random points of a change, over ACP v1 and v2.

Each schedule runs an agent behind the SDK's protocol router (in process, on a transport
whose sends yield to the loop as a pipe's ``drain()`` does) and cancels, a random number
of loop turns after sending it, either a ``session/set_config_option`` or the
``session/prompt`` whose ``switch_mode`` permission request is pending (which the client
answers, or not, at another random point). Whatever the order, the log, the
notifications and the answers must agree:

- a change is either committed in full (its record, its announcement, and a reply that
  does not say it failed) or not made at all (no record, no announcement);
- a client is never told a change failed (``-32800`` answer to a set, a ``failed`` tool
  call) when it was made; a switch always ends with a final tool call update and a record.

``MODEFSM_SOAK`` multiplies the number of schedules.
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import Any, cast

import pytest
from acp.experimental import AgentProtocolRouter

from modefsm import LogStore, TransitionLog, preset
from modefsm.cli._serve import ScriptedAgent
from modefsm.protocol.v2._agent import ModeAgentV2
from tests.conftest import read_log
from tests.protocol.memory_wire import RawClient, pipe_pair

SCHEDULES = 240 * (int(os.environ.get("MODEFSM_SOAK", "0") or 0) * 10 or 1)
MAX_TURNS = 24


def _mode_of(frame: dict[str, Any]) -> str | None:
    """The mode a ``session/update`` announces, if it announces one."""
    update = frame.get("params", {}).get("update", {})
    if update.get("sessionUpdate") == "config_option_update":
        value: str = update["configOptions"][0]["currentValue"]
        return value
    if update.get("sessionUpdate") == "current_mode_update":
        mode: str = update["currentModeId"]
        return mode
    return None


async def _run(seed: int, log_path: Path) -> None:  # noqa: C901, PLR0912, PLR0915 - one schedule
    rng = random.Random(seed)
    version = rng.choice((1, 2))
    scenario = rng.choice(("set", "switch"))
    agent_end, client_end = pipe_pair()
    log = TransitionLog.to_file(log_path)
    base = ScriptedAgent(preset("seed"), store=LogStore(log), unstable=True)
    router = AgentProtocolRouter(v1=lambda _c: cast("Any", base), v2=lambda c: ModeAgentV2(base, c))
    conn = router.connect(agent_end, listening=False)
    listen = asyncio.ensure_future(conn.listen())
    client = RawClient(client_end)
    frames = client.frames

    async def call(request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        await client.request(request_id, method, params)
        return (await client.answer(request_id))[1]

    def set_params(value: str) -> dict[str, Any]:
        params = {"sessionId": sid, "configId": "mode", "value": value}
        return {**params, "type": "id"} if version == 2 else params

    try:
        init: dict[str, Any] = {"protocolVersion": version}
        if version == 2:
            init["info"] = {"name": "t", "version": "0"}
        await call(0, "initialize", init)
        sid = (await call(1, "session/new", {"cwd": "/", "mcpServers": []}))["result"]["sessionId"]
        if scenario == "set":
            mark = len(frames)
            await client_end.send(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "session/set_config_option",
                    "params": set_params("code"),
                }
            )
            for _ in range(rng.randrange(MAX_TURNS)):
                await asyncio.sleep(0)
            await client_end.send(
                {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 2}}
            )
            _, reply = await client.answer(2)
            seen = [_mode_of(f) for f in frames[mark:] if f.get("method") == "session/update"]
            made = [r for r in read_log(log_path) if r["event"] == "modefsm.mode_changed"]
            if "result" in reply:
                assert [r["to_mode"] for r in made] == ["code"], seed
                assert "code" in seen, seed
                assert base.engine.get(sid).state == "code", seed
            else:
                assert reply["error"]["code"] == -32800, (seed, reply)
                assert not made, seed
                assert [m for m in seen if m is not None] == [], seed
                assert base.engine.get(sid).state == "ask", seed
        else:
            await call(2, "session/set_config_option", set_params("architect"))
            mark = len(frames)
            await client_end.send(
                {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "session/prompt",
                    "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]},
                }
            )
            cancel_at = rng.randrange(MAX_TURNS)
            answer_at = rng.randrange(MAX_TURNS) if rng.random() < 0.7 else None
            answered = False
            for turn in range(MAX_TURNS + 1):
                if turn == cancel_at:
                    await client_end.send(
                        {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 3}}
                    )
                asks = [f for f in frames if f.get("method") == "session/request_permission"]
                if answer_at is not None and turn >= answer_at and asks and not answered:
                    answered = True
                    await client_end.send(
                        {
                            "jsonrpc": "2.0",
                            "id": asks[0]["id"],
                            "result": {"outcome": {"outcome": "selected", "optionId": "code"}},
                        }
                    )
                await asyncio.sleep(0)
            await client.answer(3)
            for _ in range(50):  # let a late answer be handled
                await asyncio.sleep(0)
            await base.engine.flush()
            updates = [
                f["params"]["update"] for f in frames[mark:] if f.get("method") == "session/update"
            ]
            calls = [u for u in updates if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
            records = read_log(log_path)
            switched = [
                r
                for r in records
                if r["event"] == "modefsm.mode_changed" and r["origin"] == "switch_mode"
            ]
            refused = [
                r
                for r in records
                if r["event"] == "modefsm.change_rejected"
                and r["origin"] == "switch_mode"
                and r["reason"] != "late_answer"
            ]
            state = base.engine.get(sid).state
            announced = [_mode_of({"params": {"update": u}}) for u in updates]
            if state == "code":
                assert len(switched) == 1, seed
                assert not refused, seed
                assert "code" in announced, seed
                assert calls[-1]["status"] == "completed", seed
            else:
                assert state == "architect", seed
                # a turn cancelled before it proposed the switch shows and logs nothing
                assert not switched, seed
                assert len(refused) == (1 if calls else 0), seed
                assert "code" not in announced, seed
                if calls:  # the tool call was shown: it ends failed
                    assert calls[-1]["status"] == "failed", seed
            if calls:
                assert len([c for c in calls if c["status"] in ("completed", "failed")]) == 1, seed
            if version == 2 and any(u["sessionUpdate"] == "state_update" for u in updates):
                assert updates[-1]["sessionUpdate"] == "state_update", seed
                assert updates[-1]["state"] == "idle", seed
    finally:
        await client_end.close()
        listen.cancel()
        client.reader.cancel()
        await asyncio.gather(listen, client.reader, return_exceptions=True)
        await conn.close()
        log.close()


@pytest.mark.parametrize("block", range(8))
async def test_cancel_at_random_points_never_half_makes_a_change(tmp_path: Path, block: int):
    per_block = SCHEDULES // 8
    for n in range(per_block):
        seed = block * per_block + n
        await _run(seed, tmp_path / f"log-{seed}.jsonl")
