"""ACP v2 end to end: `modefsm serve` over a real stdio pipe, exact frames.

A raw NDJSON client writes the requests and reads every frame back, so each frame is
compared whole (ids minted by the agent -- sessionId, toolCallId, messageId -- are read
from the frames that introduce them). The official SDK v2 and v1 clients drive the same
binary in :class:`TestOfficialClients`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from modefsm import preset
from tests.acp_client import end_agent, start_serve
from tests.conftest import read_log
from tests.protocol.test_agent_e2e import (
    DEMO_AGENT_STARTS,
    DEMO_TOOL_CALLS,
    demo_tool_calls,
    initialize_frames_per_section,
)
from tests.protocol.v2_frames import Frames, option_v2, text

pytestmark = pytest.mark.e2e

SEED = preset("seed")
TIMEOUT = 30


FRAMES = Frames(jsonrpc=True)
update, options_update, state = FRAMES.update, FRAMES.options_update, FRAMES.state


class Wire:
    """A raw NDJSON client of one `modefsm serve` process."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.next_id = 0

    async def send(self, frame: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(frame).encode() + b"\n")
        await self.process.stdin.drain()

    async def request(self, method: str, params: dict[str, Any]) -> int:
        self.next_id += 1
        await self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return self.next_id

    async def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), TIMEOUT)
        assert line, "the agent closed stdout"
        frame: dict[str, Any] = json.loads(line)
        return frame

    async def until_answer(self, request_id: int) -> list[dict[str, Any]]:
        """Every frame up to and including the answer to *request_id*."""
        frames = [await self.read()]
        while not ("method" not in frames[-1] and frames[-1].get("id") == request_id):
            frames.append(await self.read())
        return frames

    async def call(self, method: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        return await self.until_answer(await self.request(method, params))

    async def new_session(self) -> str:
        frames = await self.call("session/new", {"cwd": "/", "mcpServers": []})
        session_id: str = frames[-1]["result"]["sessionId"]
        return session_id

    async def set_mode(self, session_id: str, value: str) -> list[dict[str, Any]]:
        params = {"sessionId": session_id, "configId": "mode", "type": "id", "value": value}
        return await self.call("session/set_config_option", params)


@contextlib.asynccontextmanager
async def serve(log: Path, *args: str, version: int | None = 2) -> AsyncIterator[Wire]:
    """`modefsm serve --log LOG`, initialized with *version* (``None``: not initialized)."""
    process = await start_serve(log, *args)
    wire = Wire(process)
    try:
        if version == 2:
            info = {"name": "wire", "version": "0"}
            await wire.call("initialize", {"protocolVersion": 2, "info": info})
        elif version == 1:
            await wire.call("initialize", {"protocolVersion": 1})
        yield wire
    finally:
        await end_agent(process)


def changes(log: Path) -> list[tuple[Any, ...]]:
    return [
        (
            r["event"].removeprefix("modefsm."),
            r["from_mode"],
            r["to_mode"],
            r["origin"],
            r.get("reason"),
            r.get("protocol"),
        )
        for r in read_log(log)
    ]


class TestNegotiation:
    async def test_version_0_is_minus_32022_and_the_client_may_try_again(self, log_path):
        async with serve(log_path, version=None) as wire:
            frames = await wire.call("initialize", {"protocolVersion": 0})
            assert frames == [
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "error": {
                        "code": -32022,
                        "message": "protocolVersion: 0 is not supported",
                        "data": {"requested": 0, "supported": [1, 2]},
                    },
                }
            ]
            frames = await wire.call(
                "initialize", {"protocolVersion": 3, "info": {"name": "w", "version": "0"}}
            )
            assert frames[0]["result"]["protocolVersion"] == 2
            assert set(frames[0]["result"]) == {"protocolVersion", "info", "capabilities"}
            assert frames[0]["result"]["info"]["name"] == "modefsm"

    async def test_protocol_1_serves_a_v2_client_as_v1(self, log_path):
        async with serve(log_path, "--protocol", "1", version=None) as wire:
            frames = await wire.call(
                "initialize", {"protocolVersion": 2, "info": {"name": "w", "version": "0"}}
            )
            assert frames[0]["result"]["protocolVersion"] == 1
            assert frames[0]["result"]["agentCapabilities"]["loadSession"] is True

    async def test_protocol_2_refuses_a_v1_client_with_minus_32022(self, log_path):
        async with serve(log_path, "--protocol", "2", version=None) as wire:
            frames = await wire.call("initialize", {"protocolVersion": 1})
            assert frames[0]["error"]["code"] == -32022
            assert frames[0]["error"]["data"] == {"requested": 1, "supported": [2]}


class TestConfigOption:
    async def test_new_session_has_only_the_mode_option(self, log_path):
        async with serve(log_path) as wire:
            frames = await wire.call("session/new", {"cwd": "/", "mcpServers": []})
        session_id = frames[0]["result"]["sessionId"]
        assert frames == [
            {
                "jsonrpc": "2.0",
                "id": 2,
                "result": {"sessionId": session_id, "configOptions": [option_v2("ask")]},
            }
        ]

    async def test_set_announces_then_answers_the_complete_list(self, log_path):
        async with serve(log_path) as wire:
            session_id = await wire.new_session()
            frames = await wire.set_mode(session_id, "code")
        assert frames == [
            options_update(session_id, "code"),
            {"jsonrpc": "2.0", "id": 3, "result": {"configOptions": [option_v2("code")]}},
        ]
        assert changes(log_path)[-1] == (
            "mode_changed",
            "ask",
            "code",
            "set_config_option",
            None,
            2,
        )

    async def test_a_bad_request_is_minus_32602_naming_the_field_and_changes_nothing(
        self, log_path
    ):
        cases: list[tuple[dict[str, Any], str]] = [
            ({"configId": "model", "type": "id", "value": "code"}, "configId"),
            ({"configId": "mode", "value": "code"}, "type"),
            ({"configId": "mode", "type": "boolean", "value": "code"}, "type"),
            ({"configId": "mode", "type": "boolean", "value": True}, "type"),
            ({"configId": "mode", "type": "_other", "value": "code"}, "type"),
            ({"configId": "mode", "type": "id", "value": "nope"}, "value"),
        ]
        async with serve(log_path) as wire:  # one agent for every case: fewer start-ups
            session_id = await wire.new_session()
            for params, field in cases:
                frames = await wire.call(
                    "session/set_config_option", {"sessionId": session_id, **params}
                )
                assert len(frames) == 1, params
                assert frames[0]["error"]["code"] == -32602, params
                assert frames[0]["error"]["data"]["field"] == field, params
            after = await wire.call("session/resume", {"sessionId": session_id, "cwd": "/"})
        assert after[-1]["result"] == {"configOptions": [option_v2("ask")]}
        assert all(c[0] != "mode_changed" for c in changes(log_path))

    async def test_no_set_mode_and_no_load_in_v2(self, log_path):
        async with serve(log_path) as wire:
            session_id = await wire.new_session()
            set_mode = await wire.call(
                "session/set_mode", {"sessionId": session_id, "modeId": "code"}
            )
            load = await wire.call(
                "session/load", {"sessionId": session_id, "cwd": "/", "mcpServers": []}
            )
        assert set_mode[0]["error"]["code"] == -32601
        assert load[0]["error"]["code"] == -32601

    async def test_unknown_session(self, log_path):
        async with serve(log_path) as wire:
            frames = await wire.call("session/resume", {"sessionId": "nope", "cwd": "/"})
            close = await wire.call("session/close", {"sessionId": "nope"})
        assert frames[0]["error"] == {
            "code": -32002,
            "message": "sessionId: nope",
            "data": {"sessionId": "nope"},
        }
        assert close == [{"jsonrpc": "2.0", "id": 3, "result": {}}]


async def switch_asked(
    wire: Wire, session_id: str, plan: str = "go"
) -> tuple[int, list[Any], str, str]:
    """Send a prompt of *plan* in architect mode; check the frames up to the switch's
    permission request, whole. Returns the prompt's id, those frames, the ``messageId``
    and the ``toolCallId``."""
    prompt_id = await wire.request(
        "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": plan}]}
    )
    frames = [await wire.read()]
    while frames[-1].get("method") != "session/request_permission":
        frames.append(await wire.read())
    message_id = frames[0]["params"]["update"]["messageId"]
    call = frames[2]["params"]["update"]["toolCallId"]
    assert frames == FRAMES.switch_asked(session_id, message_id, call, frames[4]["id"], plan)
    return prompt_id, frames, message_id, call


class TestSwitch:
    async def test_approved_switch(self, log_path):
        async with serve(log_path) as wire:
            session_id = await wire.new_session()
            await wire.set_mode(session_id, "architect")
            prompt_id, frames, message_id, call = await switch_asked(wire, session_id)
            await wire.send(
                {
                    "jsonrpc": "2.0",
                    "id": frames[-1]["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": "code"}},
                }
            )
            rest = await wire.until_answer(prompt_id)
        reply = rest[3]["params"]["update"]["messageId"]
        assert rest == [
            state(session_id, "running"),
            options_update(session_id, "code"),
            update(
                session_id,
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": call,
                    "status": "completed",
                    "content": text("Switched to code mode."),
                },
            ),
            update(
                session_id,
                {
                    "sessionUpdate": "agent_message_chunk",
                    "messageId": reply,
                    "content": {"type": "text", "text": "Approved: now in code mode."},
                },
            ),
            state(session_id, "idle", stopReason="end_turn"),
            {"jsonrpc": "2.0", "id": prompt_id, "result": {"messageId": message_id}},
        ]
        assert changes(log_path)[-1] == (
            "mode_changed",
            "architect",
            "code",
            "switch_mode",
            None,
            2,
        )

    async def test_anything_but_an_offered_allow_option_changes_nothing(self, log_path):
        cases = [
            (
                {"outcome": {"outcome": "selected", "optionId": "reject"}},
                "option_rejected",
                "Declined: staying in architect mode.",
            ),
            (
                {"outcome": {"outcome": "cancelled"}},
                "cancelled",
                "Cancelled: staying in architect mode.",
            ),
            (
                {"outcome": {"outcome": "dismissed_by_policy"}},
                "cancelled",
                "Cancelled: staying in architect mode.",
            ),
            (
                {"outcome": {"outcome": "selected", "optionId": "architect"}},
                "option_not_offered",
                "Refused: the answer selected an option that was not offered.",
            ),
        ]
        async with serve(log_path) as wire:  # one agent, one session: each stays in architect
            session_id = await wire.new_session()
            await wire.set_mode(session_id, "architect")
            for answer, _reason, shown in cases:
                prompt_id, frames, _message_id, call = await switch_asked(wire, session_id)
                await wire.send({"jsonrpc": "2.0", "id": frames[-1]["id"], "result": answer})
                rest = await wire.until_answer(prompt_id)
                assert rest[:2] == [
                    state(session_id, "running"),
                    update(
                        session_id,
                        {
                            "sessionUpdate": "tool_call_update",
                            "toolCallId": call,
                            "status": "failed",
                            "content": text(shown),
                        },
                    ),
                ], answer
                assert rest[-2] == state(session_id, "idle", stopReason="end_turn"), answer
                assert all(
                    f["params"]["update"]["sessionUpdate"] != "config_option_update"
                    for f in rest[:-1]
                ), answer
        assert changes(log_path)[-len(cases) :] == [
            ("change_rejected", "architect", None, "switch_mode", reason, 2)
            for _answer, reason, _shown in cases
        ]

    async def test_a_change_while_the_permission_is_pending(self, log_path):
        async with serve(log_path) as wire:
            session_id = await wire.new_session()
            await wire.set_mode(session_id, "architect")
            prompt_id, frames, _message_id, _call = await switch_asked(wire, session_id)
            assert await wire.set_mode(session_id, "ask") == [
                options_update(session_id, "ask"),
                {"jsonrpc": "2.0", "id": 5, "result": {"configOptions": [option_v2("ask")]}},
            ]
            await wire.send(
                {
                    "jsonrpc": "2.0",
                    "id": frames[-1]["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": "code"}},
                }
            )
            rest = await wire.until_answer(prompt_id)
        # a stale approval applies the target its option showed (ask may reach code)
        assert options_update(session_id, "code") in rest
        assert changes(log_path)[-1][:4] == ("mode_changed", "ask", "code", "switch_mode")

    async def test_cancel_request_of_the_turn_ends_the_switch_failed(self, log_path):
        async with serve(log_path) as wire:
            session_id = await wire.new_session()
            await wire.set_mode(session_id, "architect")
            prompt_id, frames, _message_id, call = await switch_asked(wire, session_id)
            await wire.send(
                {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": prompt_id}}
            )
            rest = await wire.until_answer(prompt_id)
            await wire.send(
                {
                    "jsonrpc": "2.0",
                    "id": frames[-1]["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": "code"}},
                }
            )
            after = await wire.call("session/resume", {"sessionId": session_id, "cwd": "/"})
        permission_id = frames[-1]["id"]
        assert {
            "jsonrpc": "2.0",
            "method": "$/cancel_request",
            "params": {"requestId": permission_id},
        } in rest
        assert [f for f in rest if f.get("method") == "session/update"] == [
            state(session_id, "running"),
            update(
                session_id,
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": call,
                    "status": "failed",
                    "content": text("Cancelled: staying in architect mode."),
                },
            ),
            state(session_id, "idle", stopReason="cancelled"),
        ]
        assert rest[-1]["error"]["code"] == -32800
        assert after[-1]["result"] == {"configOptions": [option_v2("architect")]}
        log = changes(log_path)
        assert ("change_rejected", "architect", None, "switch_mode", "cancelled", 2) in log
        assert log[-1][:5] == ("change_rejected", "architect", None, "switch_mode", "late_answer")


class TestRestartAndResume:
    async def test_v1_session_resumed_over_v2_and_back(self, log_path):
        async with serve(log_path, version=1) as wire:
            session_id = await wire.new_session()
            await wire.call("session/set_mode", {"sessionId": session_id, "modeId": "code"})
        async with serve(log_path) as wire:
            frames = await wire.call("session/resume", {"sessionId": session_id, "cwd": "/"})
            assert frames == [
                state(session_id, "idle"),
                {"jsonrpc": "2.0", "id": 2, "result": {"configOptions": [option_v2("code")]}},
            ]
            await wire.set_mode(session_id, "architect")
        async with serve(log_path, version=1) as wire:
            frames = await wire.call(
                "session/load", {"sessionId": session_id, "cwd": "/", "mcpServers": []}
            )
        assert frames[-1]["result"]["modes"]["currentModeId"] == "architect"
        assert [c[5] for c in changes(log_path)] == [None, None, 2]

    @pytest.mark.parametrize("replay", [5, {"type": "bogus"}, {"type": "start", "x": 1}])
    async def test_a_malformed_replay_from_is_minus_32602(self, log_path, replay):
        async with serve(log_path) as wire:
            session_id = await wire.new_session()
            frames = await wire.call(
                "session/resume", {"sessionId": session_id, "cwd": "/", "replayFrom": replay}
            )
        assert frames[0]["error"]["code"] == -32602
        assert frames[0]["error"]["data"]["field"] == "replayFrom"


class _V2Client:
    """The official SDK's v2 client side: records updates, answers permission requests."""

    def __init__(self, option_id: str | None) -> None:
        self.option_id = option_id
        self.updates: list[dict[str, Any]] = []
        self.asked: list[dict[str, Any]] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update.model_dump(mode="json", by_alias=True, exclude_none=True))

    async def request_permission(
        self, session_id: str, title: str, options: list[Any], subject: Any = None, **kwargs: Any
    ) -> Any:
        from acp.experimental.v2 import schema as s2

        self.asked.append({"title": title, "options": [o.option_id for o in options]})
        if self.option_id is None:
            return s2.RequestPermissionResponse(outcome=s2.CancelledPermissionOutcome())
        return s2.RequestPermissionResponse(
            outcome=s2.SelectedPermissionOutcomeVariant(option_id=self.option_id)
        )


class TestOfficialClients:
    """The SDK's v2 client and v1 client against the same `modefsm serve` and log."""

    async def test_v2_client_story_then_v1_client_loads_the_mode(self, log_path):
        from acp import RequestError
        from acp.experimental import v2
        from acp.experimental.v2 import schema as s2

        from tests.acp_client import serve as serve_v1

        client = _V2Client("code")
        process = await start_serve(log_path)
        assert process.stdin is not None
        assert process.stdout is not None
        conn = v2.connect_to_agent(client, process.stdin, process.stdout)
        init = await asyncio.wait_for(
            conn.initialize(protocol_version=2, info=s2.Implementation(name="t", version="0")),
            TIMEOUT,
        )
        assert init.protocol_version == 2
        session_id = (await conn.new_session(cwd="/")).session_id
        with pytest.raises(RequestError) as bad:
            await conn.set_config_option(
                config_id="model", session_id=session_id, value="code", type="id"
            )
        assert (bad.value.code, bad.value.data["field"]) == (-32602, "configId")
        answer = await conn.set_config_option(
            config_id="mode", session_id=session_id, value="architect", type="id"
        )
        assert answer.model_dump(mode="json", by_alias=True, exclude_none=True) == {
            "configOptions": [option_v2("architect")]
        }
        prompt = await conn.prompt(session_id=session_id, prompt=[s2.TextContentBlock(text="go")])
        assert prompt.message_id.startswith("msg_")
        assert client.asked == [
            {"title": "Ready for implementation", "options": ["code", "ask", "reject"]}
        ]
        kinds = [(u["sessionUpdate"], u.get("state") or u.get("status")) for u in client.updates]
        assert kinds == [
            ("config_option_update", None),
            ("user_message", None),
            ("state_update", "running"),
            ("tool_call_update", "pending"),
            ("state_update", "requires_action"),
            ("state_update", "running"),
            ("config_option_update", None),
            ("tool_call_update", "completed"),
            ("agent_message_chunk", None),
            ("state_update", "idle"),
        ]
        process.stdin.close()
        await asyncio.wait_for(process.wait(), TIMEOUT)
        async with serve_v1(log_path) as (v1conn, _client):
            loaded = await v1conn.load_session(cwd="/", session_id=session_id)
        assert loaded.modes.current_mode_id == "code"


def test_demo_protocol_2_exits_zero_and_logs_protocol_2(tmp_path: Path):
    import subprocess

    log = tmp_path / "demo.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "modefsm", "demo", "--protocol", "2", "--log", str(log)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "modes visited: ask -> architect -> code -> architect -> code" in result.stdout
    assert '"state":"requires_action"' in result.stdout
    assert initialize_frames_per_section(result.stdout) == DEMO_AGENT_STARTS
    records = read_log(log)
    session_id = records[0]["session_id"]
    assert [
        (r["event"], r["to_mode"], r["origin"], r.get("reason"), r.get("protocol"))
        for r in records
        if r["session_id"] == session_id
    ] == [
        ("modefsm.session_created", "ask", "new", None, 2),
        ("modefsm.mode_changed", "architect", "set_config_option", None, 2),
        ("modefsm.mode_changed", "code", "switch_mode", None, 2),
        ("modefsm.mode_changed", "architect", "set_config_option", None, 2),
        ("modefsm.change_rejected", None, "switch_mode", "option_rejected", 2),
        ("modefsm.change_rejected", "does-not-exist", "set_config_option", "unknown_mode", 2),
        ("modefsm.mode_changed", "code", "set_config_option", None, 2),
    ]
    assert demo_tool_calls(records[7:]) == DEMO_TOOL_CALLS
    assert {r.get("protocol") for r in records[7:] if "origin" in r} == {2}
    replay = subprocess.run(
        [sys.executable, "-m", "modefsm", "replay", str(log), "--verify"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "RESULT  clean" in replay.stdout


async def test_unknown_session_in_set_and_prompt_is_minus_32002_with_session_id(log_path):
    async with serve(log_path) as wire:
        set_frames = await wire.set_mode("nope", "code")
        prompt = await wire.call(
            "session/prompt", {"sessionId": "nope", "prompt": [{"type": "text", "text": "x"}]}
        )
    expected = {"code": -32002, "message": "sessionId: nope", "data": {"sessionId": "nope"}}
    assert set_frames == [{"jsonrpc": "2.0", "id": 2, "error": expected}]
    assert prompt == [{"jsonrpc": "2.0", "id": 3, "error": expected}]
