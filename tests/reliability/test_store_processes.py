"""Several `modefsm serve` processes on one --log: one history (issue 13, embedded store).

The random schedules (new/load/resume/set_mode/set_config_option/switch approvals/close,
SIGKILLs) are tests/store/schedule.py's, shared with the PostgreSQL workers' suite.

Real processes, each driven by the official SDK client, sharing one JSON-lines file and its
restore index. What is under test (docs/stores.md): no process fails to start or
to answer because another holds a lock; every process restores every session any process
wrote, with its latest mode; a session changed in two processes gets one gap-free history;
a process killed at any point loses nothing it acknowledged; the file verifies as one chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import pwd
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import acp
import pytest

from modefsm.log import canonical_record
from tests.acp_client import loaded_mode, spawn
from tests.store.schedule import Schedule, run_schedule

from .harness import TIMEOUT, assert_replay_clean, read_log, reproduce, seeds, soak_factor

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

THIS = "tests/reliability/test_store_processes.py"
MODES = ("ask", "architect", "code")
COMMITTED = ("modefsm.session_created", "modefsm.mode_changed")


async def set_mode(conn: Any, sid: str, mode: str) -> None:
    await asyncio.wait_for(conn.set_session_mode(session_id=sid, mode_id=mode), TIMEOUT)


def session_chains(log: Path) -> dict[str, list[str]]:
    """Each session's committed modes in file order; seq and session_prev checked."""
    contents = read_log(log)
    modes: dict[str, list[str]] = {}
    for sid in contents.sessions():
        commits = contents.commits(sid)
        assert [r["seq"] for r in commits] == list(range(1, len(commits) + 1)), sid
        previous = None
        for record in commits:
            assert record["session_prev"] == previous, (sid, record["seq"])
            covered = hashlib.sha256(canonical_record(record)).hexdigest()
            assert record["digest"] == covered, (sid, record["seq"])
            previous = record["digest"]
        modes[sid] = [r["to_mode"] for r in commits]
    return modes


class TestTheIssuesTwoFailures:
    async def test_a_second_process_answers_after_the_first_changed_a_mode(self, tmp_path: Path):
        log = tmp_path / "modes.jsonl"
        async with spawn(log) as (first, _p1, _c1):
            one = (await first.new_session(cwd=".")).session_id
            await set_mode(first, one, "code")
            began = time.monotonic()
            async with spawn(log) as (second, p2, _c2):  # used to exit 2: database is locked
                assert time.monotonic() - began < 15
                assert p2.returncode is None
                two = (await second.new_session(cwd=".")).session_id
                await set_mode(second, two, "architect")
                assert await loaded_mode(second, one) == "code"
            await set_mode(first, one, "ask")
        async with spawn(log) as (third, _p3, _c3):
            assert (await loaded_mode(third, one), await loaded_mode(third, two)) == (
                "ask",
                "architect",
            )
        assert session_chains(log) == {one: ["ask", "code", "ask"], two: ["ask", "architect"]}
        assert_replay_clean(log)

    async def test_sessions_of_two_processes_started_together_load_in_a_third(self, tmp_path: Path):
        log = tmp_path / "modes.jsonl"
        async with spawn(log) as (a, _pa, _ca), spawn(log) as (b, _pb, _cb):
            ids = []
            for conn, mode in ((a, "code"), (b, "architect"), (a, "architect"), (b, "code")):
                sid = (await conn.new_session(cwd=".")).session_id
                await set_mode(conn, sid, mode)
                ids.append((sid, mode))
        async with spawn(log) as (third, _p3, _c3):
            for sid, mode in ids:  # used to answer -32002 for the second process's sessions
                assert await loaded_mode(third, sid) == mode
        assert_replay_clean(log)  # used to report a new chain in the middle of the file


class TestOneSessionInTwoProcesses:
    async def test_a_stale_process_adopts_the_other_change_notifies_and_retries(
        self, tmp_path: Path
    ):
        log = tmp_path / "modes.jsonl"
        async with spawn(log) as (a, _pa, client_a), spawn(log) as (b, _pb, _cb):
            sid = (await a.new_session(cwd=".")).session_id
            await set_mode(a, sid, "code")
            assert await loaded_mode(b, sid) == "code"
            await set_mode(b, sid, "architect")
            before = len(client_a.frames)
            await set_mode(a, sid, "ask")  # a still believes "code": it learns "architect"
            updates = [
                m["params"]["update"]
                for direction, m in client_a.frames[before:]
                if m.get("method") == "session/update"
            ]
            current = [u["currentModeId"] for u in updates if "currentModeId" in u]
            assert current == ["architect", "ask"]
            kinds = [u["sessionUpdate"] for u in updates]
            assert kinds == [
                "current_mode_update",
                "config_option_update",
                "current_mode_update",
                "config_option_update",
            ]
            assert await loaded_mode(b, sid) == "ask"  # a live session is refreshed on load
        assert session_chains(log) == {sid: ["ask", "code", "architect", "ask"]}
        contents = read_log(log)
        assert [r["from_mode"] for r in contents.commits(sid)] == [None, "ask", "code", "architect"]
        assert_replay_clean(log)


class TestTheStoreOption:
    async def test_store_takes_the_log_path_as_log_does(self, tmp_path: Path):
        log = tmp_path / "modes.jsonl"
        async with spawn(log, option="--store") as (conn, _p, _c):
            sid = (await conn.new_session(cwd=".")).session_id
            await set_mode(conn, sid, "code")
        async with spawn(log) as (conn, _p, _c):
            assert await loaded_mode(conn, sid) == "code"
        assert_replay_clean(log)

    def test_store_and_log_naming_two_files_is_refused(self, tmp_path: Path):
        done = subprocess.run(
            [sys.executable, "-m", "modefsm", "serve", "--store", "a.jsonl", "--log", "b.jsonl"],
            capture_output=True,
            text=True,
            check=False,
            cwd=tmp_path,
            timeout=TIMEOUT,
        )
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == (
            "modefsm serve: --store and --log name the same thing for a file store: give one\n"
        )
        assert list(tmp_path.iterdir()) == []


LOCK_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
"""


class TestLocks:
    async def test_a_held_log_lock_fails_that_request_only_within_the_bound(self, tmp_path: Path):
        log = tmp_path / "modes.jsonl"
        async with spawn(log) as (conn, process, _c):
            sid = (await conn.new_session(cwd=".")).session_id
            holder = await asyncio.create_subprocess_exec(
                sys.executable, "-c", LOCK_HOLDER, str(log),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert holder.stdin is not None
            assert holder.stdout is not None
            assert await asyncio.wait_for(holder.stdout.readline(), TIMEOUT) == b"locked\n"
            began = time.monotonic()
            with pytest.raises(acp.RequestError) as failed:  # held until released below
                await set_mode(conn, sid, "code")
            waited = time.monotonic() - began
            command = Path(f"/proc/{holder.pid}/comm").read_text().strip()  # noqa: ASYNC240
            user = pwd.getpwuid(os.geteuid()).pw_name
            message = (
                f"{log}: the transition log is locked by another process (pid {holder.pid}, "
                f"{command}, user {user}) for over 1 s; nothing was written"
            )
            assert (failed.value.code, failed.value.data) == (-32603, {"message": message})
            assert 0.9 < waited < 3.5
            assert process.returncode is None
            holder.stdin.close()  # the holder exits, and its lock goes with it
            assert await asyncio.wait_for(holder.wait(), TIMEOUT) == 0
            await set_mode(conn, sid, "code")  # the lock is gone: served again
        assert session_chains(log) == {sid: ["ask", "code"]}
        assert_replay_clean(log)

    @pytest.mark.parametrize("kind", ["foreign", "corrupt"])
    async def test_a_foreign_or_corrupt_index_is_refused_for_restore_only(
        self, tmp_path: Path, kind: str
    ):
        log = tmp_path / "modes.jsonl"
        async with spawn(log) as (conn, _p, _c):
            old = (await conn.new_session(cwd=".")).session_id
        index = tmp_path / "modes.jsonl.index"
        index.unlink()
        if kind == "corrupt":
            index.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
        else:
            with contextlib.closing(sqlite3.connect(index)) as db:
                db.execute("CREATE TABLE other (x)")
                db.commit()
        content = index.read_bytes()
        async with spawn(log) as (conn, process, _c):
            sid = (await conn.new_session(cwd=".")).session_id
            await set_mode(conn, sid, "code")
            with pytest.raises(acp.RequestError) as failed:
                await loaded_mode(conn, old)
            assert failed.value.code == -32603
            assert "--rebuild-index" in str(failed.value.data)
            assert process.returncode is None
        assert session_chains(log) == {old: ["ask"], sid: ["ask", "code"]}
        assert index.read_bytes() == content  # never overwritten

    async def test_a_torn_line_of_a_killed_writer_is_ended_before_the_next_record(
        self, tmp_path: Path
    ):
        log = tmp_path / "modes.jsonl"
        async with spawn(log) as (conn, _p, _c):
            sid = (await conn.new_session(cwd=".")).session_id
            fd = os.open(log, os.O_WRONLY | os.O_APPEND)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, b'{"timestamp":"2026-12-01T00:00:00.000000Z","session_id":"x')
            os.close(fd)  # the writer died inside its write (its lock goes with it)
            await set_mode(conn, sid, "code")
        contents = read_log(log)
        assert (contents.torn, contents.repaired) == (None, 1)
        assert session_chains(log) == {sid: ["ask", "code"]}


# -- many processes, random schedules (switch approvals included), SIGKILL --------------------


class FileBackend:
    """The embedded store: every process serves with ``--log LOG``."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def command(self, slot: int) -> tuple[Path, tuple[str, ...]]:
        return self.log, ()

    def committed(self, session_id: str) -> list[str]:
        return session_chains(self.log).get(session_id, [])

    def ended(self, pid: int) -> bool:
        return True  # a record is written by the process itself, whole or cut, before it dies


async def run_file_schedule(log: Path, processes: int, seed: int, steps: int, kills: int) -> int:
    schedule = Schedule(FileBackend(log), processes, seed)
    await run_schedule(schedule, steps, kills)
    assert session_chains(log) == schedule.truth
    assert sum(schedule.switches.values()) >= 1
    assert_replay_clean(log)
    return schedule.kills


@pytest.mark.parametrize("processes", [2, 4, 8])
@pytest.mark.parametrize("seed", seeds(1))
async def test_processes_share_one_history(tmp_path: Path, processes: int, seed: int):
    log = tmp_path / "modes.jsonl"
    test = f"{THIS}::test_processes_share_one_history[{seed}-{processes}]"
    try:
        await run_file_schedule(log, processes, seed, steps=24 * soak_factor(), kills=0)
    except AssertionError as exc:
        raise AssertionError(reproduce(test, seed)) from exc


@pytest.mark.parametrize("seed", seeds(1))
async def test_sigkill_of_random_processes_loses_nothing_acknowledged(tmp_path: Path, seed: int):
    log = tmp_path / "modes.jsonl"
    kills = 20 * soak_factor()
    test = f"{THIS}::test_sigkill_of_random_processes_loses_nothing_acknowledged"
    try:
        done = await run_file_schedule(log, 3, seed + 100, steps=kills, kills=kills)
    except AssertionError as exc:
        raise AssertionError(reproduce(test, seed)) from exc
    assert done == kills
    first = [json.loads(line)["event"] for line in log.read_bytes().splitlines()[:2]]
    assert first == ["modefsm.spec", "modefsm.session_created"]  # the header, then a record
