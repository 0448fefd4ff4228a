"""Interop: the official TypeScript SDK (``@agentclientprotocol/sdk`` 2.x) drives ``modefsm serve``.

``tests/ts/conformance_v2.mjs`` checks the letter of v2 over stdio, streamable HTTP and
WebSocket (``ws`` is pinned beside the SDK for the WebSocket client).

``tests/ts/seed_scenario_v2.mjs`` does the same over ACP v2 with the SDK's ``experimental/v2``
client and its v2 zod schemas (``session/resume`` after a restart, without ``replayFrom``,
from the start and from a message: the replay equals the conversation sent live).

``tests/ts/seed_scenario.mjs`` spawns the agent and runs the seed scenario (new session,
set_mode, the mode config option, an approved switch, a rejected one, an unknown mode,
load), validating every frame the agent writes with the SDK's own zod schemas. The SDK
is pinned in ``tests/ts/package.json`` and ``package-lock.json``; ``.ci/run`` installs it
with ``npm ci``. Both scenarios spawn the agent and check its frames through
``tests/ts/agent_wire.mjs``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .harness import read_log

TS = Path(__file__).resolve().parent.parent / "ts"
SDK = TS / "node_modules" / "@agentclientprotocol" / "sdk"

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.e2e,
    pytest.mark.skipif(
        not SDK.is_dir(),
        reason="the TypeScript SDK is not installed: run `npm ci` in tests/ts (CI does)",
    ),
]


def run_scenario(script: str, log: Path, *options: str) -> dict[str, Any]:
    """Run ``node SCRIPT [OPTIONS] python -m modefsm serve --log LOG`` in tests/ts; its
    summary line."""
    node = shutil.which("node")
    assert node is not None, "tests/ts/node_modules exists but node is not on PATH"
    command = [sys.executable, "-m", "modefsm", "serve", "--log", str(log)]
    result = subprocess.run(
        [node, script, *options, *command],
        cwd=TS,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return summary


def test_the_typescript_sdk_runs_the_seed_scenario(tmp_path: Path):
    log = tmp_path / "log.jsonl"
    summary = run_scenario("seed_scenario.mjs", log)
    assert summary["steps"] == [
        "initialize",
        "session/new",
        "set_mode architect",
        "set_config_option code",
        "approved switch to code",
        "rejected switch stays in architect",
        "unknown mode is -32602",
        "session/load reports architect",
    ]
    # 28 frames of the story, and 8 of its conversation replayed by session/load
    assert summary["validated"] == summary["received"] == 36
    header, *records = read_log(log).records
    assert (header["event"], header["spec"]) == ("modefsm.spec", "seed")  # the file's header
    assert [(r["event"], r["to_mode"], r["origin"], r.get("reason")) for r in records] == [
        ("modefsm.session_created", "ask", "new", None),
        ("modefsm.mode_changed", "architect", "set_mode", None),
        ("modefsm.mode_changed", "code", "set_config_option", None),
        ("modefsm.mode_changed", "architect", "set_mode", None),
        ("modefsm.mode_changed", "code", "switch_mode", None),
        ("modefsm.mode_changed", "architect", "set_mode", None),
        ("modefsm.change_rejected", None, "switch_mode", "option_rejected"),
        ("modefsm.change_rejected", "does-not-exist", "set_mode", "unknown_mode"),
    ]


def test_the_typescript_sdk_v2_client_runs_the_seed_story(tmp_path: Path):
    log = tmp_path / "log.jsonl"
    summary = run_scenario("seed_scenario_v2.mjs", log)
    assert summary["steps"] == [
        "initialize",
        "session/new",
        "set_config_option architect",
        "approved switch to code",
        "rejected switch stays in architect",
        "unknown mode is -32602",
        "session/resume reports architect",
        "session/resume replayFrom start replays the conversation",
        "session/resume replayFrom a message replays from it",
    ]
    # 31 frames of the story; replayFrom start: its 8 conversation frames and the 2
    # agent_message updates announcing the agent's messages, idle, the answer; replayFrom
    # the second prompt's message: its 4 and 1 agent_message, idle, the answer
    assert summary["validated"] == summary["received"] == 50
    header, *records = read_log(log).records
    assert (header["event"], header["spec"]) == ("modefsm.spec", "seed")  # the file's header
    assert [
        (r["event"], r["to_mode"], r["origin"], r.get("reason"), r.get("protocol")) for r in records
    ] == [
        ("modefsm.session_created", "ask", "new", None, 2),
        ("modefsm.mode_changed", "architect", "set_config_option", None, 2),
        ("modefsm.mode_changed", "code", "switch_mode", None, 2),
        ("modefsm.mode_changed", "architect", "set_config_option", None, 2),
        ("modefsm.change_rejected", None, "switch_mode", "option_rejected", 2),
        ("modefsm.change_rejected", "does-not-exist", "set_config_option", "unknown_mode", 2),
    ]


@pytest.mark.parametrize(("transport", "checked"), [("stdio", 141), ("http", 7), ("ws", 7)])
def test_the_typescript_sdk_v2_client_checks_the_letter_of_v2(tmp_path: Path, transport, checked):
    """``tests/ts/conformance_v2.mjs``: capabilities, session/list paging, close during a
    permission, replay primers; over stdio every frame is zod-validated, over HTTP and
    WebSocket every result (the suite's frame tap validates the frames themselves)."""
    summary = run_scenario("conformance_v2.mjs", tmp_path / "log.jsonl", transport)
    assert summary == {
        "transport": transport,
        "steps": [
            "capabilities.session advertises the baseline",
            "session/list pages every session",
            "session/close during a permission ends the turn cancelled first",
            "replayFrom announces each message before its chunks",
        ],
        "listed": 105,
        # user "hi", agent_message, its chunk, user "## Plan", the switch (pending, failed)
        "replayed": 6,
        "chunks": 1,
        "validated": checked,
        "received": checked,
    }
