"""The settlement of asks left open by ended processes: what it must not settle, and when.

Each test builds, with the real file store and conversation journal, the state an ended
process leaves (its ``tool_call`` lines name a real process that ran and was reaped, or a
real zombie), restores the session in a fresh agent and checks the whole decision list and
the whole kept conversation.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from acp import RequestError
from acp.schema import ToolCallStart

from modefsm import preset
from modefsm.engine import ToolCall
from modefsm.log import ConversationStore, owner_alive
from modefsm.log._conversation import _start_ticks
from modefsm.protocol import ModeAgent
from modefsm.protocol.v2._agent import ModeAgentV2
from modefsm.store import FileStore

from .harness import assert_replay_clean
from .test_pending_ask import forged

pytestmark = [pytest.mark.reliability]

RESTARTED = "Failed: the agent restarted before the permission request was answered."
UNKNOWN = "Failed: the agent restarted before the tool call ended; its result is unknown."
SESSION = "sess_1"


def ended_process() -> list[int]:
    """``[pid, start]`` of a process that ran and was reaped (as a journal line names it)."""
    process = subprocess.Popen(["sleep", "60"])
    start = _start_ticks(process.pid)
    assert start is not None
    process.kill()
    process.wait()
    return [process.pid, start]


class Conn:
    """The client side of the connection: takes every ``session/update``."""

    def __init__(self) -> None:
        self.updates: list[Any] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)


class Files:
    """A log and its conversation journal, written the way ``modefsm serve --log`` does."""

    def __init__(self, tmp_path: Path) -> None:
        self.log = tmp_path / "modes.jsonl"
        self.journal = tmp_path / "modes.jsonl.conversation"
        self.stores: list[FileStore] = []

    def agent(self, cls: type[ModeAgent] = ModeAgent) -> ModeAgent:
        store = FileStore(self.log)
        self.stores.append(store)
        agent = cls(preset("seed"), store=store, conversation=ConversationStore(self.journal))
        agent.on_connect(Conn())
        return agent

    def close(self) -> None:
        for store in self.stores:
            store.close()

    def created(self) -> ModeAgent:
        agent = self.agent()
        agent.engine.new_session(SESSION, cwd="/")
        return agent

    def ended(self) -> None:
        """The owner of every ``tool_call`` line becomes a process that ended."""
        owner = ended_process()
        lines = []
        for line in self.journal.read_bytes().splitlines():
            data = orjson.loads(line)
            if "owner" in data:
                data["owner"] = owner
            lines.append(orjson.dumps(data))
        self.journal.write_bytes(b"".join(line + b"\n" for line in lines))

    def append(self, update: dict[str, Any], owner: list[int], *, gated: bool = True) -> None:
        """A ``tool_call`` line as a process that ended wrote it (``run_tool``'s: *gated*)."""
        line: dict[str, Any] = {"session_id": SESSION, "part": "host", "update": update}
        line["owner"] = owner
        if gated:
            line["gated"] = True
        line["event"] = "modefsm.conversation"
        with self.journal.open("ab") as file:
            file.write(orjson.dumps(line) + b"\n")

    def decisions(self) -> list[tuple[str, str, int | None, str | None]]:
        store = FileStore(self.log)
        try:
            return [
                (d.tool_call_id, d.decision, d.rule, d.outcome) for d in store.decisions(SESSION)
            ]
        finally:
            store.close()

    async def kept(self) -> list[dict[str, Any]]:
        items = await ConversationStore(self.journal).history(SESSION)
        return [item.update for item in items]


@pytest.fixture
def files(tmp_path: Path) -> Iterator[Files]:
    made = Files(tmp_path)
    yield made
    made.close()


EDIT = {
    "sessionUpdate": "tool_call",
    "toolCallId": "call_1",
    "title": "Edit",
    "kind": "edit",
    "status": "pending",
}


def failed(call: str, text: str) -> dict[str, Any]:
    return {
        "toolCallId": call,
        "status": "failed",
        "content": [{"content": {"text": text, "type": "text"}, "type": "content"}],
        "sessionUpdate": "tool_call_update",
    }


@pytest.mark.parametrize("status", ["completed", "failed"])
async def test_a_tool_call_ended_in_its_first_update_stays_ended(files: Files, status: str):
    """A ``tool_call`` sent ``completed`` or ``failed`` is not open: nothing is added."""
    first = files.created()
    start = ToolCallStart(
        session_update="tool_call", tool_call_id="call_r", title="Read", kind="read", status=status
    )
    first.record(SESSION, start)
    files.ended()
    await files.agent().load_session(cwd="/", session_id=SESSION)
    sent = {"toolCallId": "call_r", "title": "Read", "kind": "read", "status": status}
    assert await files.kept() == [{**sent, "sessionUpdate": "tool_call"}]
    assert files.decisions() == []


def test_a_killed_unreaped_sender_is_not_alive():
    process = subprocess.Popen(["sleep", "60"])
    try:
        owner = (process.pid, _start_ticks(process.pid))
        assert owner_alive(owner) is True
        assert owner_alive((process.pid, None)) is True
        os.kill(process.pid, signal.SIGKILL)
        stat = Path(f"/proc/{process.pid}/stat")
        for _ in range(500):  # the kernel makes it a zombie: wait for the state, bounded
            if stat.read_bytes().rsplit(b")", 1)[1].split()[0] == b"Z":
                break
            time.sleep(0.01)
        assert stat.read_bytes().rsplit(b")", 1)[1].split()[0] == b"Z"
        assert owner_alive(owner) is False
        assert owner_alive((process.pid, None)) is False
    finally:
        process.kill()
        process.wait()
    assert owner_alive(owner) is False


@pytest.mark.parametrize("connections", [1, 2])
async def test_two_restores_at_once_settle_an_ask_once(files: Files, connections: int):
    """Two ``session/load`` of one session at once in one process: one record, one end.

    On one connection, or on two sharing the engine and the journal (as ``serve --http``).
    """
    files.created()
    files.append(EDIT, ended_process())
    agent = files.agent()
    other = agent
    if connections == 2:
        other = ModeAgent(preset("seed"), engine=agent.engine, conversation=agent.conversation)
        other.on_connect(Conn())
    answers = await asyncio.gather(
        agent.load_session(cwd="/", session_id=SESSION),
        other.load_session(cwd="/", session_id=SESSION),
    )
    assert [a.modes.current_mode_id for a in answers] == ["ask", "ask"]
    assert files.decisions() == [("call_1", "ask", None, "abandoned")]
    assert await files.kept() == [EDIT, failed("call_1", RESTARTED)]
    assert_replay_clean(files.log)


@pytest.mark.parametrize(
    ("cursor", "field"),
    [
        ({"type": "bogus"}, "replayFrom"),
        ({"type": "_modefsm/message", "messageId": "msg_none"}, "replayFrom.messageId"),
    ],
)
async def test_a_v2_resume_refused_for_replay_from_settles_nothing(
    files: Files, cursor: dict[str, Any], field: str
):
    files.created()
    files.append(EDIT, ended_process())
    base = files.agent()
    agent = ModeAgentV2(base, Conn())
    with pytest.raises(RequestError) as refused:
        await agent.resume_session(SESSION, "/", replay_from=cursor)
    assert refused.value.code == -32602
    assert refused.value.data["field"] == field
    assert SESSION not in base.engine
    assert files.decisions() == []
    assert await files.kept() == [EDIT]
    # the same request with a cursor served settles it, once
    await agent.resume_session(SESSION, "/", replay_from={"type": "start"})
    assert files.decisions() == [("call_1", "ask", None, "abandoned")]
    assert await files.kept() == [EDIT, failed("call_1", RESTARTED)]
    assert_replay_clean(files.log)


async def test_a_v2_resume_of_an_unknown_session_settles_nothing(files: Files):
    files.created()
    agent = ModeAgentV2(files.agent(), Conn())
    with pytest.raises(RequestError) as refused:
        await agent.resume_session("sess_other", "/", replay_from={"type": "bogus"})
    assert refused.value.code == -32002


async def test_a_tool_call_a_host_only_reported_is_not_recorded_abandoned(files: Files):
    """A ``pending`` tool call kept with :meth:`record` was never asked: it ends, no record."""
    first = files.created()
    start = ToolCallStart(
        session_update="tool_call",
        tool_call_id="call_1",
        title="Edit",
        kind="edit",
        status="pending",
    )
    first.record(SESSION, start)
    files.ended()
    await files.agent().load_session(cwd="/", session_id=SESSION)
    assert files.decisions() == []
    assert await files.kept() == [EDIT, failed("call_1", UNKNOWN)]


async def test_a_run_tool_call_allowed_before_its_process_ended_is_not_abandoned(files: Files):
    """``run_tool``'s ``tool_call`` kept, its ``allow`` logged, then the process ended."""
    first = files.created()
    read = {**EDIT, "toolCallId": "call_r", "title": "Read", "kind": "read"}
    first.conversation.append(SESSION, read, "host", gated=True)
    decided = await first.engine.decide_async(SESSION, ToolCall("call_r", "read", None, "Read"))
    assert (decided.decision, decided.outcome) == ("allow", None)
    files.ended()
    await files.agent().load_session(cwd="/", session_id=SESSION)
    assert files.decisions() == [("call_r", "allow", 0, None)]
    assert await files.kept() == [read, failed("call_r", UNKNOWN)]
    assert_replay_clean(files.log)
    # an abandoned record after that allow, with no ask between, is refused
    done = forged(
        files.log, {"decision": "ask", "rule": None, "tool": None, "outcome": "abandoned"}
    )
    assert done.returncode == 1, done.stdout
    assert "abandoned after an allow or a deny: it was not asked" in done.stdout


async def test_a_v2_resume_whose_settlement_pushes_the_message_out_still_replays_it(
    files: Files,
):
    """The journal keeps two items; the settlement's ``failed`` update lets the message go.

    The message ``replayFrom`` names was looked up before the settlement: the request
    succeeds and replays it, the tool call and its end (it would fail with ``-32602``
    after having settled the call).
    """
    files.created()
    user = {
        "sessionUpdate": "user_message_chunk",
        "messageId": "msg_1",
        "content": {"type": "text", "text": "edit it"},
    }
    ConversationStore(files.journal).append(SESSION, user)
    files.append(EDIT, ended_process())
    store = FileStore(files.log)
    files.stores.append(store)
    bounded = ConversationStore(files.journal, max_entries=2)
    conn = Conn()
    base = ModeAgent(preset("seed"), store=store, conversation=bounded)
    base.on_connect(conn)
    agent = ModeAgentV2(base, conn)
    cursor = {"type": "_modefsm/message", "messageId": "msg_1"}
    await agent.resume_session(SESSION, "/", replay_from=cursor)
    assert files.decisions() == [("call_1", "ask", None, "abandoned")]
    assert [item.update for item in await bounded.history(SESSION)] == [
        EDIT,
        failed("call_1", RESTARTED),
    ]
    sent = [u.model_dump(mode="json", by_alias=True, exclude_none=True) for u in conn.updates]
    assert sent == [
        {
            "sessionUpdate": "user_message",
            "messageId": "msg_1",
            "content": [{"type": "text", "text": "edit it"}],
        },
        {**EDIT, "sessionUpdate": "tool_call_update"},
        failed("call_1", RESTARTED),
        {"sessionUpdate": "state_update", "state": "idle"},
    ]
    assert_replay_clean(files.log)
