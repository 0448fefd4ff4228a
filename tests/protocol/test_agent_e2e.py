"""End to end: the official ACP SDK client talks to `modefsm serve` over a real stdio pipe."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import acp
import pytest

from modefsm import preset
from modefsm.protocol._sdk import HAS_V2
from tests.acp_client import cancelled, select, selecting, serve, text_block
from tests.conftest import LOCKED_TOML, announced, mode_option, mode_result, read_log
from tests.protocol.http_wire import verify

pytestmark = pytest.mark.e2e

SEED = preset("seed")
PLAN = "## Implementation Plan\n1. Write it"
SEED_OPTIONS = [
    {"optionId": "code", "name": "Yes, and auto-accept all actions", "kind": "allow_always"},
    {"optionId": "ask", "name": "Yes, and manually accept actions", "kind": "allow_once"},
    {"optionId": "reject", "name": "No, stay in architect mode", "kind": "reject_once"},
]


def notification(params: dict[str, Any]) -> dict[str, Any]:
    return {"method": "session/update", "params": params}


def tool_call(session_id: str, tool_call_id: str, **update: Any) -> dict[str, Any]:
    return notification({"sessionId": session_id, "update": {"toolCallId": tool_call_id, **update}})


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "content", "content": {"type": "text", "text": value}}]


async def in_architect(conn: Any) -> str:
    session_id: str = (await conn.new_session(cwd=".")).session_id
    await conn.set_session_mode(session_id=session_id, mode_id="architect")
    return session_id


class TestSessions:
    """session/new answers modes and configOptions, always consistent."""

    @pytest.mark.sdk_compat
    async def test_new_session_reports_both_views(self, log_path):
        async with serve(log_path) as (conn, client):
            mark = client.mark()
            response = await conn.new_session(cwd=".")
            session_id = response.session_id
            frames = client.since(mark)
        assert frames == [
            {
                "id": 1,
                "result": mode_result(SEED, "ask", sessionId=session_id),
            }
        ]

    @pytest.mark.sdk_compat
    async def test_initialize_advertises_load_session(self, log_path):
        async with serve(log_path) as (_conn, client):
            result = client.received()[0]["result"]
        assert result["agentCapabilities"] == {
            "loadSession": True,
            "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
        }


class TestClientChanges:
    """Every change is announced on both channels, exactly, before its response."""

    @pytest.mark.parametrize("name", ["seed", "permission", "sandbox"])
    async def test_every_advertised_mode_can_be_set(self, log_path, name):
        spec = preset(name)
        async with serve(log_path, "--preset", name) as (conn, client):
            for target in spec.mode_ids:
                session_id = (await conn.new_session(cwd=".")).session_id
                mark = client.mark()
                await conn.set_session_mode(session_id=session_id, mode_id=target)
                frames = client.since(mark)
                expected = (
                    []
                    if target == spec.initial
                    else [notification(n) for n in announced(spec, session_id, target)]
                )
                assert frames == [*expected, {"id": frames[-1]["id"], "result": {}}], target

    async def test_set_config_option_frames(self, log_path):
        async with serve(log_path) as (conn, client):
            session_id = (await conn.new_session(cwd=".")).session_id
            mark = client.mark()
            response = await conn.set_config_option(
                config_id="mode", session_id=session_id, value="code"
            )
            frames = client.since(mark)
        assert response.config_options[0].current_value == "code"
        assert frames == [
            *[notification(n) for n in announced(SEED, session_id, "code")],
            {"id": 2, "result": {"configOptions": [mode_option(SEED, "code")]}},
        ]


class TestErrors:
    """Client mistakes get the right JSON-RPC code, name the field, and change nothing."""

    async def _error(self, call) -> acp.RequestError:
        with pytest.raises(acp.RequestError) as info:
            await call
        return info.value

    async def test_error_codes(self, log_path):
        async with serve(log_path) as (conn, client):
            session_id = (await conn.new_session(cwd=".")).session_id
            mark = client.mark()
            unknown_mode = await self._error(
                conn.set_session_mode(session_id=session_id, mode_id="does-not-exist")
            )
            unknown_config = await self._error(
                conn.set_config_option(config_id="model", session_id=session_id, value="code")
            )
            bad_value = await self._error(
                conn.set_config_option(config_id="mode", session_id=session_id, value="nope")
            )
            boolean = await self._error(
                conn.set_config_option(config_id="mode", session_id=session_id, value=True)
            )
            unknown_session = await self._error(
                conn.set_session_mode(session_id="sess_nope", mode_id="code")
            )
            frames = client.since(mark)
        assert (unknown_mode.code, unknown_mode.data) == (
            -32602,
            {
                "field": "modeId",
                "value": "does-not-exist",
                "valid": ["ask", "architect", "code"],
                "message": str(unknown_mode),
            },
        )
        assert str(unknown_mode) == (
            "modeId: unknown mode 'does-not-exist'; available modes: 'ask', 'architect', 'code'"
        )
        assert (
            unknown_config.code,
            unknown_config.data["field"],
            unknown_config.data["valid"],
        ) == (-32602, "configId", ["mode"])
        assert (bad_value.code, bad_value.data["field"]) == (-32602, "value")
        assert (boolean.code, boolean.data["field"], boolean.data["value"]) == (
            -32602,
            "value",
            True,
        )
        assert (unknown_session.code, unknown_session.data) == (-32002, {"uri": "sess_nope"})
        assert [f for f in frames if f.get("method") == "session/update"] == []
        records = read_log(log_path)
        assert [(r["event"], r.get("reason")) for r in records[1:]] == [
            ("modefsm.change_rejected", "unknown_mode"),
            ("modefsm.change_rejected", "unknown_config_option"),
            ("modefsm.change_rejected", "unknown_mode"),
            ("modefsm.change_rejected", "invalid_value"),
        ]

    async def test_policy_refusal_is_invalid_params(self, log_path):
        async with serve(log_path, "--preset", "permission") as (conn, _client):
            session_id = (await conn.new_session(cwd=".")).session_id
            await conn.set_session_mode(session_id=session_id, mode_id="plan")
            error = await self._error(
                conn.set_session_mode(session_id=session_id, mode_id="acceptEdits")
            )
        assert (error.code, error.data["field"], error.data["valid"]) == (
            -32602,
            "modeId",
            ["default"],
        )


class TestSwitchMode:
    """The switch_mode tool call: only a selected allow option moves the mode."""

    @pytest.mark.sdk_compat
    async def test_approved_switch_frames(self, log_path):
        async with serve(log_path) as (conn, client):
            client.answer = selecting("code")
            session_id = await in_architect(conn)
            mark = client.mark()
            response = await conn.prompt(session_id=session_id, prompt=[text_block(PLAN)])
            frames = client.since(mark)
        assert response.stop_reason == "end_turn"
        call_id = frames[0]["params"]["update"]["toolCallId"]
        assert call_id.startswith("call_switch_mode_")
        pending = {
            "title": "Ready for implementation",
            "kind": "switch_mode",
            "status": "pending",
            "content": text(PLAN),
        }
        assert frames == [
            tool_call(session_id, call_id, sessionUpdate="tool_call", **pending),
            {
                "id": 0,
                "method": "session/request_permission",
                "params": {
                    "sessionId": session_id,
                    "toolCall": {"toolCallId": call_id, **pending},
                    "options": SEED_OPTIONS,
                },
            },
            *[notification(n) for n in announced(SEED, session_id, "code")],
            tool_call(
                session_id,
                call_id,
                sessionUpdate="tool_call_update",
                status="completed",
                content=text("Switched to code mode."),
            ),
            notification(
                {
                    "sessionId": session_id,
                    "update": {
                        "sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": "Approved: now in code mode."},
                    },
                }
            ),
            {"id": 3, "result": {"stopReason": "end_turn"}},
        ]
        last = read_log(log_path)[-1]
        assert (
            last["origin"],
            last["from_mode"],
            last["to_mode"],
            last["tool_call_id"],
            last["option_id"],
        ) == ("switch_mode", "architect", "code", call_id, "code")

    async def test_allow_once_moves_to_exactly_its_target(self, log_path):
        async with serve(log_path) as (conn, client):
            client.answer = selecting("ask")
            session_id = await in_architect(conn)
            await conn.prompt(session_id=session_id, prompt=[text_block(PLAN)])
            modes = [
                u["update"]["currentModeId"]
                for u in client.updates(session_id)
                if u["update"]["sessionUpdate"] == "current_mode_update"
            ]
        assert modes == ["architect", "ask"]

    @pytest.mark.parametrize(
        ("answer", "reason", "status"),
        [
            (lambda: select("reject"), "option_rejected", "failed"),
            (cancelled, "cancelled", "failed"),
            (lambda: select("bypass"), "option_not_offered", "failed"),
            (
                lambda: (_ for _ in ()).throw(acp.RequestError(-32800, "Request cancelled")),
                "cancelled",
                "failed",
            ),
        ],
        ids=["reject_option", "cancelled_outcome", "option_not_offered", "error_32800"],
    )
    async def test_no_change_without_a_selected_allow_option(
        self, log_path, answer, reason, status
    ):
        async with serve(log_path) as (conn, client):

            async def respond(options, tool_call):
                return answer()

            client.answer = respond
            session_id = await in_architect(conn)
            mark = client.mark()
            response = await conn.prompt(session_id=session_id, prompt=[text_block(PLAN)])
            frames = client.since(mark)
        assert response.stop_reason == "end_turn"
        updates = [f["params"]["update"] for f in frames if f.get("method") == "session/update"]
        assert [u["sessionUpdate"] for u in updates] == [
            "tool_call",
            "tool_call_update",
            "agent_message_chunk",
        ]
        assert updates[1]["status"] == status
        last = read_log(log_path)[-1]
        assert (last["event"], last["reason"], last["from_mode"]) == (
            "modefsm.change_rejected",
            reason,
            "architect",
        )
        assert [
            r["to_mode"] for r in read_log(log_path) if r["event"] == "modefsm.mode_changed"
        ] == ["architect"]

    async def test_set_mode_while_permission_is_pending(self, log_path):
        release = asyncio.Event()
        async with serve(log_path) as (conn, client):

            async def answer(options, tool_call):
                await release.wait()
                return select("code")

            client.answer = answer
            session_id = await in_architect(conn)
            turn = asyncio.create_task(
                conn.prompt(session_id=session_id, prompt=[text_block(PLAN)])
            )
            await asyncio.wait_for(client.pending.wait(), 10)
            await asyncio.wait_for(conn.set_session_mode(session_id=session_id, mode_id="ask"), 10)
            release.set()
            await asyncio.wait_for(turn, 10)
        changes = [
            (r["from_mode"], r["to_mode"], r["origin"], r.get("proposed_in"))
            for r in read_log(log_path)
            if r["event"] == "modefsm.mode_changed"
        ]
        assert changes == [
            ("ask", "architect", "set_mode", None),
            ("architect", "ask", "set_mode", None),
            ("ask", "code", "switch_mode", "architect"),
        ]

    async def test_stale_approval_the_policy_forbids_changes_nothing(self, log_path, tmp_path):
        spec = tmp_path / "locked.toml"
        spec.write_text(LOCKED_TOML)
        release = asyncio.Event()
        async with serve(log_path, "--spec", str(spec)) as (conn, client):

            async def answer(options, tool_call):
                await release.wait()
                return select("c")

            client.answer = answer
            session_id = (await conn.new_session(cwd=".")).session_id
            turn = asyncio.create_task(
                conn.prompt(session_id=session_id, prompt=[text_block("go")])
            )
            await asyncio.wait_for(client.pending.wait(), 10)
            await conn.set_session_mode(session_id=session_id, mode_id="b")
            release.set()
            await asyncio.wait_for(turn, 10)
            updates = client.updates(session_id)
        assert updates[-2]["update"]["status"] == "failed"
        last = read_log(log_path)[-1]
        assert (
            last["event"],
            last["reason"],
            last["from_mode"],
            last["to_mode"],
            last["proposed_in"],
        ) == ("modefsm.change_rejected", "stale_option", "b", "c", "a")

    @pytest.mark.sdk_compat
    async def test_cancel_while_pending_ends_the_turn_cancelled(self, log_path):
        async with serve(log_path) as (conn, client):

            async def answer(options, tool_call):
                await asyncio.sleep(3600)  # a client that never answers
                return select("code")

            client.answer = answer
            session_id = await in_architect(conn)
            turn = asyncio.create_task(
                conn.prompt(session_id=session_id, prompt=[text_block(PLAN)])
            )
            await asyncio.wait_for(client.pending.wait(), 10)
            await conn.cancel(session_id=session_id)
            response = await asyncio.wait_for(turn, 10)
        assert response.stop_reason == "cancelled"
        last = read_log(log_path)[-1]
        assert (last["event"], last["reason"]) == ("modefsm.change_rejected", "cancelled")

    async def test_prompt_without_a_switch_names_the_mode(self, log_path):
        async with serve(log_path) as (conn, client):
            session_id = (await conn.new_session(cwd=".")).session_id
            await conn.prompt(session_id=session_id, prompt=[text_block("hi")])
            updates = client.updates(session_id)
        assert updates == [
            {
                "sessionId": session_id,
                "update": {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": "Mode ask: hi"},
                },
            }
        ]


class TestRestore:
    """After a restart, session/load and session/resume restore the last mode from the log."""

    @pytest.mark.sdk_compat
    async def test_load_after_restart_restores_the_last_mode(self, log_path):
        async with serve(log_path) as (conn, _client):
            session_id = await in_architect(conn)
            await conn.set_config_option(config_id="mode", session_id=session_id, value="code")
        async with serve(log_path) as (conn, client):
            mark = client.mark()
            response = await conn.load_session(cwd=".", session_id=session_id)
            frames = client.since(mark)
        assert frames == [
            {
                "id": 1,
                "result": mode_result(SEED, "code"),
            }
        ]
        assert response.modes.current_mode_id == "code"

    async def test_non_restorable_mode_falls_back(self, log_path):
        spec = preset("permission")
        async with serve(log_path, "--preset", "permission") as (conn, _client):
            session_id = (await conn.new_session(cwd=".")).session_id
            await conn.set_session_mode(session_id=session_id, mode_id="bypassPermissions")
        async with serve(log_path, "--preset", "permission") as (conn, client):
            mark = client.mark()
            response = await conn.resume_session(cwd=".", session_id=session_id)
            frames = client.since(mark)
        assert response.modes.current_mode_id == "default"
        assert response.config_options[0].current_value == "default"
        assert frames[:2] == [notification(n) for n in announced(spec, session_id, "default")]
        last = read_log(log_path)[-1]
        assert (last["origin"], last["seq"], last["from_mode"], last["to_mode"]) == (
            "restore",
            3,
            "bypassPermissions",
            "default",
        )

    async def test_load_of_an_unknown_session(self, log_path):
        async with serve(log_path) as (conn, _client):
            with pytest.raises(acp.RequestError) as info:
                await conn.load_session(cwd=".", session_id="sess_never")
        assert (info.value.code, info.value.data) == (-32002, {"uri": "sess_never"})

    async def test_changes_continue_the_sequence_after_a_restart(self, log_path):
        async with serve(log_path) as (conn, _client):
            session_id = (await conn.new_session(cwd=".")).session_id
            await conn.set_session_mode(session_id=session_id, mode_id="code")
        async with serve(log_path) as (conn, _client):
            await conn.load_session(cwd=".", session_id=session_id)
            await conn.set_session_mode(session_id=session_id, mode_id="ask")
        assert [(r["seq"], r["to_mode"]) for r in read_log(log_path)] == [
            (1, "ask"),
            (2, "code"),
            (3, "ask"),
        ]


DEMO_TOOL_CALLS = [
    ("session_created", "default", None),
    ("mode_changed", "plan", None),
    ("tool_decided", "plan", ("edit", 0, "deny", None)),
    ("mode_changed", "default", None),
    ("tool_decided", "default", ("edit", 1, "ask", "allow_once")),
    ("mode_changed", "acceptEdits", None),
    ("tool_decided", "acceptEdits", ("edit", 0, "allow", None)),
    ("mode_changed", "default", None),
    ("mode_changed", "acceptEdits", None),  # while `run make` is asked
    ("tool_decided", "acceptEdits", ("execute", 1, "ask", "allow_once")),
    ("tool_decided", "acceptEdits", ("edit", 0, "allow", None)),
]
"""The demo's tool-call act, as its records say: (event, mode, (kind, rule, decision, outcome))."""


def demo_tool_calls(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (
            r["event"].removeprefix("modefsm."),
            r.get("to_mode", r.get("mode")),
            (r["kind"], r["rule"], r["decision"], r["outcome"])
            if r["event"] == "modefsm.tool_decided"
            else None,
        )
        for r in records
    ]


DEMO_AGENT_STARTS = {"initialize": 1, "restart": 1, "second agent": 1}
"""Each agent process the demo starts is initialized under the heading that announces it."""


def initialize_frames_per_section(transcript: str) -> dict[str, int]:
    """The demo transcript's ``initialize`` requests, counted under each heading that has one."""
    counts: dict[str, int] = {}
    for section in transcript.split("\n== ")[1:]:
        heading = section.split("\n", 1)[0]
        found = section.count('"method":"initialize"')
        if found:
            name = next((key for key in DEMO_AGENT_STARTS if key in heading.split(":")[0]), heading)
            counts[name] = counts.get(name, 0) + found
    return counts


class TestCommands:
    """`modefsm demo` runs the whole story; `modefsm serve` keeps stdout for ACP."""

    @pytest.mark.sdk_compat
    def test_demo_exits_zero_and_writes_the_log(self, tmp_path: Path):
        log = tmp_path / "demo.jsonl"
        result = subprocess.run(
            [sys.executable, "-m", "modefsm", "demo", "--log", str(log)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert "modes visited: ask -> architect -> code -> architect -> code" in result.stdout
        assert initialize_frames_per_section(result.stdout) == DEMO_AGENT_STARTS
        session_id = read_log(log)[0]["session_id"]
        assert f"transition log: {log} ({session_id}: 5 records, 2 rejected)" in result.stdout
        python = Path(sys.executable).name
        assert (
            f"  replay it: {python} -m modefsm replay {log}\n"
            == result.stdout.splitlines(keepends=True)[-1]
        )
        records = read_log(log)
        assert [
            (r["event"], r["to_mode"], r["origin"], r.get("reason"))
            for r in records
            if r["session_id"] == session_id
        ] == [
            ("modefsm.session_created", "ask", "new", None),
            ("modefsm.mode_changed", "architect", "set_mode", None),
            ("modefsm.mode_changed", "code", "switch_mode", None),
            ("modefsm.mode_changed", "architect", "set_mode", None),
            ("modefsm.change_rejected", None, "switch_mode", "option_rejected"),
            ("modefsm.change_rejected", "does-not-exist", "set_mode", "unknown_mode"),
            ("modefsm.mode_changed", "code", "set_config_option", None),
        ]
        tools = records[7]["session_id"]
        assert f"tool calls decided by the mode: 5 (session {tools})" in result.stdout
        assert [r for r in records[7:] if r["session_id"] != tools] == []
        assert demo_tool_calls(records[7:]) == DEMO_TOOL_CALLS
        assert verify(log) == "RESULT  clean"

    @pytest.mark.sdk_compat
    def test_demo_json_prints_only_frames(self, tmp_path: Path):
        import json

        result = subprocess.run(
            [sys.executable, "-m", "modefsm", "demo", "--json", "--log", str(tmp_path / "l")],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        assert all(sorted(line) == ["dir", "frame"] for line in lines)
        frames = [line["frame"] for line in lines]
        assert all(f["jsonrpc"] == "2.0" for f in frames)
        assert frames[0] == {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            # the SDK 1.0 client sends its default capabilities; 0.12's sends none
            "params": {"protocolVersion": 1, "clientCapabilities": {"fs": {}, "auth": {}}}
            if HAS_V2
            else {"protocolVersion": 1},
        }
        # requests and notifications of the client, answers of the agent, and the
        # agent's permission request and its answer the other way
        assert [
            ("client->agent", 0, "initialize"),
            ("agent->client", 0, None),
            ("client->agent", 1, "session/new"),
            ("agent->client", 1, None),
        ] == [
            (line["dir"], line["frame"].get("id"), line["frame"].get("method"))
            for line in lines[:4]
        ]
        permission = next(
            n for n, f in enumerate(frames) if f.get("method") == "session/request_permission"
        )
        assert "agent->client" == lines[permission]["dir"]
        answer = next(
            line
            for line in lines[permission + 1 :]
            if line["frame"].get("id") == frames[permission]["id"] and "result" in line["frame"]
        )
        assert "client->agent" == answer["dir"]

    def test_the_replay_hint_names_the_command_as_it_was_run(self, tmp_path: Path):
        program = Path(sys.executable).parent / "modefsm"
        typed = os.path.relpath(program, tmp_path)
        log = tmp_path / "demo.jsonl"
        result = subprocess.run(
            [typed, "demo", "--log", str(log)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        assert f"  replay it: {typed} replay {log}\n" == result.stdout.splitlines(keepends=True)[-1]

    def test_serve_without_log_writes_records_to_stderr(self):
        request = (
            b'{"jsonrpc":"2.0","id":0,"method":"session/new",'
            b'"params":{"cwd":".","mcpServers":[]}}\n'
        )
        result = subprocess.run(
            [sys.executable, "-m", "modefsm", "serve"],
            input=request,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0
        import json

        out = [json.loads(line) for line in result.stdout.splitlines()]
        err = [json.loads(line) for line in result.stderr.splitlines()]
        assert len(out) == 1
        assert out[0]["result"]["modes"]["currentModeId"] == "ask"
        assert [e["event"] for e in err] == ["modefsm.spec", "modefsm.session_created"]
        assert err[1]["session_id"] == out[0]["result"]["sessionId"]

    def test_serve_answers_every_request_read_before_the_end_of_input(self, tmp_path: Path):
        import json

        requests = [
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}},
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "session/new",
                "params": {"cwd": ".", "mcpServers": []},
            },
            {"jsonrpc": "2.0", "id": "x", "method": "session/set_mode", "params": {}},
            {"jsonrpc": "2.0", "id": 3, "method": "no/such_method", "params": {}},
        ]
        result = subprocess.run(
            [sys.executable, "-m", "modefsm", "serve", "--log", str(tmp_path / "log.jsonl")],
            input=b"".join(json.dumps(r).encode() + b"\n" for r in requests),
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        out = [json.loads(line) for line in result.stdout.splitlines()]
        assert sorted(str(frame["id"]) for frame in out) == ["0", "1", "3", "x"]
        by_id = {frame["id"]: frame for frame in out}
        assert by_id[0]["result"]["protocolVersion"] == 1
        assert by_id[1]["result"]["modes"]["currentModeId"] == "ask"
        assert by_id["x"]["error"]["code"] == -32602
        assert by_id[3]["error"]["code"] == -32601

    def test_serve_with_a_bad_spec_prints_one_line(self, tmp_path: Path):
        spec = tmp_path / "bad.toml"
        spec.write_text('name = "x"\ninitial = "nope"\n[[modes]]\nid = "a"\nname = "A"\n')
        result = subprocess.run(
            [sys.executable, "-m", "modefsm", "serve", "--spec", str(spec)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2
        assert result.stderr == (
            f"modefsm serve: {spec}: invalid mode spec (1 problem): "
            f'initial: mode "nope" is not in modes (a)\n'
        )
        assert result.stdout == ""
