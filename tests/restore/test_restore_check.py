"""The restore index is checked against the log record each row names (seq and digest)."""

from __future__ import annotations

import sqlite3

import orjson
import pytest

from modefsm import LogStore, ModeEngine, preset
from modefsm.errors import LogError
from modefsm.store import EVENT_INDEX_MISMATCH, ListedSession, RestoreIndex, RestorePoint
from tests.conftest import read_log


@pytest.fixture
def paths(tmp_path):
    return tmp_path / "modes.jsonl", tmp_path / "modes.index"


def write(paths, *steps):
    log = RestoreIndex.open_log(paths[0], paths[1])
    engine = ModeEngine(preset("seed"), store=LogStore(log))
    for session_id, mode in steps:
        if session_id in engine:
            engine.change(session_id, mode, "set_mode")
        else:
            engine.new_session(session_id)
    log.close()


def tamper(paths, sql, *args):
    with sqlite3.connect(paths[1]) as db:
        db.execute(sql, args)
    db.close()


def lookup(paths, session_id):
    log = RestoreIndex.open_log(paths[0], paths[1])
    try:
        assert log.index is not None
        return log.index.restore_point(session_id)
    finally:
        log.close()


def mismatches(paths):
    return [
        (r["session_id"], r["problem"], r["log_mode"], r["log_seq"])
        for r in read_log(paths[0])
        if r["event"] == EVENT_INDEX_MISMATCH
    ]


def test_rows_that_agree_with_the_log_are_answered_without_a_report(paths):
    write(paths, ("s1", None), ("s1", "code"), ("s2", None))
    assert lookup(paths, "s1") == RestorePoint("s1", "code", 2, "ask")
    assert lookup(paths, "s2") == RestorePoint("s2", "ask", 1)
    assert mismatches(paths) == []


def test_a_row_with_another_digest_falls_back_to_the_log(paths):
    write(paths, ("s1", None), ("s1", "code"))
    tamper(paths, "UPDATE sessions SET digest = ? WHERE session_id = 's1'", "0" * 64)
    size = paths[0].stat().st_size
    assert lookup(paths, "s1") == RestorePoint("s1", "code", 2, "ask")
    assert mismatches(paths) == [
        ("s1", f"the log has no record with the row's digest at byte {size}", "code", 2)
    ]


def test_a_forged_previous_mode_falls_back_to_the_log(paths):
    write(paths, ("s1", None), ("s1", "code"))
    tamper(paths, "UPDATE sessions SET previous = 'architect' WHERE session_id = 's1'")
    assert lookup(paths, "s1") == RestorePoint("s1", "code", 2, "ask")
    assert mismatches(paths) == [
        ("s1", "the row's previous mode 'architect' is not the log's 'ask'", "code", 2)
    ]


def test_an_edited_log_record_is_not_believed(paths):
    write(paths, ("s1", None), ("s1", "code"))
    lines = paths[0].read_bytes().splitlines(keepends=True)
    lines[-1] = lines[-1].replace(b'"to_mode":"code"', b'"to_mode":"xode"')
    paths[0].write_bytes(b"".join(lines))  # same length, same inode: no catch-up
    size = paths[0].stat().st_size
    assert lookup(paths, "s1") == RestorePoint("s1", "xode", 2, "ask")  # the log's own word
    assert mismatches(paths) == [
        ("s1", f"the log's record at byte {size} was changed after it was written", "xode", 2)
    ]


def first_layout(paths):
    """Turn the index into the first release's layout (none of the columns added since)."""
    with sqlite3.connect(paths[1]) as db:
        db.execute("DROP INDEX sessions_listed")
        db.execute("DROP INDEX sessions_by_cwd")
        for column in ("digest", "offset", "cwd", "updated_at", "earlier", "config"):
            db.execute(f"ALTER TABLE sessions DROP COLUMN {column}")
        db.execute("INSERT INTO sessions VALUES ('ghost', 'code', 5, NULL)")
    db.close()


def test_an_index_of_the_first_layout_is_read_again_from_its_log(paths):
    write(paths, ("s1", None), ("s1", "architect"))
    first_layout(paths)
    assert lookup(paths, "ghost") is None
    assert lookup(paths, "s1") == RestorePoint("s1", "architect", 2, "ask")
    problem = "the row names no record of the log the index follows"
    assert mismatches(paths) == [("ghost", problem, None, None)]  # s1's row was read again


@pytest.mark.parametrize("how", ["renamed", "copied and truncated"])
def test_after_a_rotation_a_session_only_in_the_earlier_file_is_restored(paths, how):
    """The new file continues the chain: the rows of the earlier file are kept as its
    points (answered as stored: that file is no longer followed), also after a restart,
    and listed with their cwd and the time of their last record."""
    log = RestoreIndex.open_log(paths[0], paths[1])
    engine = ModeEngine(preset("seed"), store=LogStore(log))
    engine.new_session("old", cwd="/o")
    engine.change("old", "architect", "set_mode")
    engine.new_session("both", cwd="/b")
    rotated = paths[0].with_name("modes.jsonl.1")
    if how == "renamed":
        paths[0].rename(rotated)
        log.reopen()
    else:  # the writer notices the shorter file at its next record
        rotated.write_bytes(paths[0].read_bytes())
        with paths[0].open("r+b") as file:
            file.truncate(0)
    engine.change("both", "code", "set_mode")
    assert isinstance(log.index, RestoreIndex)
    assert (log.index.restore_point("old"), log.index.restore_point("both")) == (
        RestorePoint("old", "architect", 2, "ask"),
        RestorePoint("both", "code", 2, "ask"),
    )
    lines = [*rotated.read_bytes().splitlines(), *paths[0].read_bytes().splitlines()]
    stamps = {r.get("session_id"): r["timestamp"] for r in map(orjson.loads, lines)}
    listed = [
        ListedSession("both", "/b", stamps["both"]),
        ListedSession("old", "/o", stamps["old"]),
    ]
    assert log.index.list_sessions() == listed
    log.close()
    assert lookup(paths, "old") == RestorePoint("old", "architect", 2, "ask")  # a restart
    assert lookup(paths, "both") == RestorePoint("both", "code", 2, "ask")
    assert mismatches(paths) == []
    log = RestoreIndex.open_log(paths[0], paths[1])
    try:
        assert isinstance(log.index, RestoreIndex)
        assert log.index.list_sessions() == listed
    finally:
        log.close()
    # a renamed file's writer names its spec first; a file cut in place is not known to
    # be new before the record is written (replay takes the spec from the earlier file)
    header = ["modefsm.spec"] if how == "renamed" else []
    assert [orjson.loads(line)["event"] for line in paths[0].read_bytes().splitlines()] == [
        *header,
        "modefsm.mode_changed",
    ]


def test_a_replaced_log_that_does_not_continue_the_chain_is_not_vouched_for(paths, tmp_path):
    """Another log put at the path (its chain does not continue the records indexed): no
    row naming a record of the file before is believed."""
    write(paths, ("old", None), ("both", None))
    other = (tmp_path / "other.jsonl", tmp_path / "other.index")
    write(other, ("fresh", None))
    paths[0].write_bytes(other[0].read_bytes())
    assert (lookup(paths, "old"), lookup(paths, "fresh")) == (None, RestorePoint("fresh", "ask", 1))
    problem = "the row names no record of the log the index follows"
    assert mismatches(paths) == [("old", problem, None, None)]


def test_an_index_that_follows_no_log_answers_as_stored(paths):
    write(paths, ("s1", None))
    tamper(paths, "UPDATE sessions SET mode = 'code' WHERE session_id = 's1'")
    index = RestoreIndex(paths[1])
    try:
        assert index.restore_point("s1") == RestorePoint("s1", "code", 1)
    finally:
        index.close()


def test_a_report_that_cannot_be_written_does_not_fail_the_lookup(paths):
    write(paths, ("s1", None), ("s1", "code"))
    tamper(paths, "UPDATE sessions SET seq = 5 WHERE session_id = 's1'")
    log = RestoreIndex.open_log(paths[0], paths[1])
    try:
        assert log.index is not None

        def full_disk(event, fields):
            raise LogError("cannot write the transition log: No space left on device")

        log.index.report = full_disk
        assert log.index.restore_point("s1") == RestorePoint("s1", "code", 2, "ask")
    finally:
        log.close()
