"""The engine's coroutines with a store: the store is awaited, each session takes turns.

A real :class:`~modefsm.store.FileStore` (one file, its real ``flock``) and a second
store on the same file standing for another process (``flock`` locks conflict between
two opens of one file, even in one process).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from modefsm import ModeEngine, ModeSpec, SessionMoved, StoreBusy, UnknownModeError, preset
from modefsm.engine import MAX_BACKLOG, ToolCall
from modefsm.log import title_digest
from modefsm.store import FileStore
from tests.conftest import Recorder, announced, read_log

SEED = preset("seed")
PERMISSION = preset("permission")


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "modes.jsonl"


@pytest.fixture
def store(log: Path) -> Iterator[FileStore]:
    opened = FileStore(log, lock_timeout=5.0)
    yield opened
    opened.close()


def commits(log: Path, session_id: str) -> list[tuple[int, str]]:
    return [
        (r["seq"], r["to_mode"])
        for r in read_log(log)
        if r.get("session_id") == session_id and r["event"] != "modefsm.change_rejected"
    ]


def records(log: Path) -> list[dict[str, Any]]:
    """Every line of *log*, whole."""
    return [orjson.loads(line) for line in log.read_bytes().splitlines()]


@contextlib.contextmanager
def elsewhere(log: Path, spec: ModeSpec, sid: str) -> Iterator[ModeEngine]:
    """An engine on a second store of *log* (another process) holding *sid* as the file has
    it; the store is closed on the way out."""
    other_store = FileStore(log)
    try:
        point = other_store.restore_point(sid)
        assert point is not None
        other = ModeEngine(spec, store=other_store)
        other.restore_session(
            sid, point.mode, point.seq, previous=point.previous, digest=point.digest
        )
        yield other
    finally:
        other_store.close()


async def test_a_change_waiting_for_the_file_lock_leaves_the_loop_serving(
    log: Path, store: FileStore
) -> None:
    engine = ModeEngine(SEED, store=store)
    one = (await engine.new_session_async("one")).session_id
    two = (await engine.new_session_async("two")).session_id
    holder = os.open(log, os.O_RDONLY)  # another process holding the file's lock
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        waiting = asyncio.ensure_future(engine.set_mode(one, "code"))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # it waits for the lock, and the loop runs this test
        assert (await engine.refresh(two)).state == "ask"  # nothing moved: no lock needed
        assert engine.get(one).state == "ask"  # not committed before the store has it
        fcntl.flock(holder, fcntl.LOCK_UN)
        change = await asyncio.wait_for(waiting, 10)
    finally:
        os.close(holder)
    assert change is not None
    assert (change.seq, engine.get(one).state) == (2, "code")
    assert commits(log, one) == [(1, "ask"), (2, "code")]


async def test_a_lock_held_past_the_timeout_fails_that_change_only(log: Path) -> None:
    store = FileStore(log, lock_timeout=0.2)
    engine = ModeEngine(SEED, store=store)
    one = (await engine.new_session_async("one")).session_id
    holder = os.open(log, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(StoreBusy, match=r"locked by another process for over 0\.2 s"):
            await engine.set_mode(one, "code")
    finally:
        os.close(holder)
        await engine.set_mode(one, "architect")
        store.close()
    assert commits(log, one) == [(1, "ask"), (2, "architect")]


async def test_appends_waiting_for_the_lock_are_written_in_order_each_with_its_outcome(
    log: Path, store: FileStore
) -> None:
    """Appends of one process made while another holds the lock wait together: once it is
    let go they are written in the order they came; a stale head fails its own call
    (SessionMoved), a call whose deadline passed while waiting writes nothing."""
    engine = ModeEngine(SEED, store=store)
    sessions = [(await engine.new_session_async(f"s{i}")).session_id for i in range(6)]
    heads = {sid: store.restore_point(sid) for sid in sessions}
    with elsewhere(log, SEED, "s3") as other:
        await other.set_mode("s3", "code")  # this store's head of s3 is now stale
    loop = asyncio.get_running_loop()

    async def change(sid: str) -> str | BaseException:
        head = heads[sid]
        assert head is not None
        fields = {
            "timestamp": "2026-12-01T08:00:00.000000Z", "session_id": sid, "seq": 2,
            "from_mode": "ask", "to_mode": "architect", "origin": "set_mode",
            "spec": "seed", "spec_hash": SEED.content_hash,
        }  # fmt: skip
        deadline = loop.time() + (0.1 if sid == "s5" else 30)
        try:
            return await store.append_async("modefsm.mode_changed", fields, head, deadline=deadline)
        except (SessionMoved, StoreBusy) as exc:
            return exc

    holder = os.open(log, os.O_RDONLY)  # another process holding the file's lock
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        waiting = asyncio.gather(*map(change, sessions))
        await asyncio.sleep(0.3)  # s5's deadline passes meanwhile
        fcntl.flock(holder, fcntl.LOCK_UN)
        outcomes = dict(zip(sessions, await asyncio.wait_for(waiting, 30), strict=True))
    finally:
        os.close(holder)
    moved, busy = outcomes.pop("s3"), outcomes.pop("s5")
    assert isinstance(moved, SessionMoved)
    assert (moved.current.seq, moved.current.mode) == (2, "code")
    assert isinstance(busy, StoreBusy)
    assert "nothing was written" in str(busy)
    changed = [r for r in records(log) if r["event"] == "modefsm.mode_changed"]
    assert [(r["session_id"], r["to_mode"]) for r in changed] == [
        ("s3", "code"), ("s0", "architect"), ("s1", "architect"), ("s2", "architect"),
        ("s4", "architect"),
    ]  # fmt: skip
    assert {r["session_id"]: r["digest"] for r in changed[1:]} == outcomes
    assert commits(log, "s5") == [(1, "ask")]


async def test_changes_of_one_session_take_turns_and_turns_are_dropped(
    log: Path, store: FileStore
) -> None:
    sink = Recorder()
    engine = ModeEngine(SEED, store=store, sink=sink)
    sessions = [(await engine.new_session_async(f"s{i}")).session_id for i in range(20)]
    targets = ["architect", "code", "ask"] * 10
    holder = os.open(log, os.O_RDONLY)
    try:  # the lock held at first: every change is in flight at once, awaiting the store
        fcntl.flock(holder, fcntl.LOCK_EX)
        changes = asyncio.gather(*(engine.set_mode(sid, m) for sid in sessions for m in targets))
        await asyncio.sleep(0.1)
        assert len(engine._turns) == len(sessions)  # one turn per session in flight
        fcntl.flock(holder, fcntl.LOCK_UN)
        await asyncio.wait_for(changes, 60)
    finally:
        os.close(holder)
    assert engine._turns == {}  # no lock kept once no one waits
    for sid in sessions:  # each session's changes committed one after another, in order
        assert commits(log, sid) == [(n + 1, m) for n, m in enumerate(["ask", *targets])]
        told = [
            m["update"]["currentModeId"]
            for m in sink.sent
            if m["sessionId"] == sid and m["update"]["sessionUpdate"] == "current_mode_update"
        ]
        assert told == targets


async def test_refresh_after_a_rename_reads_the_new_file(log: Path, store: FileStore) -> None:
    """The log renamed away (a rotation) and the session changed in the new file by another
    process: a refresh follows the path to the new file, though the file this store has
    open did not grow."""
    engine = ModeEngine(SEED, store=store)
    sid = (await engine.new_session_async("s")).session_id
    rotated = log.with_name("modes.jsonl.1")
    with elsewhere(log, SEED, sid) as other:
        log.rename(rotated)  # noqa: ASYNC240 - a rotation tool renames it
        await other.set_mode(sid, "architect")  # the other store follows the path
    assert commits(log, sid) == [(2, "architect")]
    assert (await engine.refresh(sid)).state == "architect"
    assert engine.get(sid).seq == 2
    await engine.set_mode(sid, "code")
    assert commits(rotated, sid) == [(1, "ask")]
    assert commits(log, sid) == [(2, "architect"), (3, "code")]


async def test_refresh_takes_what_another_process_committed_and_says_so(
    log: Path, store: FileStore
) -> None:
    sink = Recorder()
    engine = ModeEngine(SEED, store=store, sink=sink)
    sid = (await engine.new_session_async("s")).session_id
    with elsewhere(log, SEED, sid) as other:
        await other.set_mode(sid, "architect")
    assert engine.get(sid).state == "ask"  # not looked yet
    assert (await engine.refresh(sid)).state == "architect"
    assert sink.sent == announced(SEED, sid, "architect")
    assert engine.get(sid).seq == 2
    assert await engine.refresh(sid) == engine.get(sid)  # nothing moved: nothing sent
    assert len(sink.sent) == 2


async def test_a_refusal_is_decided_on_the_committed_mode(log: Path, store: FileStore) -> None:
    engine = ModeEngine(PERMISSION, store=store)
    sid = (await engine.new_session_async("s")).session_id
    await engine.set_mode(sid, "plan")
    with elsewhere(log, PERMISSION, sid) as other:  # another process: plan -> default
        await other.set_mode(sid, "default")
    # acceptEdits is refused from plan (this engine's view) but allowed from default
    change = await engine.set_mode(sid, "acceptEdits")
    assert change is not None
    assert (change.from_mode, change.to_mode, change.seq) == ("default", "acceptEdits", 4)
    assert [r["event"] for r in read_log(log)].count("modefsm.change_rejected") == 0


def test_a_rejection_line_is_refused_when_the_session_moved(log: Path, store: FileStore) -> None:
    engine = ModeEngine(SEED, store=store)
    sid = engine.new_session("s").session_id
    with elsewhere(log, SEED, sid) as other:
        other.change(sid, "code", "set_mode")
    head = store.restore_point(sid)
    assert head is not None
    with pytest.raises(SessionMoved) as moved:
        store.note("modefsm.change_rejected", {"session_id": sid}, head._replace(seq=1))
    assert moved.value.current.seq == 2
    # the engine writes it from the committed mode instead
    with pytest.raises(UnknownModeError):
        engine.change(sid, "nope", "set_mode")
    rejected = [r for r in read_log(log) if r["event"] == "modefsm.change_rejected"]
    assert [(r["from_mode"], r["to_mode"], r["reason"]) for r in rejected] == [
        ("code", "nope", "unknown_mode")
    ]
    assert engine.get(sid).state == "code"


async def test_answers_logged_after_their_callback_are_bounded_ordered_and_drained(
    log: Path, store: FileStore, caplog: pytest.LogCaptureFixture
) -> None:
    """``reject_switch_soon`` returns at once while another process holds the lock; past
    MAX_BACKLOG lines waiting, one more is dropped, counted, logged once; the rest are
    written in the order given once the lock is free, and ``drain_notes`` waits for them."""
    engine = ModeEngine(SEED, store=store)
    one = (await engine.new_session_async("one")).session_id
    holder = os.open(log, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        for n in range(MAX_BACKLOG + 3):
            engine.reject_switch_soon(one, "late_answer", tool_call_id=f"t{n}", option_id="code")
        assert engine.notes_dropped == 3
        assert (await engine.refresh(one)).state == "ask"  # the loop serves meanwhile
        fcntl.flock(holder, fcntl.LOCK_UN)
        await asyncio.wait_for(engine.drain_notes(), 30)
    finally:
        os.close(holder)
    late = [r for r in records(log) if r.get("reason") == "late_answer"]
    assert [(r["tool_call_id"], r["option_id"], r["from_mode"]) for r in late] == [
        (f"t{n}", "code", "ask") for n in range(MAX_BACKLOG)
    ]
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "modefsm"] == [
        (
            "WARNING",
            f"{MAX_BACKLOG} log lines already wait for the store: more are dropped and counted",
        )
    ]


async def test_closing_a_session_with_an_open_ask_awaits_the_lock_then_answers(
    log: Path, store: FileStore
) -> None:
    """``close_session_async`` records the open ask's cancellation through the awaited
    store: while another process holds the lock the loop serves another session, the
    session stays live; once the lock is free the record is written, then it closes."""
    engine = ModeEngine(PERMISSION, store=store)
    one = (await engine.new_session_async("one")).session_id
    two = (await engine.new_session_async("two")).session_id
    call = ToolCall("t1", kind="edit", name="edit_file", title="Edit notes.txt")
    asked = await engine.decide_async(one, call)
    assert asked.decision == "ask"
    holder = os.open(log, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        closing = asyncio.ensure_future(engine.close_session_async(one))
        assert (await engine.refresh(two)).state == "default"  # the loop serves meanwhile
        assert (closing.done(), one in engine) == (False, True)
        fcntl.flock(holder, fcntl.LOCK_UN)
        await asyncio.wait_for(closing, 10)
    finally:
        os.close(holder)
    assert one not in engine
    final = await engine.outcome_of(asked)
    assert (final.decision, final.outcome, final.mode) == ("ask", "cancelled", "default")
    decided = [r for r in records(log) if r["event"] == "modefsm.tool_decided"]
    assert [
        {k: v for k, v in r.items() if k not in {"timestamp", "prev", "digest"}} for r in decided
    ] == [
        {
            "event": "modefsm.tool_decided",
            "level": "info",
            "session_id": one,
            "tool_call_id": "t1",
            "kind": "edit",
            "tool": "edit_file",
            "title_digest": title_digest("Edit notes.txt"),
            "rule": 1,
            "decision": "ask",
            "outcome": "cancelled",
            "mode": "default",
            "mode_seq": 1,
            "spec": "permission",
            "spec_hash": PERMISSION.content_hash,
        }
    ]


@pytest.mark.parametrize("awaited", [False, True], ids=["close_session", "close_session_async"])
async def test_an_ask_cancelled_at_close_is_judged_by_the_mode_another_process_committed(
    log: Path, store: FileStore, awaited: bool
) -> None:
    """Another process moved the session to ``plan`` while it had an open ask here: the
    close's record is refused once (``SessionMoved``), then written against ``plan``,
    where the edit is denied, not cancelled in ``default``."""
    engine = ModeEngine(PERMISSION, store=store)
    one = (await engine.new_session_async("one")).session_id
    call = ToolCall("t1", kind="edit", name="edit_file", title="Edit notes.txt")
    asked = await engine.decide_async(one, call)
    with elsewhere(log, PERMISSION, one) as other:
        await other.set_mode(one, "plan")
    if awaited:
        await engine.close_session_async(one)
    else:
        engine.close_session(one)
    final = await engine.outcome_of(asked)
    assert (final.decision, final.outcome, final.mode, final.mode_seq) == ("deny", None, "plan", 2)
    decided = [
        (r["tool_call_id"], r["decision"], r.get("outcome"), r["mode"], r["mode_seq"])
        for r in records(log)
        if r["event"] == "modefsm.tool_decided"
    ]
    assert decided == [("t1", "deny", None, "plan", 2)]  # an ask alone is not a record
