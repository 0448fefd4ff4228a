"""The log store: an engine's one persistence argument when the records only go to a log."""

from __future__ import annotations

import asyncio
import gc
import io
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from acp import RequestError

from modefsm import (
    LogStore,
    MemoryStore,
    ModeAgent,
    ModeEngine,
    RestorePoint,
    SessionMoved,
    SharedEngine,
    TransitionLog,
    preset,
)
from modefsm.errors import LogError, UnknownModeError
from modefsm.log import spec_header
from modefsm.log._records import record_digest
from tests.log.test_writer import structlog_reference
from tests.replay.golden_logs import fixed_clock

SPEC = preset("seed")
HASH = SPEC.content_hash
STAMP = "2026-01-01T00:00:00.000000Z"

_RECORDS: list[tuple[str, dict[str, Any]]] = [
    (
        "modefsm.session_created",
        {"timestamp": STAMP, "session_id": "s1", "seq": 1, "from_mode": None, "to_mode": "ask",
         "origin": "new", "spec": "seed", "spec_hash": HASH},
    ),
    (
        "modefsm.session_created",
        {"timestamp": STAMP, "session_id": "s\u00e9\u2603", "seq": 1, "from_mode": None,
         "to_mode": "ask", "origin": "new", "request_id": "r-1", "protocol": 2, "spec": "seed",
         "spec_hash": HASH, "cwd": "/src/caf\u00e9"},
    ),
    (
        "modefsm.mode_changed",
        {"timestamp": STAMP, "session_id": "s1", "seq": 2, "from_mode": "ask",
         "to_mode": "architect", "origin": "switch_mode", "tool_call_id": "call_1",
         "option_id": "architect", "proposed_in": "ask", "spec": "seed", "spec_hash": HASH},
    ),
    (
        "modefsm.config_changed",
        {"timestamp": STAMP, "session_id": "s1", "seq": 3, "from_mode": "architect",
         "to_mode": "architect", "origin": "set_config_option", "request_id": 7,
         "config_id": "model", "value": "smart", "spec": "seed", "spec_hash": HASH,
         "config": {"model": "smart", "fast": True}},
    ),
    (
        "modefsm.mode_changed",
        {"timestamp": STAMP, "session_id": "s1", "seq": 4, "from_mode": "architect",
         "to_mode": "code", "origin": "restore", "spec": "seed", "spec_hash": HASH,
         "config": {"model": "smart", "fast": True}},
    ),
]  # fmt: skip
"""Committed records of every kind and optional field, in the order a session writes them."""


def _structlog_lines(records: list[tuple[str, dict[str, Any]]]) -> bytes:
    """The lines structlog itself writes for *records*: a ``BytesLogger`` behind a bound
    logger with ``add_log_level`` and ``JSONRenderer(serializer=orjson.dumps)``, each chained
    by :func:`record_digest` (which leaves out any key no record model has)."""
    out, bound = structlog_reference()
    prev = None
    for event, fields in records:
        chained = {**fields, "prev": prev}
        prev = record_digest({**chained, "event": event})
        bound.info(event, **chained, digest=prev)
    return out.getvalue()


def _lines(buffer: io.BytesIO) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in buffer.getvalue().splitlines()]


class TestLines:
    """The lines are the transition log's own, written before each change takes effect."""

    def test_records_and_rejections_are_written_as_the_log_writes_them(self):
        buffer = io.BytesIO()
        engine = ModeEngine(SPEC, store=LogStore(TransitionLog.to_stream(buffer)))
        with fixed_clock():
            engine.new_session("s1", cwd="/src")
            asyncio.run(engine.set_mode("s1", "architect"))
            with pytest.raises(UnknownModeError):
                asyncio.run(engine.set_mode("s1", "nope"))
        header, *lines = _lines(buffer)
        assert header == {
            "timestamp": "2026-01-01T00:00:01.000000Z",
            "spec": "seed",
            "spec_hash": HASH,
            "definition": SPEC.definition,
            "prev": None,
            "digest": record_digest(header),
            "event": "modefsm.spec",
            "level": "info",
        }
        first, second = lines[0]["digest"], lines[1]["digest"]
        assert lines == [
            {
                "timestamp": "2026-01-01T00:00:01.000000Z",
                "session_id": "s1",
                "seq": 1,
                "from_mode": None,
                "to_mode": "ask",
                "origin": "new",
                "spec": "seed",
                "spec_hash": HASH,
                "cwd": "/src",
                "prev": header["digest"],
                "digest": first,
                "event": "modefsm.session_created",
                "level": "info",
            },
            {
                "timestamp": "2026-01-01T00:00:02.000000Z",
                "session_id": "s1",
                "seq": 2,
                "from_mode": "ask",
                "to_mode": "architect",
                "origin": "set_mode",
                "spec": "seed",
                "spec_hash": HASH,
                "prev": first,
                "digest": second,
                "event": "modefsm.mode_changed",
                "level": "info",
            },
            {
                "timestamp": "2026-01-01T00:00:03.000000Z",
                "session_id": "s1",
                "seq": None,
                "from_mode": "architect",
                "to_mode": "nope",
                "origin": "set_mode",
                "spec": "seed",
                "spec_hash": HASH,
                "reason": "unknown_mode",
                "prev": second,
                "digest": lines[2]["digest"],
                "event": "modefsm.change_rejected",
                "level": "warning",
            },
        ]
        assert [record_digest(line) for line in lines] == [line["digest"] for line in lines]
        assert engine.get("s1").digest == second

    def test_appended_lines_are_the_logs_general_write_and_structlogs_own_bytes(
        self, tmp_path: Path
    ):
        store = LogStore(TransitionLog.to_file(tmp_path / "store.jsonl"))
        log = TransitionLog.to_file(tmp_path / "log.jsonl")
        store.describe(SPEC)
        log.describe(SPEC)
        for event, fields in _RECORDS:  # the store holds each session's head
            assert store.append(event, dict(fields), None) == log.write(event, fields)
        store.log.close()
        log.close()
        header = {"timestamp": STAMP, **spec_header(SPEC)}
        expected = _structlog_lines([("modefsm.spec", header), *_RECORDS])
        assert (tmp_path / "store.jsonl").read_bytes() == expected
        assert (tmp_path / "log.jsonl").read_bytes() == expected

    @pytest.mark.parametrize("kind", ["memory", "log"])
    def test_records_declared_exact_get_the_same_digests_and_bytes(self, kind: str):
        written: list[Any] = []
        for exact in (False, True):
            buffer = io.BytesIO()
            store = MemoryStore() if kind == "memory" else LogStore(TransitionLog.to_stream(buffer))
            digests = [store.append(e, {**f}, None, exact=exact) for e, f in _RECORDS]
            written.append((digests, buffer.getvalue(), store.lines))
        assert written[0] == written[1]
        assert written[0][1 if kind == "log" else 2]  # something was written to compare

    def test_a_failed_write_keeps_no_point(self):
        read_end, write_end = os.pipe()
        os.close(read_end)  # every write now fails with EPIPE
        with open(write_end, "wb", buffering=0) as stream:
            store = LogStore(TransitionLog.to_stream(stream, path="broken"))
            engine = ModeEngine(SPEC, store=store)
            with pytest.raises(LogError, match="broken: cannot write the transition log"):
                engine.new_session("s1")
        assert ("s1" in engine, store.restore_point("s1"), store.list_sessions()) == (
            False,
            None,
            [],
        )


class TestPoints:
    """A live session's point is exact and guarded, though the store keeps no point object."""

    def test_points_are_exact_and_a_stale_seq_or_head_is_refused(self):
        buffer = io.BytesIO()
        store = LogStore(TransitionLog.to_stream(buffer))
        engine = ModeEngine(SPEC, store=store)
        engine.new_session("s1", cwd="/src")
        assert store.restore_point("s1") == RestorePoint(
            "s1", "ask", 1, None, engine.get("s1").digest
        )
        asyncio.run(engine.set_mode("s1", "architect"))
        asyncio.run(engine.set_mode("s1", "code"))
        current = RestorePoint("s1", "code", 3, "architect", engine.get("s1").digest)
        assert store.restore_point("s1") == current
        written = buffer.getvalue()
        fields = {
            "timestamp": "2026-01-01T00:00:00.000000Z",
            "session_id": "s1",
            "seq": 3,
            "from_mode": "architect",
            "to_mode": "ask",
            "origin": "set_mode",
            "spec": SPEC.name,
            "spec_hash": HASH,
        }
        stale = RestorePoint("s1", "architect", 2)
        with pytest.raises(SessionMoved) as moved:
            store.append("modefsm.mode_changed", fields, stale)
        assert moved.value.current == current
        with pytest.raises(SessionMoved) as noted:
            store.note("modefsm.change_rejected", {**fields, "seq": None}, stale)
        assert noted.value.current == current
        assert (buffer.getvalue(), store.restore_point("s1")) == (written, current)

    def test_a_session_restored_from_elsewhere_continues_from_the_callers_head(self):
        store = LogStore(TransitionLog.to_stream(io.BytesIO()))
        head = RestorePoint("s9", "code", 4, "architect", "d" * 64)
        fields = {
            "timestamp": "2026-01-01T00:00:00.000000Z",
            "session_id": "s9",
            "seq": 6,
            "from_mode": "code",
            "to_mode": "ask",
            "origin": "set_mode",
            "spec": SPEC.name,
            "spec_hash": HASH,
        }
        with pytest.raises(SessionMoved) as moved:  # seq 6 does not follow the head's 4
            store.append("modefsm.mode_changed", fields, head)
        assert (moved.value.current, store.restore_point("s9")) == (head, None)
        digest = store.append("modefsm.mode_changed", {**fields, "seq": 5}, head)
        assert store.restore_point("s9") == RestorePoint("s9", "ask", 5, "code", digest)
        digest = store.append(
            "modefsm.mode_changed",
            {**fields, "seq": 6, "from_mode": "ask", "to_mode": "ask", "origin": "restore"},
            None,
        )
        assert store.restore_point("s9") == RestorePoint("s9", "ask", 6, "code", digest)

    def test_a_second_creation_is_refused_with_the_first_ones_point(self):
        buffer = io.BytesIO()
        store = LogStore(TransitionLog.to_stream(buffer))
        engine = ModeEngine(SPEC, store=store)
        first = engine.new_session("s1", cwd="/src")
        written = buffer.getvalue()
        point = RestorePoint("s1", "ask", 1, None, first.digest)
        fields = {**_RECORDS[0][1], "timestamp": STAMP}
        with pytest.raises(SessionMoved) as moved:
            store.append("modefsm.session_created", fields, None)
        assert (moved.value.current, store.restore_point("s1")) == (point, point)
        assert (buffer.getvalue(), store.list_sessions()[0][:2]) == (written, ("s1", "/src"))

    @pytest.mark.parametrize("kind", ["memory", "log"])
    def test_creations_to_any_mode_with_any_fields_keep_exact_points(self, kind: str):
        log = TransitionLog.to_stream(io.BytesIO())
        store = MemoryStore() if kind == "memory" else LogStore(log)
        created = {**_RECORDS[0][1]}
        made = {
            "s1": {**created},
            "s2": {**created, "session_id": "s2", "to_mode": "code"},  # another spec's initial
            "s3": {**created, "session_id": "s3", "config": {"model": "smart", "fast": True}},
            "s4": {**created, "session_id": "s4", "origin": "restore", "from_mode": "ask"},
            "s5": {**created, "session_id": "s5"},
        }
        digests = {sid: store.append("modefsm.session_created", f, None) for sid, f in made.items()}
        assert [store.restore_point(sid) for sid in made] == [
            RestorePoint("s1", "ask", 1, None, digests["s1"]),
            RestorePoint("s2", "code", 1, None, digests["s2"]),
            RestorePoint("s3", "ask", 1, None, digests["s3"], {"model": "smart", "fast": True}),
            RestorePoint("s4", "ask", 1, None, digests["s4"]),
            RestorePoint("s5", "ask", 1, None, digests["s5"]),
        ]
        changed = {**_RECORDS[2][1], "session_id": "s2", "from_mode": "code", "seq": 2}
        digest = store.append("modefsm.mode_changed", changed, None)
        assert store.restore_point("s2") == RestorePoint("s2", "architect", 2, "code", digest)
        with pytest.raises(SessionMoved) as moved:
            store.append("modefsm.mode_changed", {**changed, "session_id": "s1", "seq": 3}, None)
        assert moved.value.current == RestorePoint("s1", "ask", 1, None, digests["s1"])

    def test_config_values_are_kept_as_plain_pairs_and_given_as_new_dicts(self):
        store = LogStore(TransitionLog.to_stream(io.BytesIO()))
        config = {"model": "smart", "fast": True}
        created = {**_RECORDS[0][1], "config": config}
        first = store.append("modefsm.session_created", created, None)
        changed = {**_RECORDS[3][1], "from_mode": "ask", "to_mode": "ask", "seq": 2}
        digest = store.append("modefsm.config_changed", changed, None)
        config["model"] = "changed by the caller"
        given = store.restore_point("s1")
        assert given == RestorePoint("s1", "ask", 2, None, digest, {"model": "smart", "fast": True})
        assert given.config is not None
        given.config["model"] = "changed by a reader"
        assert store.restore_point("s1") == given._replace(config={"model": "smart", "fast": True})
        for _ in range(3):  # a collection untracks a tuple once its items are untracked
            gc.collect()
        assert [gc.is_tracked(point) for point in store._heads.values()] == [False]
        assert first != digest

    def test_write_returns_the_digest_it_chained(self, tmp_path: Path):
        log = TransitionLog.to_file(tmp_path / "modes.jsonl")
        fields = {
            "timestamp": "2026-01-01T00:00:00.000000Z",
            "session_id": "s1",
            "seq": 1,
            "from_mode": None,
            "to_mode": "ask",
            "origin": "new",
            "spec": SPEC.name,
            "spec_hash": HASH,
        }
        given = dict(fields)
        digest = log.write("modefsm.session_created", fields)
        diagnostic = log.write("modefsm.notify_failed", {"session_id": "s1", "error": "gone"})
        log.close()
        first, second = (tmp_path / "modes.jsonl").read_bytes().splitlines()
        assert (digest, diagnostic, log.head) == (orjson.loads(first)["digest"], None, digest)
        assert orjson.loads(second) == {
            "session_id": "s1",
            "error": "gone",
            "event": "modefsm.notify_failed",
            "level": "warning",
        }
        assert fields == given  # the caller's dict is left as it was


class TestMemory:
    """Only live sessions are held; nothing is promised after they close."""

    def test_a_closed_session_is_forgotten(self):
        store = LogStore(TransitionLog.to_stream(io.BytesIO()))
        engine = ModeEngine(SPEC, store=store)
        engine.new_session("s1", cwd="/a")
        engine.new_session("s2", cwd="/b")
        engine.close_session("s1")
        assert [s.session_id for s in store.list_sessions()] == ["s2"]
        assert (store.restore_point("s1"), store.restore_point("s2")[:3]) == (
            None,
            ("s2", "ask", 1),
        )
        assert (store.lines, list(store.history("s2"))) == ([], [])

    def test_a_closed_session_cannot_be_loaded(self):
        agent = ModeAgent(SPEC, store=LogStore(TransitionLog.to_stream(io.BytesIO())))
        agent.on_connect(_Quiet())
        created = asyncio.run(agent.new_session(cwd="/a"))
        asyncio.run(agent.close_session(session_id=created.session_id))
        with pytest.raises(RequestError) as raised:
            asyncio.run(agent.load_session(cwd="/a", session_id=created.session_id))
        error = raised.value
        assert (error.code, str(error)) == (
            -32002,
            f"sessionId: unknown sessionId {created.session_id!r}",
        )


class TestOneArgument:
    """``store=`` is the one persistence argument of the engine and of what builds one."""

    @pytest.mark.parametrize("build", [ModeEngine, SharedEngine, ModeAgent])
    def test_log_is_not_an_argument(self, build: Any):
        with pytest.raises(TypeError, match="unexpected keyword argument 'log'"):
            build(SPEC, log=TransitionLog.to_stream(io.BytesIO()))


class _Quiet:
    async def session_update(self, **kwargs: Any) -> None:
        del kwargs
