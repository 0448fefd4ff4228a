"""A catch-up's fast path leaves exactly the index the record-by-record way leaves.

A log written by the engine (headers of two specs, creations, client changes, host option
changes, restores, rejections, tool decisions), with a host's lines and a record carrying
a host's key among them: an index caught up with it (from empty, from a position within
it, with a torn last line) holds, row for row, what an index caught up the slow way (every
line through the record model) holds, and its points are the final ones
``modefsm.replay`` finds for every session.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks.cases.catch_up import append_mixed
from modefsm.log import read_log
from modefsm.replay import replay
from modefsm.store import FileStore, RestoreIndex, last_points

SESSIONS = 40


@pytest.fixture(scope="module")
def mixed_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The log: the seed spec, then the permission spec (restores), with a host's lines."""
    path = tmp_path_factory.mktemp("catch-up") / "modes.jsonl"
    ids = [f"sess_{n:02d}" for n in range(SESSIONS)]
    append_mixed(path, "seed", ids, 1500, 1)
    append_mixed(path, "permission", ids[: SESSIONS // 2], 500, 2)
    lines = path.read_bytes().splitlines(keepends=True)
    hosted = orjson.loads(lines[300])
    hosted["host_request"] = "r-1"  # a host's key: not a field of the record model
    lines[300] = orjson.dumps(hosted) + b"\n"
    lines.insert(200, b'{"event": "request", "path": "/", "status": 200}\n')
    lines.insert(100, b"\n")
    path.write_bytes(b"".join(lines))
    return path


def _rows(index_path: Path) -> tuple[list[tuple[Any, ...]], tuple[Any, ...]]:
    """Every row of the index's sessions, by id, and its log position (device and inode
    left out)."""
    with contextlib.closing(sqlite3.connect(index_path)) as db:
        rows = db.execute(
            "SELECT session_id, mode, seq, previous, digest, offset, cwd, updated_at, "
            "earlier, config FROM sessions ORDER BY session_id"
        ).fetchall()
        position = db.execute("SELECT offset, head FROM log_position").fetchone()
    return rows, position


def _caught_up(log: Path, index_path: Path, *, fast: bool, **options: Any) -> Any:
    """The rows of an index at *index_path* once caught up with *log*."""
    index = RestoreIndex(index_path, **options)
    try:
        if not fast:
            index.take = lambda lines, start, offset: start  # type: ignore[method-assign]
        index.catch_up(log)
    finally:
        index.close()
    return _rows(index_path)


def _slow(log: Path, folder: Path, **options: Any) -> Any:
    return _caught_up(log, folder / "slow.index", fast=False, **options)


def test_the_log_is_mixed(mixed_log: Path) -> None:
    events = [
        orjson.loads(line).get("event") for line in mixed_log.read_bytes().splitlines()[1:] if line
    ]
    counts = {event: events.count(event) for event in set(events) if event}
    assert set(counts) == {
        "modefsm.spec", "modefsm.session_created", "modefsm.mode_changed",
        "modefsm.config_changed", "modefsm.change_rejected", "modefsm.tool_decided", "request",
    }  # fmt: skip
    assert counts["modefsm.spec"] == 1  # the second spec's header (the first is line 1)
    restores = [
        line for line in mixed_log.read_bytes().splitlines() if b'"origin":"restore"' in line
    ]
    assert restores


def test_from_empty_the_rows_are_those_of_the_slow_way(mixed_log: Path, tmp_path: Path) -> None:
    fast = _caught_up(mixed_log, tmp_path / "fast.index", fast=True)
    assert fast == _slow(mixed_log, tmp_path)
    assert fast[1] == (mixed_log.stat().st_size, _last_digest(mixed_log))
    assert len(fast[0]) == SESSIONS


def test_the_points_are_the_final_ones_of_a_replay(mixed_log: Path, tmp_path: Path) -> None:
    index = RestoreIndex(tmp_path / "fast.index")
    try:
        assert index.catch_up(mixed_log) == _records(mixed_log)
        report = replay([mixed_log], keep_timeline=False)
        final = {s.session_id: (s.mode, s.seq, s.config or None) for s in report.sessions}
        found = {}
        for session_id in final:
            point = index.restore_point(session_id)
            assert point is not None
            found[session_id] = (point.mode, point.seq, point.config)
        assert found == final
        assert len(final) == SESSIONS
        every = last_points([mixed_log])
        assert {sid: index.restore_point(sid) for sid in every} == every
    finally:
        index.close()


@pytest.mark.parametrize("commit_every", [1, 7, 256])
def test_in_small_batches_the_rows_are_the_same(
    mixed_log: Path, tmp_path: Path, commit_every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("modefsm.store._restore.CATCH_UP_COMMIT", commit_every)
    monkeypatch.setattr("modefsm.store._restore.COMMIT_ROWS", 3)
    fast = _caught_up(mixed_log, tmp_path / "fast.index", fast=True, commit_every=commit_every)
    assert fast == _slow(mixed_log, tmp_path)


def test_from_a_position_within_the_log(mixed_log: Path, tmp_path: Path) -> None:
    lines = mixed_log.read_bytes().splitlines(keepends=True)
    log = tmp_path / "modes.jsonl"
    log.write_bytes(b"".join(lines[:900]))
    index = RestoreIndex(tmp_path / "fast.index")
    try:
        index.catch_up(log)
        with log.open("ab") as file:
            file.write(b"".join(lines[900:]))
        index.catch_up(log)
    finally:
        index.close()
    assert _rows(tmp_path / "fast.index") == _slow(log, tmp_path)


def test_a_torn_last_line_is_left_for_later(mixed_log: Path, tmp_path: Path) -> None:
    lines = mixed_log.read_bytes().splitlines(keepends=True)
    log = tmp_path / "modes.jsonl"
    whole = b"".join(lines[:-1])
    log.write_bytes(whole + lines[-1][:-40])
    fast = _caught_up(log, tmp_path / "fast.index", fast=True)
    assert fast == _slow(log, tmp_path)
    assert fast[1][0] <= len(whole)
    items = list(read_log([log]))
    assert items[-1].kind == "torn"


def test_a_file_store_feeding_its_index_leaves_the_same_rows(
    mixed_log: Path, tmp_path: Path
) -> None:
    """A store told of other processes' lines feeds them to its index (the same fast path)."""
    lines = mixed_log.read_bytes().splitlines(keepends=True)
    path = tmp_path / "shared.jsonl"
    path.write_bytes(b"".join(lines[:50]))
    store = FileStore(path)
    try:
        assert store.restore_point("sess_00") is not None  # the index follows the file now
        with path.open("ab") as file:  # what other processes appended meanwhile
            file.write(b"".join(lines[50:]))
        point = store.restore_point("sess_01")
    finally:
        store.close()
    assert _rows(tmp_path / "shared.jsonl.index") == _slow(path, tmp_path)
    assert point == last_points([path], digests=True)["sess_01"]


def _last_digest(log: Path) -> str:
    """The digest of the last transition record of *log* (what the index's head is)."""
    for line in reversed(log.read_bytes().splitlines()):
        data = orjson.loads(line)
        if data.get("event", "").startswith("modefsm.") and data["event"] not in (
            "modefsm.tool_decided", "modefsm.spec",
        ):  # fmt: skip
            return str(data["digest"])
    raise AssertionError("no record")


def _records(log: Path) -> int:
    """The committed records of *log*: what a catch-up from empty applies."""
    events = {"modefsm.session_created", "modefsm.mode_changed", "modefsm.config_changed"}
    return sum(
        1
        for line in log.read_bytes().splitlines()
        if line and orjson.loads(line).get("event") in events
    )
