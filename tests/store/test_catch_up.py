"""A process acting on a session first catches up with what another process committed.

Two real `modefsm serve` processes, A and B, each driven by the official SDK client, hold
the same session on one store (the file store, and PostgreSQL). A changes the mode; then
B acts on the session: a prompt, a switch outcome, a change. B must act in the mode A
committed, tell its client (``current_mode_update`` and ``config_option_update``) before
anything else of that request, and log from that mode (issue 19: B answered in the old
mode, offered the old mode's switch, and logged its pending switch with the old mode).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import acp
import pytest

from modefsm import preset
from tests.acp_client import TestClient, select, spawn, text_block
from tests.conftest import announced
from tests.store.two_processes import KINDS, FileBackend, PgBackend, backend

pytestmark = pytest.mark.e2e

TIMEOUT = 30.0
SEED = preset("seed")
PERMISSION = preset("permission")
REJECTED = "modefsm.change_rejected"


@contextlib.asynccontextmanager
async def two(
    store: FileBackend | PgBackend, spec: str
) -> AsyncIterator[tuple[tuple[Any, TestClient], tuple[Any, TestClient]]]:
    """Processes A and B serving *spec* on *store*, each with its SDK client."""
    async with contextlib.AsyncExitStack() as stack:
        pair = []
        for index in (0, 1):
            log, args = store.command(index)
            conn, _process, client = await stack.enter_async_context(
                spawn(log, "--preset", spec, *args)
            )
            pair.append((conn, client))
        yield pair[0], pair[1]


async def shared(a: Any, b: Any, *modes: str) -> str:
    """A session A creates and moves through *modes*; B then resumes it (holds it live)."""
    sid: str = (await asyncio.wait_for(a.new_session(cwd="."), TIMEOUT)).session_id
    for mode in modes:
        await asyncio.wait_for(a.set_session_mode(session_id=sid, mode_id=mode), TIMEOUT)
    await asyncio.wait_for(b.resume_session(cwd=".", session_id=sid), TIMEOUT)
    return sid


def told(client: TestClient, mark: int) -> list[dict[str, Any]]:
    """The ``session/update`` params *client* received after *mark*."""
    return [f["params"] for f in client.since(mark) if f.get("method") == "session/update"]


def chunk(sid: str, text: str) -> dict[str, Any]:
    return {
        "sessionId": sid,
        "update": {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": text},
        },
    }


def tool_call(sid: str, call: str, status: str, text: str, **more: Any) -> dict[str, Any]:
    kind = "tool_call" if status == "pending" else "tool_call_update"
    body = {"sessionUpdate": kind, "toolCallId": call, **more, "status": status}
    body["content"] = [{"type": "content", "content": {"type": "text", "text": text}}]
    return {"sessionId": sid, "update": body}


def rejections(store: FileBackend | PgBackend, sid: str) -> list[tuple[Any, ...]]:
    return [
        (r["from_mode"], r.get("proposed_in"), r["reason"])
        for r in store.lines()
        if r.get("event") == REJECTED and r["session_id"] == sid
    ]


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> FileBackend | PgBackend:
    """Each test once on the file store and once on PostgreSQL."""
    return backend(request, request.param, tmp_path)


def clean(store: FileBackend | PgBackend) -> None:
    report = store.replay()
    assert report[-1] == "RESULT  clean", report


async def test_a_prompt_answers_in_the_mode_another_process_set(
    store: FileBackend | PgBackend,
) -> None:
    async with two(store, "seed") as ((a, _ca), (b, client_b)):
        sid = await shared(a, b, "architect")  # B holds it in architect (which has a switch)
        await a.set_session_mode(session_id=sid, mode_id="ask")
        mark = client_b.mark()
        answer = await asyncio.wait_for(
            b.prompt(session_id=sid, prompt=[text_block("go")]), TIMEOUT
        )
        assert answer.stop_reason == "end_turn"
        # no architect switch offered: B answers in ask, and says so first
        assert told(client_b, mark) == [*announced(SEED, sid, "ask"), chunk(sid, "Mode ask: go")]
        assert not [
            f for f in client_b.since(mark) if f.get("method") == "session/request_permission"
        ]
    assert store.committed(sid) == ["ask", "architect", "ask"]
    clean(store)


async def test_a_prompt_offers_the_switch_of_the_mode_another_process_set(
    store: FileBackend | PgBackend,
) -> None:
    async with two(store, "permission") as ((a, _ca), (b, client_b)):
        sid = await shared(a, b, "acceptEdits")
        await a.set_session_mode(session_id=sid, mode_id="plan")

        async def keep_planning(options: Any, tool_call: Any) -> Any:
            return select("keep_planning")

        client_b.answer = keep_planning
        mark = client_b.mark()
        answer = await asyncio.wait_for(
            b.prompt(session_id=sid, prompt=[text_block("go")]), TIMEOUT
        )
        assert answer.stop_reason == "end_turn"
        updates = told(client_b, mark)
        call = updates[2]["update"]["toolCallId"]
        assert updates == [  # it used to answer "Mode acceptEdits: go" in plan mode
            *announced(PERMISSION, sid, "plan"),
            tool_call(sid, call, "pending", "go", title="Exit plan mode", kind="switch_mode"),
            tool_call(sid, call, "failed", "Declined: staying in plan mode."),
            chunk(sid, "Not switched (option_rejected): still in plan mode."),
        ]
    assert store.committed(sid) == ["default", "acceptEdits", "plan"]
    assert rejections(store, sid) == [("plan", "plan", "option_rejected")]
    clean(store)


@pytest.mark.parametrize("outcome", ["rejected", "hung_up"])
async def test_a_pending_switch_is_logged_with_the_mode_committed_meanwhile(
    store: FileBackend | PgBackend, outcome: str
) -> None:
    answered = asyncio.Event()
    async with two(store, "seed") as ((a, _ca), (b, client_b)):
        sid = await shared(a, b, "architect")

        async def hold(options: Any, tool_call: Any) -> Any:
            await answered.wait()  # until A has changed the mode
            return select("reject")

        client_b.answer = hold
        mark = client_b.mark()
        turn = asyncio.ensure_future(b.prompt(session_id=sid, prompt=[text_block("go")]))
        await asyncio.wait_for(client_b.pending.wait(), TIMEOUT)
        await a.set_session_mode(session_id=sid, mode_id="code")
        if outcome == "hung_up":
            await b.close()  # B's client goes away with the permission request open
            with contextlib.suppress(ConnectionError, acp.RequestError):
                await asyncio.wait_for(turn, TIMEOUT)
        else:
            answered.set()
            assert (await asyncio.wait_for(turn, TIMEOUT)).stop_reason == "end_turn"
            updates = told(client_b, mark)
            call = updates[0]["update"]["toolCallId"]
            assert updates[1:] == [
                *announced(SEED, sid, "code"),  # B learns of A's change before the outcome
                tool_call(sid, call, "failed", "Declined: staying in code mode."),
                chunk(sid, "Not switched (option_rejected): still in code mode."),
            ]
    assert store.committed(sid) == ["ask", "architect", "code"]
    reason = "option_rejected" if outcome == "rejected" else "session_closed"
    # logged from the committed mode (it used to say architect, which A had left)
    assert rejections(store, sid) == [("code", "architect", reason)]
    clean(store)


async def test_a_change_is_decided_on_the_mode_another_process_set(
    store: FileBackend | PgBackend,
) -> None:
    async with two(store, "permission") as ((a, _ca), (b, client_b)):
        sid = await shared(a, b, "plan")  # B holds it in plan, from which acceptEdits is refused
        await a.set_session_mode(session_id=sid, mode_id="default")
        mark = client_b.mark()
        # allowed from default: it used to be refused (-32602), judged on B's stale plan
        await asyncio.wait_for(b.set_session_mode(session_id=sid, mode_id="acceptEdits"), TIMEOUT)
        assert told(client_b, mark) == [
            *announced(PERMISSION, sid, "default"),
            *announced(PERMISSION, sid, "acceptEdits"),
        ]
    assert store.committed(sid) == ["default", "plan", "default", "acceptEdits"]
    assert rejections(store, sid) == []
    clean(store)
