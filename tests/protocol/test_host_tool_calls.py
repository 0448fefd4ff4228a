"""A host's own tool calls through ``ModeAgent.run_tool``, as hosts write them.

A real host agent (a script embedding ``ModeAgent``; its tool appends a line to a file, a
real effect) runs as a process; the official SDK client answers its permission requests
over stdio, and the file, the frames and the log are compared whole.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path
from typing import Any, cast

import acp
import pytest

from modefsm import preset, replay
from tests.acp_client import TIMEOUT, TestClient, select, text_block
from tests.conftest import read_log

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
    async with acp.spawn_agent_process(
        cast("Any", client),
        sys.executable,
        str(script),
        str(log),
        str(effects),
        transport_kwargs={"stderr": None, "shutdown_timeout": TIMEOUT},
        observers=[client.observe],
    ) as (conn, _process):
        await asyncio.wait_for(conn.initialize(protocol_version=1), TIMEOUT)
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
