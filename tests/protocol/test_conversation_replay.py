"""session/load replays the conversation `modefsm serve` kept, after a restart, frame by frame."""

from __future__ import annotations

from typing import Any

import acp
import orjson
import pytest

from modefsm import preset
from modefsm.log import ConversationStore
from modefsm.protocol import ModeAgent
from tests.acp_client import select, serve, text_block
from tests.conftest import mode_result, read_log

pytestmark = pytest.mark.e2e

SEED = preset("seed")
PLAN = "## Plan\n1. Write it"


def update(session_id: str, **fields: Any) -> dict[str, Any]:
    return {"method": "session/update", "params": {"sessionId": session_id, "update": fields}}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_text(value: str) -> list[dict[str, Any]]:
    return [{"type": "content", "content": text(value)}]


async def a_conversation(conn: Any, client: Any) -> tuple[str, str, str]:
    """architect: a rejected switch, then an approved one to code, then a prompt in code."""
    answers = iter([select("reject"), select("code")])

    async def answer(options: Any, tool_call: Any) -> Any:
        return next(answers)

    client.answer = answer
    session_id = (await conn.new_session(cwd=".")).session_id
    await conn.set_session_mode(session_id=session_id, mode_id="architect")
    await conn.prompt(session_id=session_id, prompt=[text_block("first")])
    await conn.prompt(session_id=session_id, prompt=[text_block(PLAN)])
    await conn.prompt(session_id=session_id, prompt=[text_block("hello"), text_block("there")])
    calls = [
        u["update"]["toolCallId"]
        for u in client.updates(session_id)
        if u["update"]["sessionUpdate"] == "tool_call"
    ]
    rejected, approved = calls
    return session_id, rejected, approved


def expected_replay(session_id: str, rejected: str, approved: str) -> list[dict[str, Any]]:
    pending = {"title": "Ready for implementation", "kind": "switch_mode", "status": "pending"}
    return [
        update(session_id, sessionUpdate="user_message_chunk", content=text("first")),
        update(
            session_id,
            sessionUpdate="tool_call",
            toolCallId=rejected,
            **pending,
            content=tool_text("first"),
        ),
        update(
            session_id,
            sessionUpdate="tool_call_update",
            toolCallId=rejected,
            status="failed",
            content=tool_text("Declined: staying in architect mode."),
        ),
        update(
            session_id,
            sessionUpdate="agent_message_chunk",
            content=text("Not switched (option_rejected): still in architect mode."),
        ),
        update(session_id, sessionUpdate="user_message_chunk", content=text(PLAN)),
        update(
            session_id,
            sessionUpdate="tool_call",
            toolCallId=approved,
            **pending,
            content=tool_text(PLAN),
        ),
        update(
            session_id,
            sessionUpdate="tool_call_update",
            toolCallId=approved,
            status="completed",
            content=tool_text("Switched to code mode."),
        ),
        update(
            session_id,
            sessionUpdate="agent_message_chunk",
            content=text("Approved: now in code mode."),
        ),
        update(session_id, sessionUpdate="user_message_chunk", content=text("hello")),
        update(session_id, sessionUpdate="user_message_chunk", content=text("there")),
        update(
            session_id, sessionUpdate="agent_message_chunk", content=text("Mode code: hello there")
        ),
    ]


class TestReplayOnLoad:
    async def test_load_after_a_restart_replays_the_conversation_then_answers(self, log_path):
        async with serve(log_path) as (conn, client):
            session_id, rejected, approved = await a_conversation(conn, client)
        records_before = read_log(log_path)
        async with serve(log_path) as (conn, client):
            mark = client.mark()
            response = await conn.load_session(cwd=".", session_id=session_id)
            frames = client.since(mark)
        assert frames == [
            *expected_replay(session_id, rejected, approved),
            {
                "id": 1,
                "result": mode_result(SEED, "code"),
            },
        ]
        assert response.modes.current_mode_id == "code"
        assert read_log(log_path) == records_before  # the load changed and logged nothing

    async def test_a_second_load_and_a_load_in_the_same_process_replay_the_same(self, log_path):
        async with serve(log_path) as (conn, client):
            session_id, rejected, approved = await a_conversation(conn, client)
            mark = client.mark()
            await conn.load_session(cwd=".", session_id=session_id)
            live = client.since(mark)[:-1]
        async with serve(log_path) as (conn, client):
            await conn.load_session(cwd=".", session_id=session_id)
            mark = client.mark()
            await conn.load_session(cwd=".", session_id=session_id)
            again = client.since(mark)[:-1]
        assert live == again == expected_replay(session_id, rejected, approved)

    async def test_the_conversation_continues_after_a_restart(self, log_path):
        async with serve(log_path) as (conn, client):
            session_id, rejected, approved = await a_conversation(conn, client)
        async with serve(log_path) as (conn, client):
            await conn.load_session(cwd=".", session_id=session_id)
            await conn.prompt(session_id=session_id, prompt=[text_block("more")])
        async with serve(log_path) as (conn, client):
            mark = client.mark()
            await conn.load_session(cwd=".", session_id=session_id)
            frames = client.since(mark)[:-1]
        assert frames == [
            *expected_replay(session_id, rejected, approved),
            update(session_id, sessionUpdate="user_message_chunk", content=text("more")),
            update(
                session_id, sessionUpdate="agent_message_chunk", content=text("Mode code: more")
            ),
        ]

    async def test_resume_replays_nothing(self, log_path):
        async with serve(log_path) as (conn, client):
            session_id, _rejected, _approved = await a_conversation(conn, client)
        async with serve(log_path) as (conn, client):
            mark = client.mark()
            await conn.resume_session(cwd=".", session_id=session_id)
            frames = client.since(mark)
        assert [f.get("method") for f in frames] == [None]

    async def test_unknown_session_replays_nothing_and_fails(self, log_path):
        async with serve(log_path) as (conn, client):
            mark = client.mark()
            with pytest.raises(acp.RequestError) as info:
                await conn.load_session(cwd=".", session_id="sess_never")
            frames = client.since(mark)
        assert (info.value.code, info.value.data) == (-32002, {"uri": "sess_never"})
        assert len(frames) == 1

    async def test_the_journal_sits_next_to_the_log_and_the_log_has_only_records(self, log_path):
        async with serve(log_path) as (conn, client):
            session_id, _rejected, _approved = await a_conversation(conn, client)
        journal = log_path.with_name(log_path.name + ".conversation")
        lines = [orjson.loads(line) for line in journal.read_bytes().splitlines()]
        turns = [["host", "mode", "mode", "host"], ["host", "mode", "mode", "host"]]
        turns.append(["host", "host", "host"])
        assert [line["session_id"] for line in lines] == [session_id] * 11
        assert [line["part"] for line in lines] == [part for turn in turns for part in turn]
        assert {line["event"] for line in read_log(log_path)} <= {
            "modefsm.session_created",
            "modefsm.mode_changed",
            "modefsm.change_rejected",
        }


class TestStore:
    async def test_bounds_drop_the_oldest_items(self, tmp_path):
        store = ConversationStore(tmp_path / "c.jsonl", max_entries=3)
        for n in range(5):
            store.append("s", {"sessionUpdate": "agent_message_chunk", "n": n})
        assert [item.update["n"] for item in await store.history("s")] == [2, 3, 4]
        store.close()
        reopened = ConversationStore(tmp_path / "c.jsonl", max_entries=3)
        assert [item.update["n"] for item in await reopened.history("s")] == [2, 3, 4]
        reopened.close()

    async def test_byte_bound(self, tmp_path):
        store = ConversationStore(max_bytes=400)  # a line is 179 bytes
        for n in range(10):
            store.append("s", {"sessionUpdate": "agent_message_chunk", "text": "x" * 50, "n": n})
        kept = [item.update["n"] for item in await store.history("s")]
        assert kept == [8, 9]

    async def test_a_torn_last_line_is_ended_and_skipped(self, tmp_path):
        path = tmp_path / "c.jsonl"
        store = ConversationStore(path)
        store.append("s", {"sessionUpdate": "agent_message_chunk", "n": 1})
        store.close()
        with path.open("ab") as file:
            file.write(b'{"session_id":"s","part":"host","upd')
        store = ConversationStore(path)
        store.append("s", {"sessionUpdate": "agent_message_chunk", "n": 2})
        store.close()
        reopened = ConversationStore(path)
        assert [item.update["n"] for item in await reopened.history("s")] == [1, 2]
        reopened.close()

    def test_a_file_of_something_else_is_refused(self, tmp_path):
        path = tmp_path / "notes.txt"
        path.write_text("my notes\n")
        from modefsm.errors import LogError

        with pytest.raises(LogError, match="not a conversation journal"):
            ConversationStore(path)
        assert path.read_text() == "my notes\n"

    async def test_switch_history_gives_a_host_the_mode_part(self, tmp_path):
        store = ConversationStore(tmp_path / "c.jsonl")
        store.append("s", {"sessionUpdate": "user_message_chunk", "content": text("hi")})
        store.append(
            "s",
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "call_1",
                "title": "Go",
                "kind": "switch_mode",
                "status": "pending",
            },
            "mode",
        )
        store.append(
            "s",
            {"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "completed"},
            "mode",
        )
        store.close()
        agent = ModeAgent(SEED, conversation=ConversationStore(tmp_path / "c.jsonl"))
        history = await agent.switch_history("s")
        assert [u.model_dump(mode="json", by_alias=True, exclude_none=True) for u in history] == [
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "call_1",
                "title": "Go",
                "kind": "switch_mode",
                "status": "pending",
            },
            {"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "completed"},
        ]
        assert [type(u).__name__ for u in await agent.history("s")] == [
            "UserMessageChunk",
            "ToolCallStart",
            "ToolCallProgress",
        ]
