"""Tool decisions across `modefsm serve --store postgresql://...` workers, end to end.

Real worker processes on one real PostgreSQL database, each driven by the official SDK
client (ACP v1) and each writing its own log (``--log``): an ``allow_always`` given in one
worker is honoured by the other for the same session and mode, not in another mode; a
``persist = true`` grant outlives its worker killed with SIGKILL and is rebuilt by the
next on ``session/load``; a mode changed through one worker governs the other's next tool
call. The decisions are asserted whole from the database's export, which replays clean,
as do the workers' logs read together.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.acp_client import TIMEOUT
from tests.protocol.test_tool_calls import PERSISTENT, answering, asked_call, call_ids
from tests.protocol.tool_clients import ToolClient, connect
from tests.store.two_processes import export_store, replay

pytest.importorskip("psycopg", reason="psycopg is not installed (.[postgresql])")

pytestmark = pytest.mark.e2e


def worker(url: str, log: Path, *args: str) -> Any:
    """``modefsm serve --store URL --log LOG ARGS...`` under the SDK v1 client."""
    return connect(url, "--log", str(log), *args, version=1, option="--store")


def asked(client: ToolClient, mark: int) -> list[str]:
    """The toolCallIds of the permission requests the client got since *mark*."""
    return [
        asked_call(f) for f in client.since(mark) if f.get("method") == "session/request_permission"
    ]


def exported_decisions(url: str, folder: Path) -> list[tuple[Any, ...]]:
    """The export's decisions, in commit order, after checking that it replays clean."""
    export = folder / "export.jsonl"
    export.unlink(missing_ok=True)
    export_store(url, export)
    report = replay(folder, export.name)
    assert report[-1] == "RESULT  clean", report
    keys = ("tool_call_id", "rule", "decision", "outcome", "mode", "mode_seq")
    return [
        tuple(line[k] for k in keys)
        for line in map(orjson.loads, export.read_bytes().splitlines())
        if line["event"] == "modefsm.tool_decided"
    ]


def logs_replay_clean(folder: Path, *names: str) -> None:
    report = replay(folder, *names)
    assert report[-1] == "RESULT  clean", report


async def test_a_grant_in_one_worker_is_honoured_by_the_other_in_its_mode_only(
    postgres_url: str, tmp_path: Path
) -> None:
    preset = ("--preset", "permission")
    async with (
        worker(postgres_url, tmp_path / "w1.jsonl", *preset) as one,
        worker(postgres_url, tmp_path / "w2.jsonl", *preset) as two,
    ):
        session_id = await one.new_session()
        await two.load(session_id)
        one.answer = answering("allow_always")
        first = one.mark()
        await one.prompt(session_id, "run ls")
        second = two.mark()
        await two.prompt(session_id, "run ls")
        await two.set_mode(session_id, "acceptEdits")
        third = two.mark()
        two.answer = answering("reject_once")
        await two.prompt(session_id, "run ls")
    (granted_in_one,) = call_ids(one, first)
    granted_in_two, in_accept_edits = call_ids(two, second)
    assert call_ids(two, third) == [in_accept_edits]
    assert asked(one, first) == [granted_in_one]
    assert asked(two, second) == [in_accept_edits]  # the grant covered the first call
    assert exported_decisions(postgres_url, tmp_path) == [
        (granted_in_one, 1, "ask", "allow_always", "default", 1),
        (granted_in_two, 1, "ask", "granted", "default", 1),
        (in_accept_edits, 1, "ask", "reject_once", "acceptEdits", 2),
    ]
    logs_replay_clean(tmp_path, "w1.jsonl", "w2.jsonl")


async def test_a_persistent_grant_outlives_its_worker_killed_and_is_rebuilt_on_load(
    postgres_url: str, tmp_path: Path
) -> None:
    spec = tmp_path / "persistent.toml"
    spec.write_text(PERSISTENT)
    async with worker(postgres_url, tmp_path / "w1.jsonl", "--spec", str(spec)) as one:
        session_id = await one.new_session()
        one.answer = answering("allow_always")
        await one.prompt(session_id, "run ls")
        process = one.process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(process.wait(), TIMEOUT) == -signal.SIGKILL
    (granted,) = call_ids(one, 0)
    async with worker(postgres_url, tmp_path / "w2.jsonl", "--spec", str(spec)) as two:
        await two.load(session_id)
        two.answer = answering("reject_once")
        mark = two.mark()
        await two.prompt(session_id, "run ls")
        await two.set_mode(session_id, "careful")
        await two.prompt(session_id, "run ls")
    rebuilt, careful = call_ids(two, mark)
    assert asked(two, mark) == [careful]
    assert exported_decisions(postgres_url, tmp_path) == [
        (granted, 1, "ask", "allow_always", "default", 1),
        (rebuilt, 1, "ask", "granted", "default", 1),
        (careful, 0, "ask", "reject_once", "careful", 2),
    ]
    logs_replay_clean(tmp_path, "w1.jsonl", "w2.jsonl")


async def test_a_change_through_one_worker_governs_the_others_next_tool_call(
    postgres_url: str, tmp_path: Path
) -> None:
    preset = ("--preset", "permission")
    async with (
        worker(postgres_url, tmp_path / "w1.jsonl", *preset) as one,
        worker(postgres_url, tmp_path / "w2.jsonl", *preset) as two,
    ):
        session_id = await one.new_session()
        await two.load(session_id)
        await one.set_mode(session_id, "plan")
        mark = two.mark()
        await two.prompt(session_id, "edit notes.txt")
    (edit,) = call_ids(two, mark)
    assert asked(two, mark) == []
    assert exported_decisions(postgres_url, tmp_path) == [(edit, 0, "deny", None, "plan", 2)]
    logs_replay_clean(tmp_path, "w1.jsonl", "w2.jsonl")
