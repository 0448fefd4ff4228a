"""The in-memory store keeps the file store's contract: the same records, guards and pages."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from modefsm import (
    FileStore,
    LogStore,
    MemoryStore,
    ModeAgent,
    ModeEngine,
    RestorePoint,
    SessionMoved,
    SessionStore,
    TransitionLog,
    preset,
    replay,
)
from modefsm.errors import LogError, UnknownModeError
from modefsm.store import ListedSession

SPEC = preset("seed")


@pytest.fixture(params=["file", "memory"])
def store(request, tmp_path: Path):
    made: SessionStore = (
        FileStore(tmp_path / "modes.jsonl") if request.param == "file" else MemoryStore()
    )
    yield made
    made.close()


def _changes(store: SessionStore, session_id: str) -> list[tuple[object, ...]]:
    return [(r.seq, r.from_mode, r.to_mode, r.origin) for r in store.history(session_id)]


def test_the_engine_writes_and_restores_through_either_store(store: SessionStore):
    engine = ModeEngine(SPEC, store=store)
    engine.new_session("s1", cwd="/a")
    asyncio.run(engine.set_mode("s1", "architect"))
    asyncio.run(engine.set_mode("s1", "code"))
    point = store.restore_point("s1")
    assert point is not None
    assert point[:4] == ("s1", "code", 3, "architect")
    assert _changes(store, "s1") == [
        (1, None, "ask", "new"),
        (2, "ask", "architect", "set_mode"),
        (3, "architect", "code", "set_mode"),
    ]
    assert engine.get("s1").digest == point.digest

    # a second engine on the same store (a restart) restores the session where it stood
    again = ModeEngine(SPEC, store=store)
    session = again.restore_session("s1", point.mode, point.seq, previous=point.previous)
    assert (session.state, session.seq, session.previous) == ("code", 3, "architect")
    asyncio.run(again.set_mode("s1", "ask"))
    assert store.restore_point("s1") == RestorePoint("s1", "ask", 4, "code", again.get("s1").digest)


def test_a_stale_seq_is_refused_and_nothing_is_kept(store: SessionStore):
    engine = ModeEngine(SPEC, store=store)
    engine.new_session("s1")
    asyncio.run(engine.set_mode("s1", "architect"))
    current = store.restore_point("s1")
    assert current is not None
    stale = RestorePoint("s1", "ask", 1)
    fields = {
        "timestamp": "2026-01-01T00:00:00.000000Z",
        "session_id": "s1",
        "seq": 2,
        "from_mode": "ask",
        "to_mode": "code",
        "origin": "set_mode",
        "spec": SPEC.name,
        "spec_hash": SPEC.content_hash,
    }
    with pytest.raises(SessionMoved) as moved:
        store.append("modefsm.mode_changed", fields, stale)
    assert moved.value.current == current
    assert _changes(store, "s1") == [(1, None, "ask", "new"), (2, "ask", "architect", "set_mode")]
    with pytest.raises(SessionMoved):  # a rejection decided on the stale mode is refused too
        store.note("modefsm.change_rejected", {**fields, "seq": None}, stale)


def test_session_list_pages_are_the_same(store: SessionStore):
    engine = ModeEngine(SPEC, store=store)
    for session_id, cwd in [("b", "/x"), ("a", "/x"), ("c", "/y"), ("d", None)]:
        engine.new_session(session_id, cwd=cwd)
    asyncio.run(engine.set_mode("b", "architect"))  # b: the newest activity
    listed = store.list_sessions()
    assert [(s.session_id, s.cwd) for s in listed] == [("b", "/x"), ("c", "/y"), ("a", "/x")]
    assert [s.updated_at for s in listed] == sorted((s.updated_at for s in listed), reverse=True)
    first = store.list_sessions(limit=1)
    assert [s.session_id for s in first] == ["b"]
    after = (first[0].updated_at, first[0].session_id)
    assert [s.session_id for s in store.list_sessions(after=after)] == ["c", "a"]
    assert [s.session_id for s in store.list_sessions(cwd="/x")] == ["b", "a"]


def test_memory_lines_replay_clean_with_a_verified_chain(tmp_path: Path):
    store = MemoryStore()
    engine = ModeEngine(SPEC, store=store)
    engine.new_session("s1")
    engine.new_session("s2")
    asyncio.run(engine.set_mode("s1", "architect"))
    with pytest.raises(UnknownModeError):  # a rejection line
        asyncio.run(engine.set_mode("s2", "nope"))
    asyncio.run(engine.set_mode("s2", "code"))
    assert [(line["event"], line["session_id"], line["seq"]) for line in store.lines] == [
        ("modefsm.session_created", "s1", 1),
        ("modefsm.session_created", "s2", 1),
        ("modefsm.mode_changed", "s1", 2),
        ("modefsm.change_rejected", "s2", None),
        ("modefsm.mode_changed", "s2", 2),
    ]
    path = tmp_path / "memory.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in store.lines))
    report = replay([path], verify=True)
    assert report.exit_status == 0
    assert report.violations == ()
    assert [(h.session_id, h.mode, h.seq, h.rejections) for h in report.sessions] == [
        ("s1", "architect", 2, 0),
        ("s2", "code", 2, 1),
    ]


def test_a_closed_memory_store_refuses_writes():
    store = MemoryStore()
    engine = ModeEngine(SPEC, store=store)
    engine.new_session("s1")
    store.close()
    with pytest.raises(LogError, match="closed"):
        asyncio.run(engine.set_mode("s1", "code"))
    assert engine.get("s1").state == "ask"  # nothing changed


def test_an_agent_takes_the_store_and_restores_from_it():
    store = MemoryStore()
    first = ModeAgent(SPEC, store=store)
    assert first.engine.store is store
    created = asyncio.run(first.new_session(cwd="/w", mcp_servers=[]))
    session_id = created.session_id
    asyncio.run(first.set_session_mode(mode_id="code", session_id=session_id))

    later = ModeAgent(SPEC, store=store)  # another connection (or a restart) on the store
    loaded = asyncio.run(later.load_session(cwd="/w", session_id=session_id, mcp_servers=[]))
    assert loaded.modes is not None
    assert loaded.modes.current_mode_id == "code"
    listed = asyncio.run(later.list_sessions())
    assert [(s.session_id, s.cwd) for s in listed.sessions] == [(session_id, "/w")]


def _first(session_id: str, origin: str, from_mode: str | None, **extra: str) -> dict[str, object]:
    return {
        "timestamp": f"2026-01-01T00:00:0{len(session_id)}.000000Z",
        "session_id": session_id,
        "seq": 1,
        "from_mode": from_mode,
        "to_mode": "code" if from_mode else "ask",
        "origin": origin,
        "spec": SPEC.name,
        "spec_hash": SPEC.content_hash,
        **extra,
    }


@pytest.mark.parametrize(
    "build", [MemoryStore, lambda: LogStore(TransitionLog.to_stream(io.BytesIO()))],
    ids=["memory", "log"],
)  # fmt: skip
def test_a_first_record_sets_the_point_and_the_list_its_origin_and_cwd_say(build: Any):
    store = build()
    created = store.append("modefsm.session_created", _first("n", "new", None, cwd="/a"), None)
    moved = store.append("modefsm.mode_changed", _first("mm", "set_mode", "ask"), None)
    kept = store.append("modefsm.mode_changed", _first("rrr", "restore", "ask"), None)
    assert [store.restore_point(s) for s in ("n", "mm", "rrr")] == [
        RestorePoint("n", "ask", 1, None, created),
        RestorePoint("mm", "code", 1, "ask", moved),  # a change's previous is its from_mode
        RestorePoint("rrr", "code", 1, None, kept),  # a restore moves no previous
    ]
    later = {**_first("n", "set_mode", "ask"), "seq": 2, "timestamp": "2026-01-01T00:00:09Z"}
    store.append("modefsm.mode_changed", later, None)
    store.append("modefsm.mode_changed", {**_first("mm", "set_mode", "code"), "seq": 2}, None)
    assert store.list_sessions() == [ListedSession("n", "/a", "2026-01-01T00:00:09Z")]
