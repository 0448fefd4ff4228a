"""A ``toolCallId`` a host reuses within one session: every answer is logged as its own request's.

A real host (a script embedding ``ModeAgent``, served by ``serve_negotiated`` on stdio) gives
every ``switch_mode`` switch and every tool call of a session the same ``toolCallId``. The
official SDK clients (v1 and v2) hold the first permission request, cancel the turn, answer
the second request of the same ``toolCallId`` at once, and only then answer the first (a
late answer). The log must show the second answer applied and the late one logged as
``late_answer`` with the first request's id; a second ask of the same ``toolCallId`` while
one is open is refused (``-32602`` naming ``toolCallId``) before anything is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError
from acp.experimental.v2 import schema as s2

from modefsm import preset, replay
from tests.acp_client import (
    TIMEOUT,
    TestClient,
    V2TestClient,
    host_command,
    select,
    spawn_v1,
    spawn_v2,
    text_block,
)
from tests.conftest import read_log

pytestmark = pytest.mark.e2e

SEED = preset("seed")

HOST = textwrap.dedent(
    """
    import asyncio
    import sys

    from acp.schema import PromptResponse

    from modefsm import FileStore, ModeAgent, ToolCall, preset, serve_negotiated

    EDIT = ToolCall("call_1", "edit", "edit_file", "Edit notes.txt")


    class Host(ModeAgent):
        async def prompt(self, prompt, session_id, **kwargs):
            text = " ".join(getattr(block, "text", "") for block in prompt)
            if text == "edit":
                async def edit() -> str:
                    return "edited"

                await self.run_tool(session_id, EDIT, edit)
            elif text == "twice":
                await asyncio.gather(
                    self.propose_switch(session_id, plan="one", tool_call_id="call_1"),
                    self.propose_switch(session_id, plan="two", tool_call_id="call_1"),
                )
            else:
                await self.propose_switch(session_id, plan=text, tool_call_id="call_1")
            return PromptResponse(stop_reason="end_turn")


    asyncio.run(serve_negotiated(Host(preset("seed"), store=FileStore(sys.argv[1]))))
    """
)


async def held(release: asyncio.Event) -> None:
    """Wait for *release*; a ``$/cancel_request`` does not stop the wait (the user's dialog
    stays open, as in a client that answers whatever the user picks, however late)."""
    while not release.is_set():
        with contextlib.suppress(asyncio.CancelledError):
            await release.wait()


class HoldFirst(TestClient):
    """Holds the first permission request until :attr:`release` is set, then selects
    :attr:`late`; answers every later one at once with :attr:`now`."""

    def __init__(self, late: str, now: str) -> None:
        super().__init__()
        self.late, self.now = late, now
        self.release = asyncio.Event()
        self.ended = asyncio.Event()  # set once a tool call ends (completed or failed)
        self.asked = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if getattr(update, "status", None) in {"completed", "failed"}:
            self.ended.set()

    async def request_permission(
        self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any
    ) -> Any:
        self.asked += 1
        self.pending.set()
        if self.asked == 1:
            await held(self.release)
            return select(self.late)
        return select(self.now)


@contextlib.asynccontextmanager
async def host_v1(tmp_path: Path, client: Any) -> AsyncIterator[Any]:
    script, log = tmp_path / "host.py", tmp_path / "modes.jsonl"
    script.write_text(HOST, encoding="utf-8")
    async with spawn_v1(client, *host_command(script, log)) as (conn, _process):
        yield conn


def asked_ids(client: TestClient) -> list[int]:
    return [m["id"] for m in client.received() if m.get("method") == "session/request_permission"]


async def cancelled_then_asked_again(conn: Any, client: HoldFirst, session_id: str, first: str):
    """Prompt *first* (held, then cancelled), prompt it again (answered), release the first."""
    turn = asyncio.ensure_future(conn.prompt(session_id=session_id, prompt=[text_block(first)]))
    await asyncio.wait_for(client.pending.wait(), TIMEOUT)
    await conn.cancel(session_id=session_id)
    await asyncio.wait_for(turn, TIMEOUT)
    await asyncio.wait_for(conn.prompt(session_id=session_id, prompt=[text_block(first)]), TIMEOUT)
    client.release.set()


def dropped_record(session_id: str, request_id: int, option: str, **more: Any) -> dict[str, Any]:
    """The ``answer_dropped`` line of a tool call's late answer: no mode, no origin."""
    return {
        "session_id": session_id,
        "request_id": request_id,
        "tool_call_id": "call_1",
        "option_id": option,
        "reason": "late_answer",
        "spec": "seed",
        "spec_hash": SEED.content_hash,
        **more,
        "event": "modefsm.answer_dropped",
        "level": "warning",
    }


def late_record(
    session_id: str, mode: str, request_id: int, option: str, **more: Any
) -> dict[str, Any]:
    """The ``change_rejected`` record of a switch's late answer: the same fields, and the
    switch's (the mode it was in, no seq, no target, origin ``switch_mode``)."""
    return {
        **dropped_record(session_id, request_id, option, **more),
        "seq": None,
        "from_mode": mode,
        "to_mode": None,
        "origin": "switch_mode",
        "event": "modefsm.change_rejected",
    }


FIRST = "the first request's id"  # stands for it in REUSES

# prompt, mode set first, (late answer, answer now), the records after the creation as
# (event, reason, outcome, request_id, to_mode), the mode of the late answer's record (a
# switch's; a tool call's late answer is no change_rejected record: no mode)
REUSES: dict[str, tuple[str, str | None, tuple[str, str], list[tuple[Any, ...]], str | None]] = {
    "switch": (
        "plan",
        "architect",
        ("code", "code"),
        [
            ("modefsm.mode_changed", None, None, None, "architect"),
            ("modefsm.change_rejected", "cancelled", None, None, None),
            ("modefsm.mode_changed", None, None, None, "code"),
            ("modefsm.change_rejected", "late_answer", None, FIRST, None),
        ],
        "code",
    ),
    "tool": (
        "edit",
        None,
        ("allow_always", "allow_once"),
        [
            ("modefsm.tool_decided", None, "cancelled", None, None),
            ("modefsm.tool_decided", None, "allow_once", None, None),
            ("modefsm.answer_dropped", "late_answer", None, FIRST, None),
        ],
        None,
    ),
}


def shown(records: list[dict[str, Any]], first: int) -> list[tuple[Any, ...]]:
    """*records* but the creation, as REUSES lists them (*first* shown as FIRST)."""
    return [
        (
            r["event"],
            r.get("reason"),
            r.get("outcome"),
            FIRST if r.get("request_id") == first else r.get("request_id"),
            r.get("to_mode"),
        )
        for r in records
        if r["event"] != "modefsm.session_created"
    ]


@pytest.mark.parametrize("reuse", REUSES)
async def test_a_late_answer_to_a_reused_tool_call_id_is_logged_as_its_own(tmp_path: Path, reuse):
    """The second ask's answer is applied; the first's late answer is logged with its id."""
    prompt, set_first, (late, now), expected, mode = REUSES[reuse]
    log = tmp_path / "modes.jsonl"
    client = HoldFirst(late=late, now=now)
    async with host_v1(tmp_path, client) as conn:
        session_id = (await conn.new_session(cwd=str(tmp_path))).session_id
        if set_first is not None:
            await conn.set_session_mode(session_id=session_id, mode_id=set_first)
        await cancelled_then_asked_again(conn, client, session_id, prompt)
        # a request after the late answer: the late answer's record is written by then
        await conn.load_session(cwd=str(tmp_path), session_id=session_id)
    first, second = asked_ids(client)
    assert second != first
    records = read_log(log)
    assert shown(records, first) == expected
    if mode is not None:
        assert records[-1] == late_record(session_id, mode, first, late)
    else:
        assert records[-1] == dropped_record(session_id, first, late)
    assert replay([log], [SEED], verify=True).violations == ()


async def test_a_second_switch_with_an_open_tool_call_id_is_refused(tmp_path: Path):
    log = tmp_path / "modes.jsonl"
    client = HoldFirst(late="code", now="code")
    async with host_v1(tmp_path, client) as conn:
        session_id = (await conn.new_session(cwd=str(tmp_path))).session_id
        await conn.set_session_mode(session_id=session_id, mode_id="architect")
        turn = asyncio.ensure_future(
            conn.prompt(session_id=session_id, prompt=[text_block("twice")])
        )
        await asyncio.wait_for(client.pending.wait(), TIMEOUT)
        client.release.set()
        with pytest.raises(RequestError) as refused:
            await asyncio.wait_for(turn, TIMEOUT)
        # the first switch goes on: wait until its tool call ends
        await asyncio.wait_for(client.ended.wait(), TIMEOUT)
    assert (refused.value.code, refused.value.data) == (
        -32602,
        {
            "field": "toolCallId",
            "value": "call_1",
            "valid": [],
            "message": "toolCallId: 'call_1' already has an open permission request",
        },
    )
    assert len(asked_ids(client)) == 1
    calls = [
        u["update"]["toolCallId"]
        for u in client.updates(session_id)
        if u["update"]["sessionUpdate"] == "tool_call"
    ]
    assert calls == ["call_1"]
    events = [(r["event"], r.get("to_mode")) for r in read_log(log)]
    assert events == [
        ("modefsm.session_created", "ask"),
        ("modefsm.mode_changed", "architect"),
        ("modefsm.mode_changed", "code"),
    ]


class V2HoldFirst(V2TestClient):
    """The SDK's v2 client: holds the first permission request until :attr:`release` is
    set, then selects :attr:`late`; answers every later one at once with :attr:`now`."""

    def __init__(self, late: str, now: str) -> None:
        super().__init__()
        self.late, self.now = late, now
        self.release = asyncio.Event()
        self.pending = asyncio.Event()
        self.asked = 0

    async def request_permission(self, session_id: str, **kwargs: Any) -> Any:
        self.asked += 1
        self.pending.set()
        option_id = self.now
        if self.asked == 1:
            await held(self.release)
            option_id = self.late
        return s2.RequestPermissionResponse(
            outcome=s2.SelectedPermissionOutcomeVariant(option_id=option_id)
        )


@pytest.mark.parametrize("reuse", REUSES)
async def test_v2_a_late_answer_to_a_reused_tool_call_id_is_logged_as_its_own(
    tmp_path: Path, reuse
):
    prompt_text, set_first, (late, now), expected, mode = REUSES[reuse]
    script, log = tmp_path / "host.py", tmp_path / "modes.jsonl"
    script.write_text(HOST, encoding="utf-8")
    client = V2HoldFirst(late=late, now=now)
    async with spawn_v2(client, *host_command(script, log)) as (conn, _process):
        session_id = (await conn.new_session(cwd="/")).session_id
        if set_first is not None:
            await conn.set_config_option(
                config_id="mode", session_id=session_id, value=set_first, type="id"
            )
        prompt: list[Any] = [s2.TextContentBlock(text=prompt_text)]
        turn = asyncio.ensure_future(conn.prompt(session_id=session_id, prompt=prompt))
        await asyncio.wait_for(client.pending.wait(), TIMEOUT)
        await conn.cancel_session(session_id=session_id)
        await asyncio.wait_for(turn, TIMEOUT)
        await asyncio.wait_for(conn.prompt(session_id=session_id, prompt=prompt), TIMEOUT)
        client.release.set()
        await asyncio.wait_for(conn.resume_session(session_id=session_id, cwd="/"), TIMEOUT)
    first = next(f["id"] for f in client.frames if f.get("method") == "session/request_permission")
    records = read_log(log)
    assert shown(records, first) == expected
    if mode is not None:
        assert records[-1] == late_record(session_id, mode, first, late, protocol=2)
    else:
        assert records[-1] == dropped_record(session_id, first, late, protocol=2)
    assert replay([log], [SEED], verify=True).violations == ()
