"""v2 ``session/resume`` with ``replayFrom`` after a restart of `modefsm serve`, frame by frame.

The official SDK's v2 client drives the binary over a real stdio pipe; an observer keeps
every raw frame it receives, so each frame is compared whole. The conversation replayed
is the one the agent kept (user prompts, its messages, the ``switch_mode`` tool calls and
their outcome), in the v2 shapes, then the current mode is reported once.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError
from acp.experimental.v2 import schema as s2

from modefsm import preset
from tests.acp_client import V2TestClient, select, serve_command, spawn_v2
from tests.acp_client import serve as serve_v1
from tests.acp_client import text_block as v1_text
from tests.conftest import mode_option, read_log

pytestmark = pytest.mark.e2e

SEED = preset("seed")
TIMEOUT = 30
CURSOR = "_modefsm/message"
PLAN = "## Plan\n1. Write it"
HOLD = "hold"


def option_v2(current: str) -> dict[str, Any]:
    option = mode_option(SEED, current)
    option["configId"] = option.pop("id")
    return option


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_text(value: str) -> list[dict[str, Any]]:
    return [{"type": "content", "content": text(value)}]


def update(session_id: str, **body: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": session_id, "update": body},
    }


def primer(session_id: str, message_id: str) -> dict[str, Any]:
    """The whole-message update a replay sends before an agent message's chunks."""
    return update(session_id, sessionUpdate="agent_message", messageId=message_id, content=[])


def replied(session_id: str, message_id: str, words: str) -> list[dict[str, Any]]:
    """An agent message of *words* as a replay sends it: its primer, then its one chunk."""
    chunk = update(
        session_id, sessionUpdate="agent_message_chunk", messageId=message_id, content=text(words)
    )
    return [primer(session_id, message_id), chunk]


def unprimed(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """*frames* without the whole-message updates (a live turn sends only the chunks)."""
    return [f for f in frames if f["params"]["update"]["sessionUpdate"] != "agent_message"]


def idle(session_id: str) -> dict[str, Any]:
    return update(session_id, sessionUpdate="state_update", state="idle")


def answer(request_id: int, mode: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": {"configOptions": [option_v2(mode)]}}


async def a_conversation(conn: Any, client: Any) -> tuple[str, str, str]:
    """Over v1: architect, a rejected switch, an approved one to code, a prompt in code."""
    answers = iter([select("reject"), select("code")])

    async def answer(options: Any, tool_call: Any) -> Any:
        return next(answers)

    client.answer = answer
    session_id = (await conn.new_session(cwd=".")).session_id
    await conn.set_session_mode(session_id=session_id, mode_id="architect")
    for blocks in (["first"], [PLAN], ["hello", "there"]):
        await conn.prompt(session_id=session_id, prompt=[v1_text(b) for b in blocks])
    rejected, approved = [
        u["update"]["toolCallId"]
        for u in client.updates(session_id)
        if u["update"]["sessionUpdate"] == "tool_call"
    ]
    return session_id, rejected, approved


def expected_replay(session_id: str, rejected: str, approved: str) -> list[dict[str, Any]]:
    """What v1 ``session/load`` replays of :func:`a_conversation` (frames without jsonrpc)."""

    def v1(**body: Any) -> dict[str, Any]:
        return {"method": "session/update", "params": {"sessionId": session_id, "update": body}}

    pending = {"title": "Ready for implementation", "kind": "switch_mode", "status": "pending"}
    return [
        v1(sessionUpdate="user_message_chunk", content=text("first")),
        v1(sessionUpdate="tool_call", toolCallId=rejected, **pending, content=tool_text("first")),
        v1(
            sessionUpdate="tool_call_update",
            toolCallId=rejected,
            status="failed",
            content=tool_text("Declined: staying in architect mode."),
        ),
        v1(
            sessionUpdate="agent_message_chunk",
            content=text("Not switched (option_rejected): still in architect mode."),
        ),
        v1(sessionUpdate="user_message_chunk", content=text(PLAN)),
        v1(sessionUpdate="tool_call", toolCallId=approved, **pending, content=tool_text(PLAN)),
        v1(
            sessionUpdate="tool_call_update",
            toolCallId=approved,
            status="completed",
            content=tool_text("Switched to code mode."),
        ),
        v1(sessionUpdate="agent_message_chunk", content=text("Approved: now in code mode.")),
        v1(sessionUpdate="user_message_chunk", content=text("hello")),
        v1(sessionUpdate="user_message_chunk", content=text("there")),
        v1(sessionUpdate="agent_message_chunk", content=text("Mode code: hello there")),
    ]


class V2Client(V2TestClient):
    """The SDK's v2 client side: keeps every raw frame received, answers permissions in turn."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: Iterator[str | None] = iter(())
        self.asked = asyncio.Event()

    async def request_permission(
        self, session_id: str, title: str, options: list[Any], subject: Any = None, **kwargs: Any
    ) -> s2.RequestPermissionResponse:
        option_id = next(self.answers)
        self.asked.set()
        if option_id == HOLD:  # never answered (the agent may cancel the request)
            await asyncio.Event().wait()
        if option_id is None:
            return s2.RequestPermissionResponse(outcome=s2.CancelledPermissionOutcome())
        return s2.RequestPermissionResponse(
            outcome=s2.SelectedPermissionOutcomeVariant(option_id=option_id)
        )


@contextlib.asynccontextmanager
async def serve_v2(
    log: Path, client: V2Client | None = None
) -> AsyncIterator[tuple[Any, V2Client]]:
    """`modefsm serve --log LOG`, initialized by the SDK's v2 client."""
    client = client or V2Client()
    async with spawn_v2(client, *serve_command(log)) as (conn, _process):
        yield conn, client


async def resume(
    conn: Any, client: V2Client, session_id: str, replay_from: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The frames of one ``session/resume`` (its answer last)."""
    mark = client.mark()
    cursor: Any = None
    if replay_from is not None:
        model = (
            s2.ReplayFromStartVariant if replay_from.get("type") == "start" else s2.OtherReplayFrom
        )
        cursor = model.model_validate(replay_from)
    await asyncio.wait_for(
        conn.resume_session(session_id=session_id, cwd="/", replay_from=cursor), TIMEOUT
    )
    return client.since(mark)


async def a_v2_conversation(conn: Any, client: V2Client) -> tuple[str, list[dict[str, Any]]]:
    """architect: a rejected switch, an approved one to code, a prompt in code (live frames)."""
    client.answers = iter(["reject", "code"])
    session_id = (await conn.new_session(cwd="/")).session_id
    await conn.set_config_option(
        config_id="mode", session_id=session_id, value="architect", type="id"
    )
    mark = client.mark()
    for blocks in (["first"], [PLAN], ["hello", "there"]):
        prompt = [s2.TextContentBlock(text=b) for b in blocks]
        await asyncio.wait_for(conn.prompt(session_id=session_id, prompt=prompt), TIMEOUT)
    return session_id, client.since(mark)


def conversation_of(live: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The live frames a replay repeats: no state, mode or permission frames, no answers."""
    return [
        f
        for f in live
        if f.get("method") == "session/update"
        and f["params"]["update"]["sessionUpdate"] not in ("state_update", "config_option_update")
    ]


def ids_of(frames: list[dict[str, Any]], kind: str, key: str) -> list[str]:
    out: list[str] = []
    for f in frames:
        body = f["params"]["update"] if f.get("method") == "session/update" else {}
        if body.get("sessionUpdate") == kind and body[key] not in out:
            out.append(body[key])
    return out


def expected_v2_replay(
    session_id: str, users: list[str], agents: list[str], calls: list[str]
) -> list[dict[str, Any]]:
    """The story of :func:`a_v2_conversation` (or the v1 one) as a v2 replay sends it: each
    agent message's chunk preceded by its whole-message update (``content: []``)."""
    pending = {"title": "Ready for implementation", "kind": "switch_mode", "status": "pending"}
    u1, u2, u3 = users
    a1, a2, a3 = agents
    rejected, approved = calls
    call = "tool_call_update"
    return [
        update(session_id, sessionUpdate="user_message", messageId=u1, content=[text("first")]),
        update(
            session_id,
            sessionUpdate=call,
            toolCallId=rejected,
            **pending,
            content=tool_text("first"),
        ),
        update(
            session_id,
            sessionUpdate=call,
            toolCallId=rejected,
            status="failed",
            content=tool_text("Declined: staying in architect mode."),
        ),
        *replied(session_id, a1, "Not switched (option_rejected): still in architect mode."),
        update(session_id, sessionUpdate="user_message", messageId=u2, content=[text(PLAN)]),
        update(
            session_id, sessionUpdate=call, toolCallId=approved, **pending, content=tool_text(PLAN)
        ),
        update(
            session_id,
            sessionUpdate=call,
            toolCallId=approved,
            status="completed",
            content=tool_text("Switched to code mode."),
        ),
        *replied(session_id, a2, "Approved: now in code mode."),
        update(
            session_id,
            sessionUpdate="user_message",
            messageId=u3,
            content=[text("hello"), text("there")],
        ),
        *replied(session_id, a3, "Mode code: hello there"),
    ]


class TestV2Session:
    async def test_resume_after_a_restart_replays_exactly_what_replay_from_asks(self, log_path):
        async with serve_v2(log_path) as (conn, client):
            session_id, live = await a_v2_conversation(conn, client)
        users = ids_of(live, "user_message", "messageId")
        agents = ids_of(live, "agent_message_chunk", "messageId")
        calls = ids_of(live, "tool_call_update", "toolCallId")
        story = expected_v2_replay(session_id, users, agents, calls)
        # the replay repeats the live frames exactly, each agent message first announced
        assert conversation_of(live) == unprimed(story)
        records = read_log(log_path)

        async with serve_v2(log_path) as (conn, client):
            # no replayFrom: the mode restored from the log, nothing replayed
            assert await resume(conn, client, session_id) == [idle(session_id), answer(1, "code")]
            # from the start: the whole conversation, then the current mode once
            frames = await resume(conn, client, session_id, {"type": "start"})
            assert frames == [*story, idle(session_id), answer(2, "code")]
            # from a middle point, inclusive: the second user message, then an agent message
            frames = await resume(conn, client, session_id, {"type": CURSOR, "messageId": users[1]})
            assert frames == [*story[5:], idle(session_id), answer(3, "code")]
            assert story[5]["params"]["update"]["messageId"] == users[1]
            frames = await resume(
                conn, client, session_id, {"type": CURSOR, "messageId": agents[2]}
            )
            assert frames == [*story[-2:], idle(session_id), answer(4, "code")]
            assert story[-2] == primer(session_id, agents[2])
            # {"type": "start"} may carry _meta
            meta = {"type": "start", "_meta": {"k": 1}}
            assert await resume(conn, client, session_id, meta) == [
                *story,
                idle(session_id),
                answer(5, "code"),
            ]
        assert read_log(log_path) == records  # resuming changed and logged nothing

    async def test_an_invalid_replay_from_is_minus_32602_naming_the_field_and_sends_nothing(
        self, log_path
    ):
        async with serve_v2(log_path) as (conn, client):
            session_id, _live = await a_v2_conversation(conn, client)
        cases: list[tuple[dict[str, Any], str]] = [
            ({"type": "end"}, "replayFrom"),  # reserved for future ACP cursors
            ({"type": "_other/cursor"}, "replayFrom"),  # another implementation's
            ({"type": CURSOR}, "replayFrom"),
            ({"type": CURSOR, "messageId": ""}, "replayFrom"),
            ({"type": CURSOR, "messageId": "msg_1", "extra": 1}, "replayFrom"),
            ({"type": CURSOR, "messageId": "msg_never"}, "replayFrom.messageId"),
        ]
        async with serve_v2(log_path) as (conn, client):  # after a restart: not restored yet
            for cursor, field in cases:
                mark = client.mark()
                with pytest.raises(RequestError) as error:
                    await resume(conn, client, session_id, cursor)
                sent = client.since(mark)  # the error, and nothing before it
                assert [set(f) for f in sent] == [{"jsonrpc", "id", "error"}], cursor
                assert error.value.code == sent[0]["error"]["code"] == -32602, cursor
                assert error.value.data["field"] == field, cursor
            assert error.value.data == {
                "field": "replayFrom.messageId",
                "value": "msg_never",
                "message": "replayFrom.messageId: 'msg_never' is not in the session's kept "
                "conversation",
            }
            with pytest.raises(RequestError) as unknown:
                await resume(conn, client, "sess_never", {"type": "start"})
            assert (unknown.value.code, unknown.value.data) == (-32002, {"sessionId": "sess_never"})
            frames = await resume(conn, client, session_id)
            assert frames == [idle(session_id), answer(8, "code")]
            # raw values the SDK's model would turn into null (no replay): refused too
            values: list[Any] = [5, "start", {"type": 1}, [], {"type": "start", "x": 1}]
            for value in values:
                params = {"sessionId": session_id, "cwd": "/", "replayFrom": value}
                with pytest.raises(RequestError) as error:
                    await conn._conn.send_request("session/resume", params)
                assert error.value.code == -32602, value
                assert error.value.data["field"] == "replayFrom", value
                assert error.value.data["valid"] == [
                    {"type": "start"},
                    {"type": CURSOR, "messageId": "<messageId>"},
                ]


MINTED = re.compile(r"msg_[0-9a-f]{32}")


class TestV1SessionOverV2:
    async def test_a_v1_conversation_resumed_over_v2_continued_and_loaded_over_v1(self, log_path):
        async with serve_v1(log_path) as (conn, client):
            session_id, rejected, approved = await a_conversation(conn, client)
        async with serve_v2(log_path) as (conn, client):
            first = await resume(conn, client, session_id, {"type": "start"})
            replayed = first[:-2]
            users = ids_of(replayed, "user_message", "messageId")
            agents = ids_of(replayed, "agent_message_chunk", "messageId")
            assert first == [
                *expected_v2_replay(session_id, users, agents, [rejected, approved]),
                idle(session_id),
                answer(1, "code"),
            ]
            # ids minted for a v1 turn's messages: distinct, usable as a cursor
            assert all(MINTED.fullmatch(i) for i in users + agents)
            assert len(set(users + agents)) == 6
            middle = await resume(
                conn, client, session_id, {"type": CURSOR, "messageId": agents[0]}
            )
            assert middle == [*replayed[3:], idle(session_id), answer(2, "code")]
            assert replayed[3] == primer(session_id, agents[0])
            # the conversation continues over v2
            mark = client.mark()
            more = [s2.TextContentBlock(text="more")]
            response = await asyncio.wait_for(
                conn.prompt(session_id=session_id, prompt=more), TIMEOUT
            )
            live = conversation_of(client.since(mark))
        reply = live[1]["params"]["update"]["messageId"]
        assert live == [
            update(
                session_id,
                sessionUpdate="user_message",
                messageId=response.message_id,
                content=[text("more")],
            ),
            update(
                session_id,
                sessionUpdate="agent_message_chunk",
                messageId=reply,
                content=text("Mode code: more"),
            ),
        ]
        async with serve_v1(log_path) as (conn, client):
            mark = client.mark()
            await conn.load_session(cwd=".", session_id=session_id)
            loaded = client.since(mark)[:-1]
        # v1 load: the v1 turns exactly as before, then the v2 turn with its messageIds
        assert loaded == [
            *expected_replay(session_id, rejected, approved),
            {
                "method": "session/update",
                "params": {
                    "sessionId": session_id,
                    "update": {
                        "sessionUpdate": "user_message_chunk",
                        "content": text("more"),
                        "messageId": response.message_id,
                    },
                },
            },
            {
                "method": "session/update",
                "params": {
                    "sessionId": session_id,
                    "update": {
                        "sessionUpdate": "agent_message_chunk",
                        "content": text("Mode code: more"),
                        "messageId": reply,
                    },
                },
            },
        ]
        async with serve_v2(log_path) as (conn, client):  # after a restart: the same ids
            again = await resume(conn, client, session_id, {"type": "start"})
            cursor = {"type": CURSOR, "messageId": response.message_id}
            tail = await resume(conn, client, session_id, cursor)
        primed = [live[0], primer(session_id, reply), live[1]]  # the replay announces it
        assert again == [*replayed, *primed, idle(session_id), answer(1, "code")]
        assert tail == [*primed, idle(session_id), answer(2, "code")]


@pytest.mark.parametrize(
    ("cursor", "message"),
    [
        ({"type": "end"}, "replayFrom: 'end' is not a replay cursor this agent serves"),
        ({"type": 1}, ("replayFrom: a cursor without a string type is not a replay cursor this "
                      "agent serves")),
        ({"type": "start", "x": 1}, "replayFrom: a 'start' cursor has no member 'x'"),
        ({"type": "start", "_meta": []}, "replayFrom._meta: an object, not an array"),
        ({"type": CURSOR}, f"replayFrom.messageId: a '{CURSOR}' cursor needs a non-empty string"),
        ({"type": CURSOR, "messageId": ["m"]},
         f"replayFrom.messageId: a '{CURSOR}' cursor needs a non-empty string"),
    ],
)  # fmt: skip
def test_a_refused_cursor_is_named_for_what_is_wrong(cursor: Any, message: str) -> None:
    """A cursor of a served type refused for a member says which member, not that the
    type is not served."""
    from modefsm.protocol.v2._agent import replay_cursor

    valid = f"(valid: {{'type': 'start'}}, {{'type': '{CURSOR}', 'messageId': ...}})"
    with pytest.raises(RequestError) as error:
        replay_cursor(cursor)
    assert (error.value.code, error.value.data["field"]) == (-32602, "replayFrom")
    assert error.value.data["message"] == f"{message} {valid}"
