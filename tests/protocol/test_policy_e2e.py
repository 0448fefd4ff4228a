"""Policy safety end to end: the SDK client against real `modefsm serve` processes.

Each test is one scenario of a user or an attacker trying to land a session in a mode the
policy forbids or the user was not shown (the `permission` preset: `bypassPermissions` is
never restored).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import acp
import orjson
import pytest

from modefsm import preset
from modefsm.cli._serve import index_path
from tests.acp_client import TestClient, select, serve, text_block
from tests.conftest import announced, read_log

pytestmark = pytest.mark.e2e

SPEC = preset("permission")
PRESET = ("--preset", "permission")
PLAN = "## Plan\n1. Edit"
ACCEPT = {"optionId": "exit_plan_accept_edits", "name": "Yes, and auto-accept edits",
          "kind": "allow_always"}  # fmt: skip
DEFAULT = {"optionId": "exit_plan_default", "name": "Yes, and manually approve edits",
           "kind": "allow_once"}  # fmt: skip
KEEP = {"optionId": "keep_planning", "name": "No, keep planning", "kind": "reject_once"}
BACK_TO_BYPASS = {
    "optionId": "exit_plan_previous",
    "name": "Yes, and return to the mode I was in (Bypass Permissions)",
    "kind": "allow_once",
}


def update(session_id: str, **fields: Any) -> dict[str, Any]:
    return {"sessionId": session_id, "update": fields}


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "content", "content": {"type": "text", "text": value}}]


def switch_frames(client: TestClient, mark: int) -> tuple[list[Any], list[dict[str, Any]]]:
    """The options of the permission request after *mark*, and the updates after it."""
    frames = client.since(mark)
    request = next(f for f in frames if f.get("method") == "session/request_permission")
    after = frames[frames.index(request) + 1 :]
    return request["params"]["options"], [
        f["params"] for f in after if f.get("method") == "session/update"
    ]


async def session_in_plan(conn: Any, *before: str) -> str:
    session_id: str = (await conn.new_session(cwd=".")).session_id
    for mode in (*before, "plan"):
        await conn.set_session_mode(session_id=session_id, mode_id=mode)
    return session_id


def changes(log: Path) -> list[tuple[Any, ...]]:
    return [
        (r["seq"], r["from_mode"], r["to_mode"], r["origin"])
        for r in read_log(log)
        if r["event"] != "modefsm.change_rejected" and r["event"].startswith("modefsm.")
        and "seq" in r
    ]  # fmt: skip


class TestOptionsNameTheirTargets:
    """The exit dialog names every target; a "return" that duplicates another is dropped."""

    async def test_options_shown(self, log_path):
        cases = {
            ("bypassPermissions",): [ACCEPT, BACK_TO_BYPASS, DEFAULT, KEEP],
            ("acceptEdits",): [ACCEPT, DEFAULT, KEEP],  # "return" = "auto-accept": dropped
            (): [ACCEPT, DEFAULT, KEEP],  # "return" = "manually approve": dropped
        }
        shown = {}
        async with serve(log_path, *PRESET) as (conn, client):
            client.answer = lambda options, tool_call: _reject()
            for before in cases:
                session_id = await session_in_plan(conn, *before)
                mark = client.mark()
                await conn.prompt(session_id=session_id, prompt=[text_block(PLAN)])
                shown[before] = switch_frames(client, mark)[0]
        assert shown == cases

    async def test_approving_the_named_return_lands_where_it_said(self, log_path):
        async with serve(log_path, *PRESET) as (conn, client):
            client.answer = lambda options, tool_call: _select("exit_plan_previous")
            session_id = await session_in_plan(conn, "bypassPermissions")
            mark = client.mark()
            await conn.prompt(session_id=session_id, prompt=[text_block(PLAN)])
            shown, updates = switch_frames(client, mark)
        assert shown[1] == BACK_TO_BYPASS
        assert updates[:2] == announced(SPEC, session_id, "bypassPermissions")
        assert changes(log_path)[-1] == (4, "plan", "bypassPermissions", "switch_mode")


class TestRestartDoesNotCarryBypass:
    """bypass -> plan, restart, load: "return" is not offered, and selecting it does nothing."""

    async def test_return_to_bypass_after_a_restart(self, log_path):
        async with serve(log_path, *PRESET) as (conn, _client):
            session_id = await session_in_plan(conn, "bypassPermissions")
        async with serve(log_path, *PRESET) as (conn, client):
            loaded = await conn.load_session(cwd=".", session_id=session_id)
            # a forged or outdated client answers with the option it saw before the restart
            client.answer = lambda options, tool_call: _select("exit_plan_previous")
            mark = client.mark()
            response = await conn.prompt(session_id=session_id, prompt=[text_block(PLAN)])
            shown, updates = switch_frames(client, mark)
        assert loaded.modes.current_mode_id == "plan"
        assert shown == [ACCEPT, DEFAULT, KEEP]
        call_id = updates[0]["update"]["toolCallId"]
        assert (response.stop_reason, updates) == (
            "end_turn",
            [
                update(
                    session_id,
                    sessionUpdate="tool_call_update",
                    toolCallId=call_id,
                    status="failed",
                    content=text("Refused: the answer selected an option that was not offered."),
                ),
                update(
                    session_id,
                    sessionUpdate="agent_message_chunk",
                    content={
                        "type": "text",
                        "text": "Not switched (option_not_offered): still in plan mode.",
                    },
                ),
            ],
        )
        records = read_log(log_path)
        assert changes(log_path) == [
            (1, None, "default", "new"),
            (2, "default", "bypassPermissions", "set_mode"),
            (3, "bypassPermissions", "plan", "set_mode"),
        ]
        assert (records[-1]["reason"], records[-1]["option_id"]) == (
            "option_not_offered",
            "exit_plan_previous",
        )


class TestStaleDialog:
    """bypass -> plan, dialog open, the user moves to default, then approves "return"."""

    async def test_stale_return_is_refused_and_logged(self, log_path):
        release = asyncio.Event()

        async def answer(options, tool_call):
            await release.wait()
            return select("exit_plan_previous")

        async with serve(log_path, *PRESET) as (conn, client):
            client.answer = answer
            session_id = await session_in_plan(conn, "bypassPermissions")
            mark = client.mark()
            turn = asyncio.create_task(
                conn.prompt(session_id=session_id, prompt=[text_block(PLAN)])
            )
            await asyncio.wait_for(client.pending.wait(), 10)
            await conn.set_session_mode(session_id=session_id, mode_id="default")
            release.set()
            response = await asyncio.wait_for(turn, 10)
            shown, updates = switch_frames(client, mark)
        assert shown == [ACCEPT, BACK_TO_BYPASS, DEFAULT, KEEP]
        call_id = updates[-2]["update"]["toolCallId"]
        assert (response.stop_reason, updates) == (
            "end_turn",
            [
                *announced(SPEC, session_id, "default"),  # the user's own change, only
                update(
                    session_id,
                    sessionUpdate="tool_call_update",
                    toolCallId=call_id,
                    status="failed",
                    content=text(
                        "Refused: the mode changed while the request was open; "
                        "staying in default mode."
                    ),
                ),
                update(
                    session_id,
                    sessionUpdate="agent_message_chunk",
                    content={
                        "type": "text",
                        "text": "Not switched (stale_option): still in default mode.",
                    },
                ),
            ],
        )
        assert changes(log_path)[-1] == (4, "plan", "default", "set_mode")
        last = read_log(log_path)[-1]
        assert (
            last["event"], last["reason"], last["from_mode"], last["to_mode"],
            last["option_id"], last["proposed_in"], last["tool_call_id"],
        ) == (
            "modefsm.change_rejected", "stale_option", "default", "bypassPermissions",
            "exit_plan_previous", "plan", call_id,
        )  # fmt: skip


class TestTamperedIndex:
    """Rows of the restore index that the log does not back are not believed."""

    async def test_forged_and_altered_rows(self, log_path):
        async with serve(log_path, *PRESET) as (conn, _client):
            session_id = (await conn.new_session(cwd=".")).session_id
            await conn.set_session_mode(session_id=session_id, mode_id="acceptEdits")
        digest = orjson.loads(log_path.read_bytes().splitlines()[-1])["digest"]
        with sqlite3.connect(index_path(log_path)) as db:
            db.execute(
                "INSERT INTO sessions (session_id, mode, seq, previous, digest, offset) "
                "VALUES ('sess_forged', 'acceptEdits', 7, 'default', ?, ?)",
                (digest, log_path.stat().st_size),
            )
            db.execute(
                "UPDATE sessions SET mode = 'plan', seq = 9 WHERE session_id = ?", (session_id,)
            )
        db.close()
        async with serve(log_path, *PRESET) as (conn, _client):
            with pytest.raises(acp.RequestError) as forged:
                await conn.load_session(cwd=".", session_id="sess_forged")
            loaded = await conn.load_session(cwd=".", session_id=session_id)
            await conn.set_session_mode(session_id=session_id, mode_id="default")
        assert (forged.value.code, forged.value.data) == (-32002, {"uri": "sess_forged"})
        assert loaded.modes.current_mode_id == "acceptEdits"
        assert changes(log_path) == [
            (1, None, "default", "new"),
            (2, "default", "acceptEdits", "set_mode"),
            (3, "acceptEdits", "default", "set_mode"),
        ]
        mismatches = [
            {k: r[k] for k in ("session_id", "problem", "index_mode", "index_seq",
                               "log_mode", "log_seq")}
            for r in read_log(log_path)
            if r["event"] == "modefsm.restore_index_mismatch"
        ]  # fmt: skip
        # the header and two records: the byte the forged row points at
        end = len(b"".join(log_path.read_bytes().splitlines(keepends=True)[:3]))
        assert mismatches == [
            {
                "session_id": "sess_forged",
                "problem": f"the log's record at byte {end} is session {session_id!r} seq 2 in "
                "'acceptEdits', not session 'sess_forged' seq 7 in 'acceptEdits'",
                "index_mode": "acceptEdits",
                "index_seq": 7,
                "log_mode": None,
                "log_seq": None,
            },
            {
                "session_id": session_id,
                "problem": f"the log's record at byte {end} is session {session_id!r} seq 2 in "
                f"'acceptEdits', not session {session_id!r} seq 9 in 'plan'",
                "index_mode": "plan",
                "index_seq": 9,
                "log_mode": "acceptEdits",
                "log_seq": 2,
            },
        ]


async def _reject() -> Any:
    return select("keep_planning")


async def _select(option_id: str) -> Any:
    return select(option_id)


class TestPolicyRefusal:
    """set_mode to an advertised mode the policy forbids from the current one: -32602."""

    async def test_refusal_frame_names_the_allowed_targets(self, log_path):
        async with serve(log_path, *PRESET) as (conn, client):
            session_id = await session_in_plan(conn)
            mark = client.mark()
            with pytest.raises(acp.RequestError):
                await conn.set_session_mode(session_id=session_id, mode_id="bypassPermissions")
            frames = client.since(mark)
        message = (
            f"modeId: set_mode may not change session {session_id!r} from mode 'plan' to "
            "'bypassPermissions'; allowed from 'plan': 'default'"
        )
        assert frames == [
            {
                "id": frames[0]["id"],
                "error": {
                    "code": -32602,
                    "message": message,
                    "data": {
                        "field": "modeId",
                        "value": "bypassPermissions",
                        "valid": ["default"],
                        "message": message,
                    },
                },
            }
        ]
        last = read_log(log_path)[-1]
        assert (last["event"], last["reason"], last["from_mode"], last["to_mode"]) == (
            "modefsm.change_rejected",
            "not_allowed",
            "plan",
            "bypassPermissions",
        )
