"""Every program in ``examples/`` runs, and says exactly what it should.

Agents are driven by the official SDK client over real pipes (and streamable HTTP for
``serve_http_token.py``); the others run as scripts.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import acp
import orjson
import pytest

from tests.acp_client import TestClient, select, selecting, text_block
from tests.protocol.http_wire import TIMEOUT, verify

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

pytestmark = pytest.mark.e2e


def _run(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_every_example_is_tested():
    tested = {"embedded_agent.py", "engine_only.py", "host_config_option.py", "read_log.py"}
    tested |= {"serve_http_token.py", "pydantic_ai_agent.py"}
    assert tested == {path.name for path in EXAMPLES.glob("*.py")}


USAGE = {
    "embedded_agent.py": "LOG",
    "engine_only.py": "LOG",
    "host_config_option.py": "STORE",
    "pydantic_ai_agent.py": "LOG WORKSPACE",
    "read_log.py": "LOG...",
    "serve_http_token.py": "LOG TOKEN_FILE",
}


@pytest.mark.parametrize("name", sorted(USAGE))
def test_an_example_without_its_arguments_says_its_usage(name: str, tmp_path: Path):
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert (1, "", f"usage: python examples/{name} {USAGE[name]}\n") == (
        done.returncode,
        done.stdout,
        done.stderr,
    )
    assert [] == list(tmp_path.iterdir())


@pytest.mark.sdk_compat
def test_engine_only(tmp_path: Path):
    done = _run("engine_only.py", str(tmp_path / "modes.jsonl"))
    assert (0, "") == (done.returncode, done.stderr)
    assert (
        "new session in ask\n"
        "set_mode -> architect\n"
        "Ready for implementation: code=code, ask=ask, reject=None\n"
        "settled code: approved=True -> code\n"
        "refused: modeId: unknown mode 'nowhere'; available modes: 'ask', 'architect', "
        "'code'\n"
    ) == done.stdout


def test_read_log_of_the_engine_example_then_of_an_edited_copy(tmp_path: Path):
    log = tmp_path / "modes.jsonl"
    assert 0 == _run("engine_only.py", str(log)).returncode
    done = _run("read_log.py", str(log))
    assert (0, "") == (done.returncode, done.stderr)
    assert (
        "sess_1: ask -> architect -> code (now code, seq 3)\n"
        "chain: 4 records verified\n"
        "exit status: 0\n"
    ) == done.stdout
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(log.read_bytes().replace(b'"to_mode":"code"', b'"to_mode":"ask"'))
    done = _run("read_log.py", str(edited))
    assert 1 == done.returncode
    assert [
        "sess_1: ask -> architect -> ask (now ask, seq 3)",
        (
            f"violation: {edited}:4: session 'sess_1' seq 3: tampered: the record was changed "
            "after it was written: its digest does not match"
        ),
    ] == done.stdout.splitlines()[:2]


async def _spawn(name: str, log: Path, client: TestClient) -> Any:
    return acp.spawn_agent_process(
        client,  # type: ignore[arg-type]
        sys.executable,
        str(EXAMPLES / name),
        str(log),
        transport_kwargs={"stderr": None, "shutdown_timeout": 30.0},
        observers=[client.observe],
    )


@pytest.mark.sdk_compat
async def test_embedded_agent_switches_when_the_user_approves(tmp_path: Path):
    client = TestClient()

    client.answer = selecting("code")
    log = tmp_path / "modes.jsonl"
    async with await _spawn("embedded_agent.py", log, client) as (conn, _process):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session_id = (await conn.new_session(cwd="/")).session_id
        first = await conn.prompt(session_id=session_id, prompt=[text_block("hi")])
        await conn.set_session_mode(session_id=session_id, mode_id="architect")
        second = await conn.prompt(session_id=session_id, prompt=[text_block("go")])
    assert ("end_turn", "end_turn") == (first.stop_reason, second.stop_reason)
    texts = [
        u["update"]["content"]["text"]
        for u in client.updates(session_id)
        if u["update"]["sessionUpdate"] == "agent_message_chunk"
    ]
    assert ["working in ask mode", "switched to code"] == texts
    _header, *records = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    assert [("new", "ask"), ("set_mode", "architect"), ("switch_mode", "code")] == [
        (r["origin"], r["to_mode"]) for r in records
    ]


@pytest.mark.sdk_compat
async def test_host_config_option_rides_along_with_the_mode(tmp_path: Path):
    client = TestClient()
    async with await _spawn("host_config_option.py", tmp_path / "l.jsonl", client) as (conn, _):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        created = await conn.new_session(cwd="/")
        session_id = created.session_id
        model = await conn.set_config_option(
            config_id="model", session_id=session_id, value="smart"
        )
        mode = await conn.set_config_option(config_id="mode", session_id=session_id, value="code")
        with pytest.raises(acp.RequestError) as refused:
            await conn.set_config_option(config_id="model", session_id=session_id, value="huge")

    def current(options: Any) -> list[tuple[str, str]]:
        return [(o.id, o.current_value) for o in options]

    assert [("mode", "ask"), ("model", "fast")] == current(created.config_options)
    assert [("mode", "ask"), ("model", "smart")] == current(model.config_options)
    assert [("mode", "code"), ("model", "smart")] == current(mode.config_options)
    assert (
        -32602,
        {
            "field": "value",
            "value": "huge",
            "valid": ["fast", "smart"],
            "message": "value: expected a value of config option 'model', got 'huge'; "
            "valid values: 'fast', 'smart'",
        },
    ) == (refused.value.code, refused.value.data)
    updates = [
        [(o["id"], o["currentValue"]) for o in u["update"]["configOptions"]]
        for u in client.updates(session_id)
        if u["update"]["sessionUpdate"] == "config_option_update"
    ]
    assert [[("mode", "ask"), ("model", "smart")], [("mode", "code"), ("model", "smart")]] == (
        updates
    )


async def test_serve_http_with_its_token(tmp_path: Path):
    from tests.protocol.http_wire import Served, v1_client

    log, token_file = tmp_path / "modes.jsonl", tmp_path / "token"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLES / "serve_http_token.py"),
        str(log),
        str(token_file),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), TIMEOUT)
        url = Served(line.decode().strip(), str(token_file))
        assert 0o600 == token_file.stat().st_mode & 0o777
        async with v1_client(url, "http") as (conn, _client):
            session_id = (await conn.new_session(cwd="/", mcp_servers=[])).session_id
            await conn.set_session_mode(session_id=session_id, mode_id="code")
        no_token = Served(str(url), None)
        with pytest.raises(BaseException):  # noqa: PT011, B017 - the SDK's error for a 401
            async with v1_client(no_token, "http"):
                pass
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), TIMEOUT)
    assert (0, b"") == (process.returncode, err)
    _header, *records = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    assert [("new", "ask"), ("set_mode", "code")] == [(r["origin"], r["to_mode"]) for r in records]


async def test_pydantic_ai_agent_runs_each_tool_only_as_the_mode_decides(tmp_path: Path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    notes = workspace / "notes.txt"
    notes.write_text("hello", encoding="utf-8")
    log = tmp_path / "modes.jsonl"
    client = TestClient()
    answers = ["allow_once", "reject_once"]

    async def answer(options: Any, tool_call: Any) -> Any:
        return select(answers.pop(0))

    client.answer = answer
    async with acp.spawn_agent_process(
        client,  # type: ignore[arg-type]
        sys.executable,
        str(EXAMPLES / "pydantic_ai_agent.py"),
        str(log),
        str(workspace),
        transport_kwargs={"stderr": None, "shutdown_timeout": 30.0},
        observers=[client.observe],
    ) as (conn, _process):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session_id = (await conn.new_session(cwd="/")).session_id
        await conn.set_session_mode(session_id=session_id, mode_id="plan")
        plan = client.mark()
        await conn.prompt(
            session_id=session_id, prompt=[text_block("read notes.txt\nwrite notes.txt changed")]
        )
        after_plan = notes.read_text(encoding="utf-8")
        await conn.set_session_mode(session_id=session_id, mode_id="default")
        asked = client.mark()
        await conn.prompt(session_id=session_id, prompt=[text_block("write notes.txt changed")])
        after_allow = notes.read_text(encoding="utf-8")
        await conn.prompt(session_id=session_id, prompt=[text_block("write notes.txt again")])

    def update(body: dict[str, Any]) -> dict[str, Any]:
        return {"method": "session/update", "params": {"sessionId": session_id, "update": body}}

    def content(value: str) -> list[dict[str, Any]]:
        return [{"type": "content", "content": {"type": "text", "text": value}}]

    # the plan turn, whole: the read runs; the write fails with the rule's reason
    updates = [f for f in client.since(plan) if f.get("method") == "session/update"][:6]
    read_id, write_id = (u["params"]["update"]["toolCallId"] for u in updates[0:4:3])
    denied = "Plan mode: no edits and no commands"
    assert updates == [
        update({"sessionUpdate": "tool_call", "toolCallId": read_id, "title": "Read notes.txt",
                "kind": "read", "status": "pending"}),
        update({"sessionUpdate": "tool_call_update", "toolCallId": read_id,
                "status": "in_progress"}),
        update({"sessionUpdate": "tool_call_update", "toolCallId": read_id, "status": "completed",
                "content": content("hello")}),
        update({"sessionUpdate": "tool_call", "toolCallId": write_id, "title": "Write notes.txt",
                "kind": "edit", "status": "pending"}),
        update({"sessionUpdate": "tool_call_update", "toolCallId": write_id, "status": "failed",
                "content": content(denied)}),
        update({"sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": f"read_file: hello\nwrite_file: {denied}"}}),
    ]  # fmt: skip
    assert ("hello", "changed", "changed") == (
        after_plan,
        after_allow,
        notes.read_text(encoding="utf-8"),
    )
    requests = [f for f in client.since(asked) if f.get("method") == "session/request_permission"]
    assert [(r["params"]["toolCall"]["title"], [o["optionId"] for o in r["params"]["options"]])
            for r in requests] == [
        ("Write notes.txt", ["allow_once", "allow_always", "reject_once"]),
        ("Write notes.txt", ["allow_once", "allow_always", "reject_once"]),
    ]  # fmt: skip
    messages = [
        u["update"]["content"]["text"]
        for u in client.updates(session_id)
        if u["update"]["sessionUpdate"] == "agent_message_chunk"
    ]
    assert messages == [
        f"read_file: hello\nwrite_file: {denied}",
        "write_file: wrote 7 characters to notes.txt",
        "write_file: Rejected by the user.",
    ]
    records = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    assert [
        (r["kind"], r["tool"], r["decision"], r["outcome"], r["mode"])
        for r in records
        if r["event"] == "modefsm.tool_decided"
    ] == [
        ("read", "read_file", "allow", None, "plan"),
        ("edit", "write_file", "deny", None, "plan"),
        ("edit", "write_file", "ask", "allow_once", "default"),
        ("edit", "write_file", "ask", "reject_once", "default"),
    ]
    assert verify(log) == "RESULT  clean"
