"""Restore: the index the writer keeps, its catch-up after a crash, rebuild, the agent's flow."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import time

import orjson
import pytest

from modefsm import LogStore, ModeEngine, TransitionLog, preset
from modefsm.errors import LogError
from modefsm.store import (
    RETRY_SECONDS,
    LogRestore,
    RestoreIndex,
    RestorePoint,
    last_points,
)
from modefsm.store import _restore as restore
from tests.conftest import settle_now

_OPENED: list[RestoreIndex | TransitionLog] = []


@pytest.fixture(autouse=True)
def _close_everything():
    yield
    while _OPENED:
        _OPENED.pop().close()


def _open(tmp_path, spec="seed", **index_options):
    index = RestoreIndex(tmp_path / "modes.index", **index_options)
    log = TransitionLog.to_file(tmp_path / "modes.jsonl", index=index)
    _OPENED.extend([index, log])
    return ModeEngine(preset(spec), store=LogStore(log)), log, index


def _crash(log: TransitionLog, index: RestoreIndex) -> None:
    """Lose the index's uncommitted updates, as a killed process would."""
    index._db.close()
    index._db = None  # type: ignore[assignment]
    log.index = None
    log.close()


class TestIndexFollowsTheLog:
    """The index answers what the log says, as records are written."""

    def test_restore_point_after_changes(self, tmp_path):
        engine, _log, index = _open(tmp_path)
        engine.new_session("s1")
        engine.change("s1", "architect", "set_mode")
        settle_now(engine, "s1", "code")
        assert RestorePoint("s1", "code", 3, "architect") == index.restore_point("s1")

    def test_rejection_leaves_the_point(self, tmp_path):
        engine, _log, index = _open(tmp_path)
        engine.new_session("s1")
        engine.reject_switch("s1", "cancelled", tool_call_id="t")
        assert RestorePoint("s1", "ask", 1) == index.restore_point("s1")

    def test_unknown_session_has_no_point(self, tmp_path):
        _, _, index = _open(tmp_path)
        assert index.restore_point("nobody") is None

    def test_same_answer_as_a_full_scan(self, tmp_path):
        engine, log, index = _open(tmp_path)
        for n in range(30):
            engine.new_session(f"s{n}")
            engine.change(f"s{n}", ("architect", "code")[n % 2], "set_mode")
        log.close()
        points = last_points([tmp_path / "modes.jsonl"])
        assert points == {sid: index.restore_point(sid) for sid in points}
        assert 30 == len(index)

    def test_index_given_as_a_path_is_closed_with_the_log(self, tmp_path):
        log = RestoreIndex.open_log(tmp_path / "modes.jsonl", tmp_path / "modes.index")
        ModeEngine(preset("seed"), store=LogStore(log)).new_session("s1")
        log.close()
        index = RestoreIndex(tmp_path / "modes.index")
        _OPENED.append(index)
        assert RestorePoint("s1", "ask", 1) == index.restore_point("s1")


class TestCrash:
    """A crash between the log write and the index commit never makes restore stale."""

    def test_uncommitted_updates_are_caught_up_from_the_log(self, tmp_path):
        engine, log, index = _open(tmp_path, commit_every=1000, commit_seconds=3600)
        engine.new_session("s1")
        index.commit()
        engine.change("s1", "code", "set_mode")
        _crash(log, index)
        stale = RestoreIndex(tmp_path / "modes.index")
        _OPENED.append(stale)
        assert RestorePoint("s1", "ask", 1) == stale.restore_point("s1")
        engine, log, index = _open(tmp_path)
        assert RestorePoint("s1", "code", 2, "ask") == index.restore_point("s1")

    def test_catch_up_reads_only_past_the_committed_offset(self, tmp_path):
        engine, log, index = _open(tmp_path, commit_every=1000, commit_seconds=3600)
        for n in range(5):
            engine.new_session(f"s{n}")
        index.commit()
        engine.change("s4", "code", "set_mode")
        _crash(log, index)
        index = RestoreIndex(tmp_path / "modes.index")
        _OPENED.append(index)
        assert 1 == index.catch_up(tmp_path / "modes.jsonl")

    def test_replaced_log_is_read_from_its_start(self, tmp_path):
        engine, log, index = _open(tmp_path)
        engine.new_session("s1")
        log.close()
        index.close()
        path = tmp_path / "modes.jsonl"
        lines = path.read_bytes()
        path.unlink()
        path.write_bytes(lines.replace(b'"to_mode":"ask"', b'"to_mode":"code"'))
        _, _, index = _open(tmp_path)
        assert RestorePoint("s1", "code", 1) == index.restore_point("s1")

    def test_a_failing_table_fails_only_the_lookups_it_cannot_answer(self, tmp_path):
        engine, _log, index = _open(tmp_path)
        engine.new_session("s1")
        index.commit()
        index._db.execute("DROP TABLE sessions")
        engine.new_session("s2")
        index.commit()  # fails: s2 waits in memory
        assert RestorePoint("s2", "ask", 1) == index.restore_point("s2")
        with pytest.raises(LogError, match="cannot read the restore index now: no such table"):
            index.restore_point("s1")

    def test_not_an_index_is_a_log_error(self, tmp_path):
        (tmp_path / "junk.index").write_bytes(b"not sqlite at all" * 100)
        with pytest.raises(LogError, match="not a restore index"):
            RestoreIndex(tmp_path / "junk.index")


class TestRotation:
    """A rotated log continues its chain, and the index keeps following it."""

    def test_reopen_follows_the_new_file(self, tmp_path):
        engine, log, index = _open(tmp_path)
        engine.new_session("s1")
        (tmp_path / "modes.jsonl").rename(tmp_path / "modes.jsonl.1")
        log.reopen()
        engine.change("s1", "code", "set_mode")
        log.close()
        engine, log, index = _open(tmp_path)
        assert RestorePoint("s1", "code", 2, "ask") == index.restore_point("s1")

    def test_restart_on_an_empty_new_file_continues_the_chain_from_the_index(self, tmp_path):
        engine, log, index = _open(tmp_path)
        engine.new_session("s1")
        log.close()
        index.close()
        old = tmp_path / "modes.jsonl"
        last = orjson.loads(old.read_bytes().splitlines()[-1])["digest"]
        old.rename(tmp_path / "modes.jsonl.1")
        engine, log, index = _open(tmp_path)
        engine.new_session("s2")
        log.close()
        header, record = map(orjson.loads, old.read_bytes().splitlines())
        assert (last, header["event"], header["digest"]) == (
            header["prev"],
            "modefsm.spec",  # the new file names its spec first
            record["prev"],
        )


class TestRebuild:
    """--rebuild-index: a new index from the logs, swapped in whole."""

    def test_rebuild_matches_the_logs(self, tmp_path):
        engine, log, index = _open(tmp_path)
        engine.new_session("s1")
        engine.new_session("s2")
        engine.change("s2", "code", "set_mode")
        log.close()
        index.close()
        (tmp_path / "modes.index").unlink()
        assert 2 == RestoreIndex.rebuild(tmp_path / "modes.index", [tmp_path / "modes.jsonl"])
        assert ["modes.index", "modes.jsonl"] == sorted(p.name for p in tmp_path.iterdir())
        rebuilt = RestoreIndex(tmp_path / "modes.index")
        _OPENED.append(rebuilt)
        assert [RestorePoint("s1", "ask", 1), RestorePoint("s2", "code", 2, "ask")] == [
            rebuilt.restore_point("s1"),
            rebuilt.restore_point("s2"),
        ]

    def test_rebuilt_index_follows_the_last_log(self, tmp_path):
        engine, log, index = _open(tmp_path)
        engine.new_session("s1")
        log.close()
        index.close()
        RestoreIndex.rebuild(tmp_path / "modes.index", [tmp_path / "modes.jsonl"])
        _, _, index = _open(tmp_path)
        assert (0, RestorePoint("s1", "ask", 1)) == (
            index.catch_up(tmp_path / "modes.jsonl"),
            index.restore_point("s1"),
        )

    def test_unreadable_log_fails_the_rebuild(self, tmp_path):
        with pytest.raises(LogError, match=r"nope\.jsonl: unreadable: cannot read"):
            RestoreIndex.rebuild(tmp_path / "modes.index", [tmp_path / "nope.jsonl"])
        assert [] == list(tmp_path.iterdir())


class TestAgentRestore:
    """What the agent does on session/load after a restart."""

    def test_restorable_mode_comes_back_without_a_record(self, tmp_path):
        engine, log, _ = _open(tmp_path)
        engine.new_session("s1")
        engine.change("s1", "code", "set_mode")
        log.close()
        engine, log, index = _open(tmp_path)
        point = index.restore_point("s1")
        session = engine.restore_session("s1", point.mode, point.seq)
        assert ("code", 2, RestorePoint("s1", "code", 2, "ask")) == (
            session.state,
            session.seq,
            index.restore_point("s1"),
        )

    def test_unrestorable_mode_falls_back_with_a_restore_record(self, tmp_path):
        engine, log, _ = _open(tmp_path, spec="permission")
        engine.new_session("s1")
        engine.change("s1", "bypassPermissions", "set_mode")
        log.close()
        engine, log, index = _open(tmp_path, spec="permission")
        point = index.restore_point("s1")
        engine.restore_session("s1", point.mode, point.seq)
        log.close()
        last = orjson.loads((tmp_path / "modes.jsonl").read_bytes().splitlines()[-1])
        assert (RestorePoint("s1", "default", 3, "default"), "restore", "bypassPermissions") == (
            index.restore_point("s1"),
            last["origin"],
            last["from_mode"],
        )

    def test_log_restore_and_index_share_the_signature(self, tmp_path):
        engine, log, index = _open(tmp_path)
        engine.new_session("s1")
        log.close()
        assert index.restore_point("s1") == LogRestore(tmp_path / "modes.jsonl").restore_point("s1")


def test_sqlite_is_in_wal_mode(tmp_path):
    _open(tmp_path)
    db = sqlite3.connect(tmp_path / "modes.index")
    try:
        assert ("wal",) == db.execute("PRAGMA journal_mode").fetchone()
    finally:
        db.close()


def test_rejections_alone_then_a_commit(tmp_path):
    """Rejection records right after a commit (no session row yet) commit like any other."""
    from modefsm import UnknownModeError

    log = RestoreIndex.open_log(tmp_path / "l.jsonl", tmp_path / "l.index")
    engine = ModeEngine(preset("seed"), store=LogStore(log))
    engine.new_session("s1")
    log.index.commit()
    with pytest.raises(UnknownModeError):
        engine.change("s1", "nope", "set_mode")
    engine.change("s1", "code", "set_mode")
    log.index.commit()
    try:
        assert log.index.restore_point("s1") == RestorePoint("s1", "code", 2, "ask")
    finally:
        log.close()


_LOCKER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


class _Locker:
    """Another process holding the index's write lock until :meth:`release`."""

    def __init__(self, path):
        self.process = subprocess.Popen(
            [sys.executable, "-c", _LOCKER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout.readline() == b"locked\n"

    def release(self):
        self.process.communicate(b"\n", timeout=30)
        assert self.process.returncode == 0


def _committed(path, session_id):
    """The row another connection sees for *session_id*."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return db.execute(
            "SELECT mode, seq FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()


class TestLockedIndex:
    """Another process holds the write lock: writes wait milliseconds, lookups go on."""

    def test_commits_wait_briefly_and_are_retried_after_the_lock(self, tmp_path):
        engine, _log, index = _open(tmp_path)
        engine.new_session("s1")
        index.commit()
        locker = _Locker(index.path)
        began = time.monotonic()
        engine.new_session("s2")
        engine.change("s2", "code", "set_mode")
        index.commit()
        index.commit()  # within RETRY_SECONDS: not even tried
        assert time.monotonic() - began < 0.5
        assert _committed(index.path, "s2") is None
        assert index.restore_point("s2") == RestorePoint("s2", "code", 2, "ask")  # memory
        assert index.restore_point("s1") == RestorePoint("s1", "ask", 1)  # read under the lock
        locker.release()
        time.sleep(RETRY_SECONDS)
        index.commit()
        assert _committed(index.path, "s2") == ("code", 2)

    def test_too_many_waiting_sessions_catch_up_from_the_log(self, tmp_path, monkeypatch):
        monkeypatch.setattr(restore, "MAX_PENDING", 3)
        engine, _log, index = _open(tmp_path, commit_every=2)
        engine.new_session("s0")
        index.commit()
        locker = _Locker(index.path)
        for n in range(1, 6):
            engine.new_session(f"s{n}")
            engine.change(f"s{n}", "code", "set_mode")
        locked = r"behind the log and cannot be written now \(database is locked\); try again"
        with pytest.raises(LogError, match=locked):
            index.restore_point("s1")
        locker.release()
        time.sleep(RETRY_SECONDS)
        points = [index.restore_point(f"s{n}") for n in range(6)]
        assert points == [
            RestorePoint("s0", "ask", 1),
            *(RestorePoint(f"s{n}", "code", 2, "ask") for n in range(1, 6)),
        ]
        index.commit()
        assert _committed(index.path, "s5") == ("code", 2)

    def test_the_log_and_its_index_open_at_once_while_another_process_holds_the_lock(
        self, tmp_path
    ):
        engine, log, index = _open(tmp_path)
        engine.new_session("s1")
        engine.change("s1", "code", "set_mode")
        log.close()
        index.close()
        locker = _Locker(tmp_path / "modes.index")
        began = time.monotonic()
        engine, log, index = _open(tmp_path)
        engine.new_session("s2")
        assert time.monotonic() - began < 1.0  # the first write waited 5 s for the lock
        assert index.restore_point("s1") == RestorePoint("s1", "code", 2, "ask")
        assert index.restore_point("s2") == RestorePoint("s2", "ask", 1)
        locker.release()
        log.close()
        index.close()
        assert _committed(tmp_path / "modes.index", "s2") == ("ask", 1)
