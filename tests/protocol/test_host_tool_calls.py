"""A host's own tool calls through ``ModeAgent.run_tool``, as hosts write them.

A real host agent (a script embedding ``ModeAgent``; its tool appends a line to a file, a
real effect) runs as a process; the official SDK client answers its permission requests
over stdio, and the file, the frames and the log are compared whole.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

import pytest

from modefsm import preset, replay
from tests.acp_client import (
    TIMEOUT,
    TestClient,
    host_command,
    select,
    spawn_v1,
    start_host,
    text_block,
)
from tests.conftest import read_log
from tests.reliability.harness import RawPeer

pytestmark = pytest.mark.e2e

HOST = textwrap.dedent(
    """
    import asyncio
    import sys
    from pathlib import Path

    from acp.schema import PromptResponse

    from modefsm import FileStore, ModeAgent, ToolCall, preset, run_agent

    EDIT = ToolCall("call_edit", "edit", "edit_file", "Edit notes.txt")  # one object, reused
    effects = Path(sys.argv[2])


    class Host(ModeAgent):
        async def prompt(self, prompt, session_id, **kwargs):
            async def edit() -> str:
                with effects.open("a", encoding="utf-8") as file:
                    file.write("edited\\n")
                return "edited"

            await self.run_tool(session_id, EDIT, edit)
            return PromptResponse(stop_reason="end_turn")


    asyncio.run(run_agent(Host(preset("permission"), store=FileStore(sys.argv[1]))))
    """
)


async def test_a_tool_call_object_asked_again_waits_for_its_own_answer(tmp_path: Path):
    """The second ask of one ``ToolCall`` is answered by the user, not by the first answer."""
    script, log, effects = tmp_path / "host.py", tmp_path / "modes.jsonl", tmp_path / "effects"
    script.write_text(HOST, encoding="utf-8")
    answers = iter(["allow_once", "reject_once"])

    async def answer(options: Any, tool_call: Any) -> Any:
        del options, tool_call
        return select(next(answers))

    client = TestClient()
    client.answer = answer
    async with spawn_v1(client, *host_command(script, log, effects)) as (conn, _process):
        session_id = (
            await asyncio.wait_for(conn.new_session(cwd=str(tmp_path)), TIMEOUT)
        ).session_id
        for _ in range(2):
            await asyncio.wait_for(
                conn.prompt(session_id=session_id, prompt=[text_block("edit")]), TIMEOUT
            )
    assert effects.read_text(encoding="utf-8") == "edited\n"  # the rejected edit never ran
    ends = [
        (u["update"]["status"], u["update"]["content"][0]["content"]["text"])
        for u in client.updates(session_id)
        if u["update"].get("status") in {"completed", "failed"}
    ]
    assert ends == [("completed", "edited"), ("failed", "Rejected by the user.")]
    assert [
        (r["tool_call_id"], r["decision"], r["outcome"])
        for r in read_log(log)
        if r["event"] == "modefsm.tool_decided"
    ] == [("call_edit", "ask", "allow_once"), ("call_edit", "ask", "reject_once")]
    assert replay([log], [preset("permission")], verify=True).violations == ()


NUMBERED = textwrap.dedent(
    """
    import asyncio
    import sys

    from acp.schema import PromptResponse

    from modefsm import FileStore, ModeAgent, ToolCall, preset, run_agent


    class Host(ModeAgent):
        async def prompt(self, prompt, session_id, **kwargs):
            async def edit() -> str:
                return "edited"

            # the host numbers its tool calls per session: every session has a call_1
            await self.run_tool(session_id, ToolCall("call_1", "edit", "edit_file"), edit)
            return PromptResponse(stop_reason="end_turn")


    asyncio.run(run_agent(Host(preset("permission"), store=FileStore(sys.argv[1]))))
    """
)


DROPPED = "modefsm.answer_dropped"


async def test_a_late_answer_is_logged_for_its_own_session_and_request(tmp_path: Path):
    """Two sessions with the same ``toolCallId``: session a's withdrawn ask is answered late,
    after session b's ask was answered in time; only a's answer is logged as late."""
    script, log = tmp_path / "host.py", tmp_path / "modes.jsonl"
    script.write_text(NUMBERED, encoding="utf-8")
    process = await start_host(script, log)
    peer = RawPeer(process)
    reader = asyncio.create_task(peer.read_forever())

    async def prompt(session_id: str) -> int:
        peer.next_id += 1
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": "edit"}]}
        await peer.send(
            {"jsonrpc": "2.0", "id": peer.next_id, "method": "session/prompt", "params": params}
        )
        return peer.next_id

    selected = {"outcome": {"outcome": "selected", "optionId": "allow_once"}}
    try:
        await peer.result("initialize", {"protocolVersion": 1})
        a, b = await peer.new_session(), await peer.new_session()
        in_a = await prompt(a)
        asked_a = await peer.next_agent_request()
        assert "result" in await peer.set_mode(a, "plan")  # a's ask is withdrawn
        await peer.response(in_a)
        in_b = await prompt(b)
        asked_b = await peer.next_agent_request()
        await peer.answer(asked_b, selected)  # in time: the edit runs in b
        await peer.response(in_b)
        await peer.answer(asked_a, selected)  # late: a's ask was withdrawn
        assert "result" in await peer.set_mode(a, "default")  # one more round trip
    finally:
        assert process.stdin is not None
        process.stdin.close()
        await asyncio.wait_for(process.wait(), TIMEOUT)
        await asyncio.wait_for(reader, TIMEOUT)
    assert [m["params"]["toolCall"]["toolCallId"] for m in (asked_a, asked_b)] == ["call_1"] * 2
    fields = ("session_id", "event", "decision", "outcome", "reason", "request_id", "option_id")
    assert [
        tuple(r.get(field) for field in fields)
        for r in read_log(log)
        if r["event"] in {"modefsm.tool_decided", "modefsm.change_rejected", DROPPED}
    ] == [
        (a, "modefsm.tool_decided", "deny", None, None, None, None),
        (b, "modefsm.tool_decided", "ask", "allow_once", None, None, None),
        (a, DROPPED, None, None, "late_answer", asked_a["id"], "allow_once"),
    ]
    assert replay([log], [preset("permission")], verify=True).violations == ()
