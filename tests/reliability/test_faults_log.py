"""Faults of the log's file system: a full disk and a file size limit, on real processes.

What is under test (docs/durability.md): a record is written whole or not at all. When
the disk is full (a small tmpfs) or the file size limit is reached (``prlimit --fsize``),
the change fails with a JSON-RPC error, its partial bytes are cut off again, the mode
stays as it was, and once space is back the next record starts on a line of its own.
After a restart every acknowledged change is restored and ``replay --verify`` is clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import acp
import pytest

from modefsm import LogStore, ModeEngine, TransitionLog, preset
from modefsm.errors import LogError
from modefsm.replay import replay
from modefsm.store._restore import RestoreIndex
from tests.acp_client import loaded_mode, spawn

from .harness import TIMEOUT, assert_replay_clean, raw_serve, read_log

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

SEED = preset("seed")
CYCLE = ("architect", "code", "ask")


@contextlib.contextmanager
def small_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of *size* at *folder* for the duration (skip where mounting is denied)."""
    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> Path:
    """Take every free byte of *folder*'s file system with a file; return the file."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        block = b"x" * 4096
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, block)
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"x")
    finally:
        os.close(fd)
    return filler


async def change(conn: Any, sid: str, mode: str) -> str | None:
    """``session/set_mode``; ``None`` on success, else the error's message (code -32603)."""
    failure: acp.RequestError | None = None
    try:
        await asyncio.wait_for(conn.set_session_mode(session_id=sid, mode_id=mode), TIMEOUT)
    except acp.RequestError as exc:
        failure = exc
    if failure is None:
        return None
    assert failure.code == -32603, failure
    return str(failure)


def following(acked: list[str]) -> str:
    """The mode after the last acknowledged one in ask -> architect -> code -> ask ..."""
    return CYCLE[(CYCLE.index(acked[-1]) + 1) % 3]


def logged_modes(log: Path, sid: str) -> list[tuple[int, str]]:
    """``(seq, to_mode)`` of every committed record of *sid*; every line must be whole."""
    contents = read_log(log)
    assert (contents.torn, contents.repaired) == (None, 0)
    return [(r["seq"], r["to_mode"]) for r in contents.commits(sid)]


class TestWriterOnAFullDisk:
    """The writer itself, in this process, on a real full file system."""

    def test_a_short_write_is_cut_off_and_the_change_is_not_made(self, tmp_path: Path):
        with small_tmpfs(tmp_path / "fs", "64k") as fs:
            log_path = fs / "log.jsonl"
            log = TransitionLog.to_file(log_path)
            engine = ModeEngine(SEED, store=LogStore(log))
            engine.new_session("s1")
            modes = ["ask"]
            # grow the log until its last page has room for part of a record, not all of it
            while not 100 < 4096 - log_path.stat().st_size % 4096 < 300:
                modes.append(CYCLE[len(modes) % 3])
                engine.change("s1", modes[-1], "set_mode")
            filler = fill(fs)
            size = log_path.stat().st_size
            failures = []
            for _ in range(3):
                with pytest.raises(LogError) as caught:
                    engine.change("s1", CYCLE[len(modes) % 3], "set_mode")
                failures.append(str(caught.value))
                assert log_path.stat().st_size == size  # nothing of the record stayed
                assert engine.get("s1").state == modes[-1]
            assert failures[0] == (
                f"{log_path}: cannot write the transition log: No space left on device; "
                "the record was not written"
            )
            filler.unlink()
            modes.append(CYCLE[len(modes) % 3])
            engine.change("s1", modes[-1], "set_mode")
            log.close()
            assert logged_modes(log_path, "s1") == list(enumerate(modes, 1))


class TestServeOnAFullDisk:
    async def test_full_disk_fails_changes_and_loses_no_acknowledged_one(self, tmp_path: Path):
        with small_tmpfs(tmp_path / "fs", "256k") as fs:
            log = fs / "log.jsonl"
            acked: list[str] = []
            failed = 0
            async with spawn(log) as (conn, _process, _client):
                sid = (await conn.new_session(cwd=".")).session_id
                acked.append("ask")
                for mode in CYCLE:
                    assert await change(conn, sid, mode) is None
                    acked.append(mode)
                filler = fill(fs)
                outcomes = []
                for _ in range(24):
                    mode = following(acked)
                    error = await change(conn, sid, mode)
                    outcomes.append(error is None)
                    if error is None:
                        acked.append(mode)
                    else:
                        failed += 1
                        assert "No space left on device" in error, error
                        assert await loaded_mode(conn, sid) == acked[-1]  # unchanged
                # the page the log ends in had room for a few more records, then none
                assert outcomes == [True] * (24 - failed) + [False] * failed
                assert failed >= 10
                filler.unlink()
                for _ in range(3):
                    mode = following(acked)
                    assert await change(conn, sid, mode) is None
                    acked.append(mode)
            expected = [(seq, mode) for seq, mode in enumerate(acked, 1)]
            assert logged_modes(log, sid) == expected
            async with spawn(log) as (conn, _process, _client):
                assert await loaded_mode(conn, sid) == acked[-1]
            assert_replay_clean(log, len(acked))


class TestServeUnderAFileSizeLimit:
    async def test_fsize_limit_fails_changes_then_appends_cleanly(self, tmp_path: Path):
        if shutil.which("prlimit") is None:
            pytest.skip("prlimit (util-linux) is not installed")
        log = tmp_path / "log.jsonl"
        acked: list[str] = []
        # a log of some 100 kB first, so that the limit leaves the index files room
        writer = TransitionLog.to_file(log)
        engine = ModeEngine(SEED, store=LogStore(writer))
        sid = "sess_1"
        engine.new_session(sid)
        acked.append("ask")
        for _ in range(240):
            acked.append(following(acked))
            engine.change(sid, acked[-1], "set_mode")
        writer.close()
        for fsync in (False, True):
            limit = log.stat().st_size + 1000  # room for two records and part of a third
            extra = ("--fsync",) if fsync else ()
            prefix = ("prlimit", f"--fsize={limit}:unlimited")  # soft: hard
            async with spawn(log, *extra, prefix=prefix) as (conn, process, _client):
                assert await loaded_mode(conn, sid) == acked[-1]
                errors = []
                for _ in range(8):
                    mode = following(acked)
                    error = await change(conn, sid, mode)
                    if error is None:
                        acked.append(mode)
                    else:
                        errors.append(error)
                        assert await loaded_mode(conn, sid) == acked[-1]
                assert len(errors) >= 5
                assert all("File too large; the record was not written" in e for e in errors)
                assert log.stat().st_size <= limit
                assert process.returncode is None  # SIGXFSZ did not kill it
                raised = await asyncio.create_subprocess_exec(
                    "prlimit", f"--pid={process.pid}", "--fsize=unlimited:unlimited"
                )
                assert await raised.wait() == 0
                for _ in range(3):
                    mode = following(acked)
                    assert await change(conn, sid, mode) is None
                    acked.append(mode)
            assert logged_modes(log, sid) == [(seq, mode) for seq, mode in enumerate(acked, 1)]
        async with spawn(log) as (conn, _process, _client):
            assert await loaded_mode(conn, sid) == acked[-1]
        assert_replay_clean(log, len(acked))


def test_enospc_is_the_errno_a_full_tmpfs_gives(tmp_path: Path):
    """The premise of the tests above: a full tmpfs refuses a write with ENOSPC."""
    with small_tmpfs(tmp_path / "fs", "16k") as fs:
        fill(fs)
        with pytest.raises(OSError, match="No space left on device") as caught:
            (fs / "more").write_bytes(b"x" * 8192)
        assert caught.value.errno == errno.ENOSPC


class TestStartUpOnALongLastLine:
    """Start-up reads the tail of the log in time linear in its length, whatever its lines."""

    LIMIT = 15.0  # seconds before `initialize` is answered: generous, not a benchmark

    @staticmethod
    def a_log(path: Path) -> None:
        log = TransitionLog.to_file(path)
        engine = ModeEngine(SEED, store=LogStore(log))
        engine.new_session("s1")
        engine.change("s1", "code", "set_mode")
        log.close()

    async def started(self, path: Path) -> float:
        """Seconds until ``initialize`` is answered; the session is restored exactly."""
        began = time.monotonic()
        async with raw_serve(path) as peer:
            elapsed = time.monotonic() - began
            assert await peer.current_mode("s1") == "code"
            assert "result" in await peer.set_mode("s1", "architect")
        return elapsed

    def repaired(self, path: Path) -> tuple[int, list[tuple[int, str]]]:
        """``torn_bytes`` of the repair line, and s1's committed records after it."""
        with path.open("rb") as file:
            file.seek(-2000, os.SEEK_END)
            tail = file.read().split(b"\n")
        repair = json.loads(tail[-3])
        assert repair["event"] == "modefsm.log_repaired"
        record = json.loads(tail[-2])
        return repair["torn_bytes"], [(record["seq"], record["to_mode"])]

    async def test_a_40_mb_torn_last_line(self, tmp_path: Path):
        path = tmp_path / "log.jsonl"
        self.a_log(path)
        with path.open("ab") as file:
            file.write(b'{"timestamp":"' + b"7" * 40_000_000)
        assert await self.started(path) < self.LIMIT
        assert self.repaired(path) == (40_000_014, [(3, "architect")])

    async def test_a_1_gib_sparse_file(self, tmp_path: Path):
        path = tmp_path / "log.jsonl"
        self.a_log(path)
        size = path.stat().st_size
        os.truncate(path, 1 << 30)  # a hole of zeros, as a crash on some file systems leaves
        assert await self.started(path) < self.LIMIT
        assert self.repaired(path) == ((1 << 30) - size, [(3, "architect")])


LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
db.execute("BEGIN EXCLUSIVE")
db.execute("UPDATE log_position SET id = 1 WHERE id = 1")
print("locked", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


class TestALockedRestoreIndex:
    """Another process holds the index's write lock for a while: nothing waits on it for
    long, every request is answered, and restore is exact during and after the lock."""

    async def test_changes_and_loads_go_on_while_another_process_holds_the_lock(
        self, tmp_path: Path
    ):
        log = tmp_path / "log.jsonl"
        index = tmp_path / "log.jsonl.index"
        expected: dict[str, str] = {}
        async with spawn(log) as (conn, _process, _client):
            for _ in range(2):
                sid = (await conn.new_session(cwd=".")).session_id
                assert await change(conn, sid, "code") is None
                expected[sid] = "code"
        old = list(expected)
        async with spawn(log) as (conn, _process, _client):
            locker = await asyncio.create_subprocess_exec(
                sys.executable, "-c", LOCKER, str(index),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert locker.stdin is not None
            assert locker.stdout is not None
            assert await asyncio.wait_for(locker.stdout.readline(), TIMEOUT) == b"locked\n"
            began = time.monotonic()
            live = (await conn.new_session(cwd=".")).session_id
            expected[live] = "ask"
            slowest = time.monotonic() - began
            while time.monotonic() - began < 1.5:  # the lock is held until released below
                sent = time.monotonic()
                mode = following([expected[live]])
                assert await change(conn, live, mode) is None
                expected[live] = mode
                assert await loaded_mode(conn, old[0]) == expected[old[0]]  # not live: restored
                slowest = max(slowest, time.monotonic() - sent)
            assert slowest < 1.0  # the first write used to wait 5 s for the lock
            await conn.close_session(session_id=live)  # its mode now lives in the index only
            assert await loaded_mode(conn, live) == expected[live]
            locker.stdin.close()  # the lock is released
            assert await asyncio.wait_for(locker.wait(), TIMEOUT) == 0
            for sid in old:  # after the lock: still restoring, still writing
                assert await loaded_mode(conn, sid) == expected[sid]
                assert await change(conn, sid, "architect") is None
                expected[sid] = "architect"
            assert await change(conn, live, following([expected[live]])) is None
            expected[live] = following([expected[live]])
        async with spawn(log) as (conn, _process, _client):
            for sid, mode in expected.items():
                assert await loaded_mode(conn, sid) == mode, sid


async def run_tool(*command: str) -> tuple[int, str]:
    """Run *command*; its exit status and stderr."""
    process = await asyncio.create_subprocess_exec(*command, stderr=asyncio.subprocess.PIPE)
    _out, err = await process.communicate()
    return await process.wait(), err.decode().strip()


class TestACutThatFails:
    """The failed record cannot be cut off (an append-only file: ``chattr +a``): the writer
    refuses every later record until a restart, which ends the torn line."""

    async def test_the_writer_stops_and_a_restart_repairs(self, tmp_path: Path):
        for tool in ("prlimit", "chattr"):
            if shutil.which(tool) is None:
                pytest.skip(f"{tool} is not installed")
        log = tmp_path / "log.jsonl"
        writer = RestoreIndex.open_log(log, tmp_path / "log.jsonl.index")
        engine = ModeEngine(SEED, store=LogStore(writer))
        engine.new_session("s1")
        acked = ["ask"]
        for _ in range(240):  # some 100 kB, so that the limit leaves the index files room
            acked.append(following(acked))
            engine.change("s1", acked[-1], "set_mode")
        writer.close()
        code, why = await run_tool("chattr", "+a", str(log))
        if code != 0:
            pytest.skip(f"no append-only files here: {why}")
        try:
            limit = log.stat().st_size + 500  # one record and part of the next
            prefix = ("prlimit", f"--fsize={limit}:unlimited")
            async with spawn(log, prefix=prefix) as (conn, process, _client):
                assert await loaded_mode(conn, "s1") == acked[-1]
                assert await change(conn, "s1", following(acked)) is None
                acked.append(following(acked))
                torn = await change(conn, "s1", following(acked))
                assert torn is not None
                assert torn.endswith("File too large; the record was not written"), torn
                unlimited = "--fsize=unlimited:unlimited"
                assert await run_tool("prlimit", f"--pid={process.pid}", unlimited) == (0, "")
                refused = await change(conn, "s1", following(acked))
                assert refused is not None
                assert refused.endswith(
                    "cannot write the transition log: a failed record could not be removed: "
                    "Operation not permitted; restart to repair the log; "
                    "the record was not written"
                ), refused
                assert await loaded_mode(conn, "s1") == acked[-1]
            async with spawn(log) as (conn, _process, _client):
                assert await loaded_mode(conn, "s1") == acked[-1]
                assert await change(conn, "s1", following(acked)) is None
                acked.append(following(acked))
        finally:
            assert await run_tool("chattr", "-a", str(log)) == (0, "")
        contents = read_log(log)
        assert contents.repaired == 1
        assert [(r["seq"], r["to_mode"]) for r in contents.commits("s1")] == list(
            enumerate(acked, 1)
        )
        report = replay([log], verify=True)
        assert [(v.kind, v.message) for v in report.violations] == [("torn", NEVER_ACKNOWLEDGED)]


NEVER_ACKNOWLEDGED = (
    "a record cut short inside the log (the next record continues the digest chain from "
    "the record before it: its writer never counted it, so its change was never "
    "acknowledged), skipped"
)
