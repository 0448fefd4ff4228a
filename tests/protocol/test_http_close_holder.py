"""`session/close` on one connection of `modefsm serve --http` ends that connection's hold only.

Two SDK clients (one v1, one v2) hold one session of one real server process. A close by
a holder that is not the last one cancels that connection's own work on the session and
answers success; the session stays live and unchanged for the other holder. The last
holder's close ends the session as on stdio.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import acp
import pytest

from tests.acp_client import select, text_block
from tests.conftest import mode_option
from tests.protocol.http_wire import (
    SEED,
    TIMEOUT,
    mode_updates,
    modes,
    shared_server,
    until,
    v1_client,
    verify,
)
from tests.protocol.test_http_v2 import prompt_text, records, v2_client
from tests.protocol.v2_frames import Frames, option_v2, text

pytestmark = pytest.mark.e2e


def canonical(frame: dict[str, Any]) -> str:
    """A frame's sort key: its JSON with sorted keys (frames from the wire keep theirs)."""
    return json.dumps(frame, sort_keys=True)


FRAMES = Frames(jsonrpc=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with shared_server(tmp_path_factory, "close") as served:
        yield served


class Side:
    """One connection as the test drives it, whichever ACP version it speaks."""

    def __init__(self, version: int, conn: Any, client: Any) -> None:
        self.version = version
        self.conn = conn
        self.client = client

    async def new(self) -> str:
        return (await self.conn.new_session(cwd="/")).session_id  # type: ignore[no-any-return]

    async def attach(self, session_id: str) -> str:
        """``session/load`` (v1) or ``session/resume`` (v2); the mode it reports."""
        if self.version == 1:
            loaded = await self.conn.load_session(cwd="/", session_id=session_id)
            return loaded.modes.current_mode_id  # type: ignore[no-any-return]
        resumed = await self.conn.resume_session(session_id=session_id, cwd="/")
        return resumed.config_options[0].current_value  # type: ignore[no-any-return]

    def attached(self, session_id: str, mode: str, request_id: int) -> list[dict[str, Any]]:
        """What an attach of a session without a conversation sends, whole."""
        if self.version == 1:
            result = {"modes": modes(mode), "configOptions": [mode_option(SEED, mode)]}
            return [{"id": request_id, "result": result}]
        return [
            FRAMES.state(session_id, "idle"),
            {"id": request_id, "result": {"configOptions": [option_v2(mode)]}},
        ]

    async def set(self, session_id: str, mode: str) -> None:
        if self.version == 1:
            await self.conn.set_session_mode(session_id=session_id, mode_id=mode)
        else:
            await self.conn.set_config_option(
                config_id="mode", session_id=session_id, value=mode, type="id"
            )

    def changed(self, session_id: str, mode: str) -> list[dict[str, Any]]:
        """The notifications of a change to *mode* this side gets."""
        if self.version == 1:
            return mode_updates(session_id, mode)
        return [FRAMES.options_update(session_id, mode)]

    def set_answer(self, mode: str, request_id: int) -> dict[str, Any]:
        if self.version == 1:
            return {"id": request_id, "result": {}}
        return {"id": request_id, "result": {"configOptions": [option_v2(mode)]}}

    async def close(self, session_id: str) -> None:
        await self.conn.close_session(session_id=session_id)

    def mark(self) -> int:
        return self.client.mark()  # type: ignore[no-any-return]

    def since(self, mark: int) -> list[dict[str, Any]]:
        return self.client.since(mark)  # type: ignore[no-any-return]


def client_of(version: int, url: str, kind: str) -> Any:
    return v1_client(url, kind) if version == 1 else v2_client(url, kind)


@pytest.mark.parametrize(
    ("a_version", "a_kind", "b_version", "b_kind"),
    [(1, "http", 2, "ws"), (2, "ws", 1, "http")],
    ids=["A-v1-http+B-v2-ws", "A-v2-ws+B-v1-http"],
)
async def test_one_holder_closes_the_other_keeps_the_session(
    server, a_version, a_kind, b_version, b_kind
):
    url, log_path = server
    async with (
        client_of(a_version, url, a_kind) as (a_conn, a_client),
        client_of(b_version, url, b_kind) as (b_conn, b_client),
    ):
        a, b = Side(a_version, a_conn, a_client), Side(b_version, b_conn, b_client)
        session_id = await a.new()  # A: id 1
        assert await b.attach(session_id) == "ask"  # B: id 1

        mark_a = a.mark()
        await a.close(session_id)  # A: id 2
        mark_b = b.mark()
        await b.set(session_id, "code")  # B: id 2
        assert b.since(mark_b) == [*b.changed(session_id, "code"), b.set_answer("code", 2)]

        # A attaches again: it holds the session and hears B's next change
        assert await a.attach(session_id) == "code"  # A: id 3
        mark_b = b.mark()
        await b.set(session_id, "architect")  # B: id 3
        assert b.since(mark_b) == [
            *b.changed(session_id, "architect"),
            b.set_answer("architect", 3),
        ]
        expected_a = [
            {"id": 2, "result": {}},  # the close; nothing of B's change to code
            *a.attached(session_id, "code", 3),
            *a.changed(session_id, "architect"),
        ]
        await until(lambda: len(a.since(mark_a)) >= len(expected_a), "A never heard of it")
        assert a.since(mark_a) == expected_a

        # B leaves; A, the last holder, closes: the session ends for everyone
        await b.close(session_id)  # B: id 4
        mark_a = a.mark()
        await a.set(session_id, "ask")  # A: id 4
        assert a.since(mark_a) == [*a.changed(session_id, "ask"), a.set_answer("ask", 4)]
        await a.close(session_id)  # A: id 5
        for side in (a, b):
            with pytest.raises(acp.RequestError) as info:
                await side.set(session_id, "code")
            assert info.value.code == -32002

        # and it comes back from the log on the next load, in its last mode
        assert await b.attach(session_id) == "ask"
    assert [r for r in records(log_path, session_id) if r[0] != "change_rejected"] == [
        ("session_created", "ask", "new", None, None if a_version == 1 else 2),
        (
            "mode_changed",
            "code",
            "set_mode" if b_version == 1 else "set_config_option",
            None,
            None if b_version == 1 else 2,
        ),
        (
            "mode_changed",
            "architect",
            "set_mode" if b_version == 1 else "set_config_option",
            None,
            None if b_version == 1 else 2,
        ),
        (
            "mode_changed",
            "ask",
            "set_mode" if a_version == 1 else "set_config_option",
            None,
            None if a_version == 1 else 2,
        ),
    ]
    assert verify(log_path) == "RESULT  clean"


async def test_a_closing_holders_pending_switch_ends_cancelled_the_others_stays(server):
    """A (v1) and B (v2) each wait on a permission of their own prompt; A closes: A's turn
    ends ``cancelled`` (A hears how, before its close is answered), B's waits on and then
    lands. B, the last holder, then closes with a permission pending: that switch ends
    ``cancelled`` too (a close cancels as ``session/cancel`` does), once."""
    url, log_path = server
    never = asyncio.Event()

    async def undecided(options: list[Any], tool_call: Any) -> Any:
        await never.wait()  # the close withdraws the request ($/cancel_request)
        return select("code")

    async with v1_client(url, "http") as (a, seen_a), v2_client(url, "ws") as (b, seen_b):
        session_id = (await b.new_session(cwd="/")).session_id  # B: id 1
        await b.set_config_option(  # B: id 2
            config_id="mode", session_id=session_id, value="architect", type="id"
        )
        await a.load_session(cwd="/", session_id=session_id)  # A: id 1
        seen_a.answer = undecided
        turn_a = asyncio.ensure_future(
            a.prompt(session_id=session_id, prompt=[text_block("plan A")])  # A: id 2
        )
        await asyncio.wait_for(seen_a.pending.wait(), TIMEOUT)
        call_a = seen_a.updates(session_id)[-1]["update"]["toolCallId"]
        await until(lambda: any(call_a in str(f) for f in seen_b.since(0)), "B never saw A's call")
        seen_b.release = asyncio.Event()
        turn_b = asyncio.ensure_future(
            b.prompt(session_id=session_id, prompt=prompt_text("plan B"))  # B: id 3
        )
        await asyncio.wait_for(seen_b.asked.wait(), TIMEOUT)

        mark_a = seen_a.mark()
        mark_b = seen_b.mark()
        await a.close_session(session_id=session_id)  # A: id 3
        stopped = await asyncio.wait_for(turn_a, TIMEOUT)
        assert stopped.stop_reason == "cancelled"
        failed = FRAMES.update(
            session_id,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": call_a,
                "status": "failed",
                "content": text("Cancelled: staying in architect mode."),
            },
        )
        # B hears how A's switch ended, as of any turn of a session it holds; its own
        # permission request stays open
        await until(lambda: seen_b.since(mark_b), "B never heard of A's switch")
        assert seen_b.since(mark_b) == [failed]
        assert not turn_b.done()

        seen_b.answer = {"outcome": "selected", "optionId": "code"}
        seen_b.release.set()
        await asyncio.wait_for(turn_b, TIMEOUT)
        mark_b = seen_b.mark()
        await b.set_config_option(  # B: id 4
            config_id="mode", session_id=session_id, value="architect", type="id"
        )
        assert seen_b.since(mark_b) == [
            FRAMES.options_update(session_id, "architect"),
            {"id": 4, "result": {"configOptions": [option_v2("architect")]}},
        ]

        # B, the last holder, closes while its next switch waits on the user
        seen_b.asked.clear()
        seen_b.release = asyncio.Event()  # never set
        turn_b = asyncio.ensure_future(
            b.prompt(session_id=session_id, prompt=prompt_text("plan B2"))  # B: id 5
        )
        await asyncio.wait_for(seen_b.asked.wait(), TIMEOUT)
        await b.close_session(session_id=session_id)  # B: id 6
        await asyncio.wait_for(turn_b, TIMEOUT)
        # A got the end of its own switch, its two answers and the withdrawal of its
        # permission request (the answers and the withdrawal on the connection's stream:
        # their order against the session's is not fixed), nothing after its close
        got = seen_a.since(mark_a)
        assert sorted(got, key=canonical) == sorted(
            [
                failed,
                {"id": 3, "result": {}},
                {"id": 2, "result": {"stopReason": "cancelled"}},
                {"method": "$/cancel_request", "params": {"requestId": 0}},
            ],
            key=canonical,
        )
        assert got.index(failed) < got.index({"id": 3, "result": {}})
    assert records(log_path, session_id) == [
        ("session_created", "ask", "new", None, 2),
        ("mode_changed", "architect", "set_config_option", None, 2),
        ("change_rejected", None, "switch_mode", "cancelled", None),
        ("mode_changed", "code", "switch_mode", None, 2),
        ("mode_changed", "architect", "set_config_option", None, 2),
        ("change_rejected", None, "switch_mode", "cancelled", 2),
    ]
    assert verify(log_path) == "RESULT  clean"


async def test_a_v2_holder_closing_during_its_switch_leaves_a_v1_holder_untouched(server):
    url, log_path = server
    async with v2_client(url, "http") as (a, seen_a), v1_client(url, "ws") as (b, seen_b):
        session_id = (await b.new_session(cwd="/")).session_id  # B: id 1
        await b.set_session_mode(session_id=session_id, mode_id="architect")  # B: id 2
        await a.resume_session(session_id=session_id, cwd="/")  # A: id 1
        seen_a.release = asyncio.Event()  # never set: A's user does not decide
        turn_a = asyncio.ensure_future(
            a.prompt(session_id=session_id, prompt=prompt_text("plan A"))  # A: id 2
        )
        await asyncio.wait_for(seen_a.asked.wait(), TIMEOUT)
        call_a = next(
            f["params"]["update"]["toolCallId"]
            for f in seen_a.since(0)
            if f.get("params", {}).get("update", {}).get("sessionUpdate") == "tool_call_update"
        )
        await until(lambda: any(call_a in str(f) for f in seen_b.since(0)), "B never saw A's call")
        mark_a = seen_a.mark()
        mark_b = seen_b.mark()
        await a.close_session(session_id=session_id)  # A: id 3
        answered = await asyncio.wait_for(turn_a, TIMEOUT)
        failed = FRAMES.update(
            session_id,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": call_a,
                "status": "failed",
                "content": text("Cancelled: staying in architect mode."),
            },
        )
        await until(lambda: seen_b.since(mark_b), "B never heard of A's switch")
        assert seen_b.since(mark_b) == [failed]  # v2's state_updates never reach v1
        mark_b = seen_b.mark()
        await b.set_session_mode(session_id=session_id, mode_id="code")  # B: id 3
        assert seen_b.since(mark_b) == [*mode_updates(session_id, "code"), {"id": 3, "result": {}}]
        await b.close_session(session_id=session_id)  # B: id 4, the last holder
        # A hears its turn end (the switch failed, idle ``cancelled``) before its close is
        # answered; the answers and the withdrawal come on the connection's stream
        got = seen_a.since(mark_a)
        ended = [
            FRAMES.state(session_id, "running"),
            failed,
            FRAMES.state(session_id, "idle", stopReason="cancelled"),
        ]
        assert sorted(got, key=canonical) == sorted(
            [
                *ended,
                {"id": 3, "result": {}},
                {"id": 2, "result": {"messageId": answered.message_id}},
                {"method": "$/cancel_request", "params": {"requestId": 0}},
            ],
            key=canonical,
        )
        assert [f for f in got if f.get("method") == "session/update"] == ended
        assert got.index(ended[-1]) < got.index({"id": 3, "result": {}})
    assert records(log_path, session_id) == [
        ("session_created", "ask", "new", None, None),
        ("mode_changed", "architect", "set_mode", None, None),
        ("change_rejected", None, "switch_mode", "cancelled", 2),
        ("mode_changed", "code", "set_mode", None, None),
    ]
    assert verify(log_path) == "RESULT  clean"
