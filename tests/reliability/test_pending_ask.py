"""A permission request left open by a SIGKILLed ``modefsm serve`` is settled on restore.

The agent asks the client (``session/request_permission``: a ``switch_mode`` switch or a
mode-gated tool call) and is SIGKILLed before the answer. The next process that restores the
session writes one ``modefsm.tool_decided`` record with outcome ``abandoned`` (chained, checked
by ``modefsm replay --verify``) and ends the tool call ``failed`` in the kept conversation, so
``session/load`` (v1) and ``session/resume`` with ``replayFrom`` (v2) replay a tool call that
ends. A second restart shows the same and writes nothing more; an answer to the dead process's
request changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest
from acp.experimental.v2 import schema as s2

from modefsm import preset
from modefsm.log import record_digest, title_digest
from tests.acp_client import (
    TIMEOUT,
    TestClient,
    V2TestClient,
    host_command,
    select,
    serve_command,
    spawn_v1,
    spawn_v2,
    text_block,
)
from tests.conftest import read_log

from .harness import assert_replay_clean

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

PLAN = "## Plan\n1. Write it"
RESTARTED = "Failed: the agent restarted before the permission request was answered."
RAN = "Failed: the agent restarted while the tool call ran; its result is unknown."
SWITCH_TITLE = "Ready for implementation"


class HoldingClient(TestClient):
    """Never answers a permission request: the agent is killed while it waits."""

    async def request_permission(
        self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any
    ) -> Any:
        self.pending.set()
        await asyncio.Event().wait()


def agent(log: Path, client: TestClient) -> contextlib.AbstractAsyncContextManager[tuple[Any, Any]]:
    """``modefsm serve --log LOG`` under the SDK v1 client; a SIGKILL may break the pipe."""
    return spawn_v1(client, *serve_command(log), unstable=True, sigkill=True)


async def killed(process: asyncio.subprocess.Process, turn: asyncio.Future[Any]) -> None:
    """SIGKILL the agent *process* while its *turn* waits; the turn then ends somehow."""
    process.send_signal(signal.SIGKILL)
    await asyncio.wait_for(process.wait(), TIMEOUT)
    turn.cancel()
    with contextlib.suppress(BaseException):
        await turn


async def killed_mid_ask(log: Path, prompt: str, mode: str | None) -> tuple[str, str, int]:
    """A session whose prompt *prompt* asks the client; SIGKILL the agent while it waits.

    Returns the ``sessionId``, the ``toolCallId`` and the request's JSON-RPC id.
    """
    client = HoldingClient()
    async with agent(log, client) as (conn, process):
        session_id = (await conn.new_session(cwd=".")).session_id
        if mode is not None:
            await conn.set_session_mode(session_id=session_id, mode_id=mode)
        turn = asyncio.ensure_future(
            conn.prompt(session_id=session_id, prompt=[text_block(prompt)])
        )
        await asyncio.wait_for(client.pending.wait(), TIMEOUT)
        await killed(process, turn)
    asked = [m for m in client.received() if m.get("method") == "session/request_permission"]
    assert len(asked) == 1
    return session_id, asked[0]["params"]["toolCall"]["toolCallId"], asked[0]["id"]


async def loaded(log: Path, session_id: str) -> tuple[list[dict[str, Any]], str]:
    """The frames a fresh ``modefsm serve`` sends for ``session/load``, and its mode."""
    client = TestClient()
    async with agent(log, client) as (conn, _process):
        mark = client.mark()
        answer = await asyncio.wait_for(conn.load_session(cwd=".", session_id=session_id), TIMEOUT)
        frames = [m for m in client.since(mark) if "method" in m]
    return frames, answer.modes.current_mode_id


def v1(session_id: str, **body: Any) -> dict[str, Any]:
    return {"method": "session/update", "params": {"sessionId": session_id, "update": body}}


def tool_text(value: str) -> list[dict[str, Any]]:
    return [{"type": "content", "content": {"type": "text", "text": value}}]


def abandoned(
    session_id: str, call: str, kind: str, title: str, *, mode: str, seq: int
) -> dict[str, Any]:
    """The record that settles an abandoned ask (as ``read_log`` shows it)."""
    return {
        "session_id": session_id,
        "tool_call_id": call,
        "kind": kind,
        "tool": None,
        "title_digest": title_digest(title),
        "rule": None,
        "decision": "ask",
        "outcome": "abandoned",
        "mode": mode,
        "mode_seq": seq,
        "spec": "seed",
        "spec_hash": preset("seed").content_hash,
        "event": "modefsm.tool_decided",
        "level": "info",
    }


# (prompt, mode set first, tool call as sent: title, kind, content; the mode and seq then)
ASKS = {
    "switch": (PLAN, "architect", (SWITCH_TITLE, "switch_mode", PLAN), ("architect", 2)),
    "tool": ("edit notes.txt", None, ("Edit notes.txt", "edit", None), ("ask", 1)),
}


@pytest.mark.parametrize("ask", ASKS)
async def test_an_ask_open_when_the_agent_was_killed_ends_failed_on_load(tmp_path: Path, ask):
    """A switch, or a tool call the mode asks about: recorded once, replayed as failed."""
    prompt, set_first, (title, kind, content), (mode, seq) = ASKS[ask]
    log = tmp_path / "modes.jsonl"
    session_id, call, _request = await killed_mid_ask(log, prompt, set_first)
    before = read_log(log)
    sent: dict[str, Any] = {"title": title, "kind": kind, "status": "pending"}
    if content is not None:
        sent["content"] = tool_text(content)
    expected = [
        v1(
            session_id, sessionUpdate="user_message_chunk", content={"type": "text", "text": prompt}
        ),
        v1(session_id, sessionUpdate="tool_call", toolCallId=call, **sent),
        v1(
            session_id,
            sessionUpdate="tool_call_update",
            toolCallId=call,
            status="failed",
            content=tool_text(RESTARTED),
        ),
    ]
    assert await loaded(log, session_id) == (expected, mode)
    record = abandoned(session_id, call, kind, title, mode=mode, seq=seq)
    assert read_log(log) == [*before, record]
    # a second restart replays the same and writes nothing more
    assert await loaded(log, session_id) == (expected, mode)
    assert read_log(log) == [*before, record]
    assert_replay_clean(log)


async def test_an_answer_to_the_dead_agents_request_changes_nothing(tmp_path: Path):
    """The client answers the killed process's request to the next process: ignored."""
    log = tmp_path / "modes.jsonl"
    session_id, _call, request_id = await killed_mid_ask(log, PLAN, "architect")
    await loaded(log, session_id)
    settled = read_log(log)
    client = TestClient()
    async with agent(log, client) as (conn, process):
        answer = {"outcome": {"outcome": "selected", "optionId": "code"}}
        late = {"jsonrpc": "2.0", "id": request_id, "result": answer}
        process.stdin.write(orjson.dumps(late) + b"\n")
        await process.stdin.drain()
        reloaded = await asyncio.wait_for(
            conn.load_session(cwd=".", session_id=session_id), TIMEOUT
        )
        assert reloaded.modes.current_mode_id == "architect"
    assert read_log(log) == settled
    assert_replay_clean(log)


async def test_an_open_ask_of_a_live_process_is_left_to_it(tmp_path: Path):
    """Another process loading the session while the asking one lives settles nothing."""
    log = tmp_path / "modes.jsonl"
    asking = TestClient()
    answered = asyncio.Event()

    async def answer(options: Any, tool_call: Any) -> Any:
        await answered.wait()
        return select("code")

    asking.answer = answer
    async with agent(log, asking) as (conn, _process):
        session_id = (await conn.new_session(cwd=".")).session_id
        await conn.set_session_mode(session_id=session_id, mode_id="architect")
        turn = asyncio.ensure_future(conn.prompt(session_id=session_id, prompt=[text_block(PLAN)]))
        await asyncio.wait_for(asking.pending.wait(), TIMEOUT)
        frames, mode = await loaded(log, session_id)
        assert mode == "architect"
        assert [f["params"]["update"].get("status") for f in frames] == [None, "pending"]
        answered.set()
        await asyncio.wait_for(turn, TIMEOUT)
    events = [(r["event"], r.get("outcome"), r.get("to_mode")) for r in read_log(log)]
    assert events == [
        ("modefsm.session_created", None, "ask"),
        ("modefsm.mode_changed", None, "architect"),
        ("modefsm.mode_changed", None, "code"),
    ]
    assert_replay_clean(log)


def forged(log: Path, change: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """Append a copy of the log's last record changed by *change*, chained, and verify."""
    lines = log.read_bytes().splitlines()
    last = orjson.loads(lines[-1])
    record = {**last, **change, "prev": last["digest"]}
    record.pop("digest")
    record["digest"] = record_digest(record)
    log.write_bytes(log.read_bytes() + orjson.dumps(record) + b"\n")
    return subprocess.run(
        [sys.executable, "-m", "modefsm", "replay", str(log), "--verify"],
        capture_output=True,
        text=True,
        check=False,
        timeout=TIMEOUT,
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({}, "abandoned twice"),
        ({"decision": "allow", "rule": 2}, "only an ask has an outcome"),
    ],
)
async def test_replay_refuses_a_forged_abandonment(tmp_path: Path, change, problem):
    log = tmp_path / "modes.jsonl"
    session_id, _call, _request = await killed_mid_ask(log, PLAN, "architect")
    await loaded(log, session_id)
    assert_replay_clean(log)
    done = forged(log, change)
    assert done.returncode == 1, done.stdout
    assert problem in done.stdout


def agent_v2(log: Path, client: Any) -> contextlib.AbstractAsyncContextManager[tuple[Any, Any]]:
    """``modefsm serve --log LOG`` under the SDK's v2 client (it may be SIGKILLed)."""
    return spawn_v2(client, *serve_command(log), sigkill=True)


class V2Client(V2TestClient):
    """The SDK's v2 client side: keeps the frames received; never answers a permission."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = asyncio.Event()

    async def request_permission(self, session_id: str, **kwargs: Any) -> Any:
        self.asked.set()
        await asyncio.Event().wait()


async def test_v2_resume_replays_the_abandoned_switch_as_failed(tmp_path: Path):
    log = tmp_path / "modes.jsonl"
    client = V2Client()
    async with agent_v2(log, client) as (conn, process):
        session_id = (await conn.new_session(cwd="/")).session_id
        await conn.set_config_option(
            config_id="mode", session_id=session_id, value="architect", type="id"
        )
        prompt: list[Any] = [s2.TextContentBlock(text=PLAN)]
        turn = asyncio.ensure_future(conn.prompt(session_id=session_id, prompt=prompt))
        await asyncio.wait_for(client.asked.wait(), TIMEOUT)
        await killed(process, turn)
    calls = {
        f["params"]["update"]["toolCallId"]
        for f in client.frames
        if f.get("method") == "session/update" and "toolCallId" in f["params"]["update"]
    }
    (call,) = calls
    resumed = V2Client()
    async with agent_v2(log, resumed) as (conn, _process):
        await asyncio.wait_for(
            conn.resume_session(
                session_id=session_id, cwd="/", replay_from=s2.ReplayFromStartVariant()
            ),
            TIMEOUT,
        )
    tool_frames = [
        f["params"]["update"]
        for f in resumed.frames
        if f.get("method") == "session/update" and "toolCallId" in f["params"]["update"]
    ]
    assert tool_frames == [
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": call,
            "title": SWITCH_TITLE,
            "kind": "switch_mode",
            "status": "pending",
            "content": tool_text(PLAN),
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": call,
            "status": "failed",
            "content": tool_text(RESTARTED),
        },
    ]
    assert read_log(log)[-1] == abandoned(
        session_id, call, "switch_mode", SWITCH_TITLE, mode="architect", seq=2
    )
    assert_replay_clean(log)


RUNNING_HOST = textwrap.dedent(
    """
    import asyncio
    import sys

    from acp.schema import PromptResponse

    from modefsm import FileStore, ModeAgent, ToolCall, preset, run_agent
    from modefsm.log import ConversationStore


    class Host(ModeAgent):
        replay_on_load = True

        async def prompt(self, prompt, session_id, **kwargs):
            async def forever() -> str:
                await asyncio.Event().wait()
                return "never"

            call = ToolCall("call_read", "read", "read_file", "Read notes.txt")
            await self.run_tool(session_id, call, forever)
            return PromptResponse(stop_reason="end_turn")


    journal = ConversationStore(sys.argv[1] + ".conversation")
    agent = Host(preset("seed"), store=FileStore(sys.argv[1]), conversation=journal)
    asyncio.run(run_agent(agent))
    """
)


class RunningClient(TestClient):
    """Sets :attr:`running` once a tool call is ``in_progress``."""

    def __init__(self) -> None:
        super().__init__()
        self.running = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if getattr(update, "status", None) == "in_progress":
            self.running.set()


def running_host(
    script: Path, log: Path, client: TestClient
) -> contextlib.AbstractAsyncContextManager[tuple[Any, Any]]:
    """The host of RUNNING_HOST under the SDK v1 client; a SIGKILL may break the pipe."""
    return spawn_v1(client, *host_command(script, log), sigkill=True)


async def test_a_tool_call_running_when_the_agent_was_killed_ends_failed_on_load(tmp_path: Path):
    """A tool allowed and running: no ask to settle (its decision is logged), the call fails."""
    script, log = tmp_path / "host.py", tmp_path / "modes.jsonl"
    script.write_text(RUNNING_HOST, encoding="utf-8")
    client = RunningClient()
    async with running_host(script, log, client) as (conn, process):
        session_id = (await conn.new_session(cwd=str(tmp_path))).session_id
        turn = asyncio.ensure_future(
            conn.prompt(session_id=session_id, prompt=[text_block("read")])
        )
        await asyncio.wait_for(client.running.wait(), TIMEOUT)
        await killed(process, turn)
    before = read_log(log)
    assert [(r["event"], r.get("decision")) for r in before] == [
        ("modefsm.session_created", None),
        ("modefsm.tool_decided", "allow"),
    ]
    expected = [
        v1(session_id, sessionUpdate="tool_call", toolCallId="call_read", title="Read notes.txt",
           kind="read", status="pending"),
        v1(session_id, sessionUpdate="tool_call_update", toolCallId="call_read",
           status="in_progress"),
        v1(session_id, sessionUpdate="tool_call_update", toolCallId="call_read", status="failed",
           content=tool_text(RAN)),
    ]  # fmt: skip
    for _ in range(2):  # and the same after a second restart
        again = TestClient()
        async with running_host(script, log, again) as (conn, _process):
            mark = again.mark()
            await asyncio.wait_for(
                conn.load_session(cwd=str(tmp_path), session_id=session_id), TIMEOUT
            )
            assert [m for m in again.since(mark) if "method" in m] == expected
    assert read_log(log) == before
    assert_replay_clean(log)
