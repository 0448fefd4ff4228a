"""``DecidesOnce``: a tool call's decision written only if the call has none, per store.

Every store of the package refuses a second decision of a ``toolCallId`` with
``AlreadyDecided`` (naming the outcome found) and writes nothing; the file store checks
under its lock what it read since it began holding the session, across a rotation it
followed; PostgreSQL checks in the inserting transaction. ``ModeEngine.abandon_ask`` uses
it, and falls back to reading ``decisions()`` with a host's store that lacks it.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modefsm import ModeEngine, TransitionLog, preset
from modefsm.engine import ToolCall
from modefsm.log import EVENT_DECIDED, DecisionRecord, read_log
from modefsm.log._reader import DecisionEntry
from modefsm.replay import replay
from modefsm.store import (
    DECIDED_KEPT,
    AlreadyDecided,
    DecidesOnce,
    FileStore,
    LogStore,
    MemoryStore,
    RestorePoint,
    SessionMoved,
    SessionStore,
)

SPEC = preset("seed")
EDIT = ToolCall("call_1", "edit", None, "Edit notes.txt")


def fields(call: str, outcome: str | None, seq: int = 1) -> dict[str, Any]:
    return {
        "timestamp": "2026-12-02T08:00:00.000000Z",
        "session_id": "s1",
        "tool_call_id": call,
        "kind": "edit",
        "tool": None,
        "title_digest": None,
        "rule": None,
        "decision": "ask",
        "outcome": outcome,
        "mode": "ask",
        "mode_seq": seq,
        "spec": SPEC.name,
        "spec_hash": SPEC.content_hash,
    }


def outcomes(records: Iterator[DecisionRecord]) -> list[tuple[str, str | None]]:
    return [(r.tool_call_id, r.outcome) for r in records]


def file_outcomes(*paths: Path) -> list[tuple[str, str | None]]:
    return outcomes(
        item.record
        for item in read_log([str(p) for p in paths], decisions=True)
        if isinstance(item, DecisionEntry)
    )


class Stores:
    """Two stores on one place (one for the in-process stores), and what they hold."""

    def __init__(self, kind: str, tmp_path: Path, url: str | None) -> None:
        self.kind = kind
        self.path = tmp_path / "modes.jsonl"
        self.url = url
        self.opened: list[SessionStore] = []
        self.stream = tmp_path / "stream.jsonl"

    def open(self) -> SessionStore:
        store: SessionStore
        if self.kind == "memory":
            store = self.opened[0] if self.opened else MemoryStore()
        elif self.kind == "log":
            store = self.opened[0] if self.opened else LogStore(TransitionLog.to_file(self.stream))
        elif self.kind == "file":
            store = FileStore(self.path)
        else:
            from modefsm.store._postgres import PgStore

            assert self.url is not None
            log = TransitionLog.to_file(self.path.with_name(f"w{len(self.opened)}.jsonl"))
            store = PgStore(self.url, log=log)
        self.opened.append(store)
        return store

    def decided(self) -> list[tuple[str, str | None]]:
        if self.kind == "log":
            return file_outcomes(self.stream)
        return outcomes(self.opened[-1].decisions("s1"))

    def close(self) -> None:
        for store in {id(s): s for s in self.opened}.values():
            store.close()


@pytest.fixture(params=["memory", "log", "file", "postgresql"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    url = None
    if request.param == "postgresql":
        pytest.importorskip("psycopg", reason="psycopg is not installed (.[postgresql])")
        url = request.getfixturevalue("postgres_url")
    made = Stores(request.param, tmp_path, url)
    yield made
    made.close()


async def test_a_second_decision_of_a_call_is_refused_and_nothing_is_written(stores: Stores):
    first, second = stores.open(), stores.open()
    engine = ModeEngine(SPEC, store=first)
    await engine.new_session_async("s1")
    assert isinstance(first, DecidesOnce)
    assert isinstance(second, DecidesOnce)
    point = await second.restore_point_async("s1")
    assert point is not None
    await first.note_once_async(fields("call_1", "allow_once"), point)
    with pytest.raises(AlreadyDecided) as refused:
        await second.note_once_async(fields("call_1", "abandoned"), point)
    assert (refused.value.session_id, refused.value.tool_call_id) == ("s1", "call_1")
    assert refused.value.outcome == "allow_once"
    assert str(refused.value) == "toolCallId 'call_1' of sessionId s1 already has a decision"
    # another call is written; then a later decision of call_1 names the last outcome
    await second.note_once_async(fields("call_2", "abandoned"), point)
    await first.note_async(EVENT_DECIDED, fields("call_1", "cancelled"), point)
    with pytest.raises(AlreadyDecided) as again:
        await second.note_once_async(fields("call_1", "abandoned"), point)
    assert again.value.outcome == "cancelled"
    assert stores.decided() == [
        ("call_1", "allow_once"),
        ("call_2", "abandoned"),
        ("call_1", "cancelled"),
    ]


async def test_a_decision_behind_the_session_is_still_refused_as_moved(stores: Stores):
    store = stores.open()
    engine = ModeEngine(SPEC, store=store)
    await engine.new_session_async("s1")
    stale = await store.restore_point_async("s1")
    assert stale is not None
    await engine.set_mode("s1", "architect")
    assert isinstance(store, DecidesOnce)
    with pytest.raises(SessionMoved) as moved:
        await store.note_once_async(fields("call_1", "abandoned"), stale)
    assert moved.value.current[1:3] == ("architect", 2)
    assert stores.decided() == []


async def test_abandon_ask_settles_once_for_two_engines(stores: Stores):
    """Two engines (two processes' worth) settle one call: one writes, one finds it."""
    first, second = stores.open(), stores.open()
    await ModeEngine(SPEC, store=first).new_session_async("s1")
    engines = [ModeEngine(SPEC, store=s) for s in (first, second)]
    points = [await s.restore_point_async("s1") for s in (first, second)]
    settled = await asyncio.gather(
        *(e.abandon_ask(p, EDIT) for e, p in zip(engines, points, strict=True) if p is not None)
    )
    assert sorted(settled) == ["abandoned", "written"]
    assert stores.decided() == [("call_1", "abandoned")]


class HostStore:
    """A host's own store that implements :class:`SessionStore` but not ``DecidesOnce``."""

    def __init__(self) -> None:
        self._inner = MemoryStore()

    def __getattr__(self, name: str) -> Any:
        if name == "note_once_async":
            raise AttributeError(name)
        return getattr(self._inner, name)


async def test_a_store_without_decides_once_gets_todays_check():
    store = HostStore()
    assert not isinstance(store, DecidesOnce)
    engine = ModeEngine(SPEC, store=store)  # delegates each member
    await engine.new_session_async("s1")
    point = store.restore_point("s1")
    assert point is not None
    assert await engine.abandon_ask(point, EDIT) == "written"
    assert await engine.abandon_ask(point, EDIT) == "abandoned"
    assert outcomes(store.decisions("s1")) == [("call_1", "abandoned")]


def rotate(path: Path) -> Path:
    """Rename the log away, as a rotation tool does, and create the new one (0600)."""
    rotated = path.with_name(path.name + ".1")
    path.rename(rotated)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    return rotated


async def test_a_call_settled_before_a_rotation_is_not_settled_again_after_it(tmp_path: Path):
    """The store held the session when another store settled the call; then the rename."""
    path = tmp_path / "modes.jsonl"
    holder, other = FileStore(path), FileStore(path)
    try:
        await ModeEngine(SPEC, store=holder).new_session_async("s1")
        point = await holder.restore_point_async("s1")  # held from here on
        assert point is not None
        engine, settler = ModeEngine(SPEC, store=holder), ModeEngine(SPEC, store=other)
        other_point = await other.restore_point_async("s1")
        assert other_point is not None
        assert await settler.abandon_ask(other_point, EDIT) == "written"
        rotated = rotate(path)
        assert await engine.abandon_ask(point, EDIT) == "abandoned"  # its decisions(): none
        assert file_outcomes(path) == []
        assert file_outcomes(rotated) == [("call_1", "abandoned")]
        # a new call is settled in the new file, once
        assert await engine.abandon_ask(point, ToolCall("call_2", "edit", None, "Edit")) == (
            "written"
        )
        assert (
            await settler.abandon_ask(point, ToolCall("call_2", "edit", None, "Edit"))
            == "abandoned"
        )
    finally:
        holder.close()
        other.close()
    assert file_outcomes(rotated, path) == [("call_1", "abandoned"), ("call_2", "abandoned")]
    assert replay([str(rotated), str(path)], [SPEC], verify=True).violations == ()


async def test_a_store_not_holding_the_session_reads_the_file_under_the_lock(tmp_path: Path):
    path = tmp_path / "modes.jsonl"
    writer, late = FileStore(path), FileStore(path)
    try:
        await ModeEngine(SPEC, store=writer).new_session_async("s1")
        point = RestorePoint("s1", "ask", 1)  # known from elsewhere: not held by `late`
        await writer.note_once_async(fields("call_1", "abandoned"), point)
        with pytest.raises(AlreadyDecided) as refused:
            await late.note_once_async(fields("call_1", "abandoned"), point)
        assert refused.value.outcome == "abandoned"
    finally:
        writer.close()
        late.close()
    assert file_outcomes(path) == [("call_1", "abandoned")]


async def test_a_call_decided_past_the_kept_count_is_still_refused(stores: Stores):
    """Past ``DECIDED_KEPT`` decisions of the session since the holder began holding it, a
    call decided before them is refused as the first was: the contract is the same in every
    store (the decisions here written by another store, a process of its own, when it can
    be one)."""
    writer, holder = stores.open(), stores.open()
    await ModeEngine(SPEC, store=writer).new_session_async("s1")
    point = await holder.restore_point_async("s1")  # held from here on
    assert point is not None
    assert isinstance(holder, DecidesOnce)
    calls = [f"call_{i}" for i in range(DECIDED_KEPT + 1)]
    for call in calls:
        await writer.note_async(EVENT_DECIDED, fields(call, "allow_once"), point)
    with pytest.raises(AlreadyDecided) as refused:
        await holder.note_once_async(fields("call_0", "abandoned"), point)
    assert refused.value.outcome == "allow_once"
    # and the holder's own decisions past the count, too
    await holder.note_once_async(fields("call_new", "abandoned"), point)
    for call in calls[1:]:
        await holder.note_async(EVENT_DECIDED, fields(call, "cancelled"), point)
    with pytest.raises(AlreadyDecided) as again:
        await holder.note_once_async(fields("call_new", "abandoned"), point)
    assert again.value.outcome == "abandoned"
    expected = [(call, "allow_once") for call in calls] + [("call_new", "abandoned")]
    assert stores.decided() == expected + [(call, "cancelled") for call in calls[1:]]


# PostgreSQL checks in the database; MemoryStore keeps every line (the ids whole) anyway
@pytest.mark.parametrize("kind", ["log", "file"])
async def test_long_tool_call_ids_are_remembered_in_bounded_memory(kind: str, tmp_path: Path):
    """Each decided ``toolCallId`` a store remembers costs a bounded size, whatever its length;
    one that differs in its last character is another call."""
    stores = Stores(kind, tmp_path, None)
    try:
        await remembers_long_ids_in_bounded_memory(stores)
    finally:
        stores.close()


async def remembers_long_ids_in_bounded_memory(stores: Stores) -> None:
    store = stores.open()
    await ModeEngine(SPEC, store=store).new_session_async("s1")
    point = await store.restore_point_async("s1")
    assert point is not None
    assert isinstance(store, DecidesOnce)
    long_id = "c" * (256 * 1024)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(32):
            await store.note_once_async(fields(f"{long_id}{i:02}", "allow_once"), point)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 1024 * 1024  # the ids alone are 8 MiB
    with pytest.raises(AlreadyDecided):
        await store.note_once_async(fields(f"{long_id}07", "abandoned"), point)
    await store.note_once_async(fields(f"{long_id}32", "abandoned"), point)
    assert len(stores.decided()) == 33


async def test_a_store_not_holding_the_session_reads_the_file_off_the_event_loop(
    tmp_path: Path,
):
    """A store that does not hold the session holds it first and reads its earlier decisions
    off the event loop, outside the file's lock; the refusal is as exact."""
    path = tmp_path / "modes.jsonl"
    writer = FileStore(path)
    try:
        await ModeEngine(SPEC, store=writer).new_session_async("s1")
        await ModeEngine(SPEC, store=writer).new_session_async("s2")
        point = await writer.restore_point_async("s1")
        assert point is not None
        await writer.note_async(EVENT_DECIDED, fields("open_1", "allow_once"), point)
        for i in range(100_000):  # another session's: a large file to read
            writer.note(EVENT_DECIDED, {**fields(f"c{i}", "allow_once"), "session_id": "s2"})
    finally:
        writer.close()
    late = FileStore(path)
    gaps: list[float] = []

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.001)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    try:
        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0.02)
        took = time.monotonic()
        with pytest.raises(AlreadyDecided) as refused:
            await late.note_once_async(fields("open_1", "abandoned"), point)
        await late.note_once_async(fields("open_2", "abandoned"), point)
        took = time.monotonic() - took
        await asyncio.sleep(0.02)  # the ticker wakes: a stall is measured
        ticker.cancel()
        assert refused.value.outcome == "allow_once"
        # Each call reads the whole file: on the loop, the longest stall is most of the
        # call's time (whatever the machine's load); off the loop, a small part of it.
        assert max(gaps) < 0.6 * took, (max(gaps), took)
    finally:
        late.close()
    decided = [d for d in file_outcomes(path) if not d[0].startswith("c")]
    assert decided == [("open_1", "allow_once"), ("open_2", "abandoned")]
