"""One engine for every connection of `modefsm serve --http`: two SDK clients, one session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import acp
import pytest

from tests.acp_client import selecting, text_block
from tests.conftest import mode_option
from tests.protocol.http_wire import (
    SEED,
    chain,
    mode_updates,
    modes,
    shared_server,
    until,
    v1_client,
    verify,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with shared_server(tmp_path_factory, "shared") as served:
        yield served


def kinds(frames: list[dict[str, Any]]) -> list[str]:
    return [f["params"]["update"]["sessionUpdate"] for f in frames if "method" in f]


@pytest.mark.parametrize("kind", ["http", "ws"])
async def test_a_session_made_on_one_connection_is_loaded_and_changed_on_another(server, kind):
    url, log_path = server
    async with v1_client(url, kind) as (a, seen_a), v1_client(url, kind) as (b, seen_b):
        session_id = (await a.new_session(cwd=".")).session_id
        await a.set_session_mode(session_id=session_id, mode_id="architect")

        seen_a.answer = selecting("reject")
        await a.prompt(session_id=session_id, prompt=[text_block("plan")])
        told_a = seen_a.updates(session_id)
        conversation = [
            {"method": "session/update", "params": u}
            for u in told_a
            if u["update"]["sessionUpdate"] in {"tool_call", "tool_call_update"}
            or u["update"]["sessionUpdate"] == "agent_message_chunk"
        ]
        assert kinds(conversation) == ["tool_call", "tool_call_update", "agent_message_chunk"]

        mark_a = seen_a.mark()
        mark_b = seen_b.mark()
        loaded = await b.load_session(cwd=".", session_id=session_id)
        # B gets the conversation replayed, then the answer; A gets nothing of it
        user = {
            "method": "session/update",
            "params": {
                "sessionId": session_id,
                "update": {
                    "sessionUpdate": "user_message_chunk",
                    "content": {"type": "text", "text": "plan"},
                },
            },
        }
        assert seen_b.since(mark_b) == [
            user,
            *conversation,
            {
                "id": 1,
                "result": {
                    "modes": modes("architect"),
                    "configOptions": [mode_option(SEED, "architect")],
                },
            },
        ]
        assert loaded.modes.current_mode_id == "architect"
        assert seen_a.since(mark_a) == []

        # a change made on B is announced on both connections
        mark_b = seen_b.mark()
        await b.set_session_mode(session_id=session_id, mode_id="code")
        assert seen_b.since(mark_b) == [
            *mode_updates(session_id, "code"),
            {"id": 2, "result": {}},
        ]
        await until(lambda: len(seen_a.since(mark_a)) == 2, "A never heard of B's change")
        assert seen_a.since(mark_a) == mode_updates(session_id, "code")

        # and one made on A on both, again
        mark_a = seen_a.mark()
        mark_b = seen_b.mark()
        answer = await a.set_config_option(config_id="mode", session_id=session_id, value="ask")
        assert answer.config_options[0].current_value == "ask"
        assert seen_a.since(mark_a)[:2] == mode_updates(session_id, "ask")
        await until(lambda: len(seen_b.since(mark_b)) == 2, "B never heard of A's change")
        assert seen_b.since(mark_b) == mode_updates(session_id, "ask")
    # one chained history of the session, whichever connection made each change
    assert [c for c in chain(log_path, session_id) if c[0] != "change_rejected"] == [
        ("session_created", 1, "ask"),
        ("mode_changed", 2, "architect"),
        ("mode_changed", 3, "code"),
        ("mode_changed", 4, "ask"),
    ]
    assert verify(log_path) == "RESULT  clean"


async def test_a_closed_connection_no_longer_gets_the_sessions_updates(server):
    url, _log = server
    async with v1_client(url, "http") as (b, seen_b):
        async with v1_client(url, "http") as (a, _seen_a):
            session_id = (await a.new_session(cwd=".")).session_id
            await b.load_session(cwd=".", session_id=session_id)
        mark = seen_b.mark()
        await b.set_session_mode(session_id=session_id, mode_id="code")
        assert seen_b.since(mark) == [
            *mode_updates(session_id, "code"),
            {"id": 2, "result": {}},
        ]


async def test_a_failed_load_does_not_hold_the_session(server):
    url, _log = server
    async with v1_client(url, "ws") as (a, seen_a), v1_client(url, "ws") as (b, seen_b):
        session_id = (await a.new_session(cwd=".")).session_id
        with pytest.raises(acp.RequestError) as info:
            await b.load_session(cwd=".", session_id="sess_unknown")
        assert info.value.code == -32002
        mark_b = seen_b.mark()
        await a.set_session_mode(session_id=session_id, mode_id="code")
        assert seen_a.updates(session_id)[-2:] == [
            u["params"] for u in mode_updates(session_id, "code")
        ]
        assert seen_b.since(mark_b) == []
