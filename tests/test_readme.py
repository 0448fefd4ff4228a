"""The README's embedding example runs as an agent and behaves as the README says."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import acp
import pytest

from .acp_client import TestClient, select, text_block

pytestmark = pytest.mark.e2e

README = Path(__file__).resolve().parent.parent / "README.md"


def example() -> str:
    blocks = re.findall(r"```python\n(.+?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    agents = [block for block in blocks if "class MyAgent(ModeAgent)" in block]
    assert len(agents) == 1
    return str(agents[0])


async def test_readme_agent_runs_the_seed_flow(tmp_path: Path):
    script = tmp_path / "my_agent.py"
    script.write_text(example(), encoding="utf-8")
    log = tmp_path / "modes.jsonl"
    client = TestClient()

    async def answer(options, tool_call):
        return select("code")

    client.answer = answer
    async with acp.spawn_agent_process(
        client,  # type: ignore[arg-type]
        sys.executable,
        str(script),
        str(log),
        transport_kwargs={"stderr": None, "shutdown_timeout": 30.0},  # not the SDK's 2 s
        observers=[client.observe],
    ) as (conn, _process):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session_id = (await conn.new_session(cwd=".")).session_id
        await conn.set_session_mode(session_id=session_id, mode_id="architect")
        response = await conn.prompt(session_id=session_id, prompt=[text_block("go")])
    assert response.stop_reason == "end_turn"
    texts = [
        u["update"]["content"]["text"]
        for u in client.updates(session_id)
        if u["update"]["sessionUpdate"] == "agent_message_chunk"
    ]
    assert texts == ["switched to code"]
    assert log.read_text().count('"modefsm.mode_changed"') == 2
