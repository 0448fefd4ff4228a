"""The embedding examples (the README's and the Embedding page's) run as agents and behave
as the documentation says."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import acp
import pytest

from .acp_client import TestClient, select, text_block
from .doc_blocks import DOCS, README, blocks

pytestmark = pytest.mark.e2e


def example(page: Path) -> str:
    agents = [block.text for block in blocks(page, "python") if "(ModeAgent):" in block.text]
    assert len(agents) == 1
    return agents[0]


@pytest.mark.sdk_compat
@pytest.mark.parametrize(
    ("page", "reply"),
    [(README, "working in code mode"), (DOCS / "embedding.md", "switched to code")],
    ids=["README", "embedding"],
)
async def test_embedding_example_runs_the_seed_flow(page: Path, reply: str, tmp_path: Path):
    script = tmp_path / "my_agent.py"
    script.write_text(example(page), encoding="utf-8")
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
    assert texts == [reply]
    assert log.read_text().count('"modefsm.mode_changed"') == 2


def editor_entry() -> dict[str, Any]:
    """The Zed ``agent_servers`` entry of the README (and, the same, of Getting started)."""
    shown = [
        block.text
        for page in (README, DOCS / "getting-started.md")
        for block in blocks(page, "json")
        if '"agent_servers"' in block.text
    ]
    assert len(shown) == 2
    assert shown[0] == shown[1]
    servers = json.loads(shown[0])["agent_servers"]
    assert list(servers) == ["modefsm"]
    return dict(servers["modefsm"])


async def test_the_editor_entry_starts_an_agent_an_sdk_client_can_use(tmp_path: Path):
    """Zed runs ``command`` with ``args`` and ``env`` (found on its ``PATH``) and speaks ACP to
    it over stdio: so does this test, with the official SDK client."""
    entry = editor_entry()
    assert entry["type"] == "custom"
    command = shutil.which(entry["command"], path=str(Path(sys.executable).parent))
    assert command is not None
    client = TestClient()
    env = {**os.environ, **entry["env"]}
    async with acp.spawn_agent_process(
        client,  # type: ignore[arg-type]
        command,
        *entry["args"],
        env=env,
        cwd=tmp_path,
        transport_kwargs={"stderr": None, "shutdown_timeout": 30.0},
        observers=[client.observe],
    ) as (conn, _process):
        init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(tmp_path))
        await conn.set_session_mode(session_id=session.session_id, mode_id="plan")
    assert init.protocol_version == acp.PROTOCOL_VERSION
    assert session.modes is not None
    assert [mode.id for mode in session.modes.available_modes] == [
        "default",
        "acceptEdits",
        "plan",
        "bypassPermissions",
    ]
    assert session.modes.current_mode_id == "default"
    modes = [
        u["update"]["currentModeId"]
        for u in client.updates(session.session_id)
        if u["update"]["sessionUpdate"] == "current_mode_update"
    ]
    assert modes == ["plan"]
