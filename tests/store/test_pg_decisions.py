"""Tool decisions in PostgreSQL: two PgStore-backed engines on one real database.

Each engine has its own store (its own connection and its own worker log), as two workers
have. A decision is a row of ``modefsm_decisions``, committed before ``decide_async``
returns and guarded like a record (refused once the session moved past its mode); an
``allow_always`` made by one engine is honoured by the other in the same session and mode
only; a restored session rebuilds its ``persist = true`` grants from the database; the
database's export and each worker's log replay clean.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (.[postgresql])")

from modefsm import ModeEngine, ModeSpec, ToolCall, TransitionLog, preset  # noqa: E402
from modefsm.log import EVENT_DECIDED  # noqa: E402
from modefsm.replay import replay  # noqa: E402
from modefsm.store import RestorePoint, SessionMoved, export_store  # noqa: E402
from modefsm.store._postgres import SCHEMA_VERSION, PgStore  # noqa: E402

RUN = ToolCall("call_run", "execute", "Bash", "Run ls")


def spec_of(*, persist: bool) -> ModeSpec:
    data = preset("permission").model_dump(mode="json", by_alias=True, exclude_none=True)
    data["grants"] = {"scope": "mode", "persist": persist}
    return ModeSpec.model_validate(data)


def decided(url: str) -> list[tuple[Any, ...]]:
    """The database's decisions: (sessionId, toolCallId, decision, outcome, mode, mode_seq)."""
    with psycopg.connect(url) as db:
        rows = db.execute("SELECT record FROM modefsm_decisions ORDER BY gseq").fetchall()
    keys = ("session_id", "tool_call_id", "decision", "outcome", "mode", "mode_seq")
    return [tuple(r[0][k] for k in keys) for r in rows]


def worker(url: str, log: Path, spec: ModeSpec) -> tuple[PgStore, ModeEngine]:
    store = PgStore(url, log=TransitionLog.to_file(log))
    return store, ModeEngine(spec, store=store)


def replays_clean(url: str, tmp_path: Path, spec: ModeSpec, *logs: Path) -> None:
    export = tmp_path / "export.jsonl"
    with export.open("wb") as out:
        export_store(url, out)
    assert replay([str(export)], [spec], verify=True).violations == ()
    assert replay([str(p) for p in logs], [spec], verify=True).violations == ()


async def restore(engine: ModeEngine, store: PgStore, session_id: str) -> None:
    point = await store.restore_point_async(session_id)
    assert point is not None
    await engine.restore_session_async(
        session_id, point.mode, point.seq, previous=point.previous, digest=point.digest
    )


async def test_a_grant_in_one_worker_is_honoured_by_the_other_in_its_mode_only(
    postgres_url: str, tmp_path: Path
) -> None:
    spec = spec_of(persist=False)
    one_store, one = worker(postgres_url, tmp_path / "w1.jsonl", spec)
    two_store, two = worker(postgres_url, tmp_path / "w2.jsonl", spec)
    await one.new_session_async("s")
    await restore(two, two_store, "s")
    asked = await one.decide_async("s", ToolCall("call_1", "execute", "Bash"))
    assert (asked.decision, asked.mode, asked.mode_seq) == ("ask", "default", 1)
    settled = await one.settle(asked, "allow_always")
    assert (settled.outcome, settled.runs) == ("allow_always", True)
    granted = await two.decide_async("s", ToolCall("call_2", "execute", "Bash"))
    assert (granted.decision, granted.outcome, granted.mode) == ("allow", "granted", "default")
    other = await two.decide_async("s", ToolCall("call_3", "execute", "Python"))
    assert (other.decision, other.outcome) == ("ask", None)  # another tool: not covered
    await two.settle(other, "reject_once")
    await two.set_mode("s", "acceptEdits")
    in_accept = await one.decide_async("s", ToolCall("call_4", "execute", "Bash"))
    assert (in_accept.decision, in_accept.mode, in_accept.mode_seq) == ("ask", "acceptEdits", 2)
    await one.settle(in_accept, "reject_once")
    for store in (one_store, two_store):
        store.close()
    assert decided(postgres_url) == [
        ("s", "call_1", "ask", "allow_always", "default", 1),
        ("s", "call_2", "ask", "granted", "default", 1),
        ("s", "call_3", "ask", "reject_once", "default", 1),
        ("s", "call_4", "ask", "reject_once", "acceptEdits", 2),
    ]
    replays_clean(postgres_url, tmp_path, spec, tmp_path / "w1.jsonl", tmp_path / "w2.jsonl")


@pytest.mark.parametrize("persist", [True, False])
async def test_a_restored_session_rebuilds_its_persistent_grants_from_the_database(
    postgres_url: str, tmp_path: Path, persist: bool
) -> None:
    spec = spec_of(persist=persist)
    one_store, one = worker(postgres_url, tmp_path / "w1.jsonl", spec)
    await one.new_session_async("s")
    await one.settle(await one.decide_async("s", RUN), "allow_always")
    one_store.close()  # the worker is gone; a new one restores the session
    two_store, two = worker(postgres_url, tmp_path / "w2.jsonl", spec)
    await restore(two, two_store, "s")
    after = await two.decide_async("s", ToolCall("call_after", "execute", "Bash"))
    expected = ("allow", "granted") if persist else ("ask", None)
    assert (after.decision, after.outcome) == expected
    two_store.close()
    assert decided(postgres_url) == [
        ("s", "call_run", "ask", "allow_always", "default", 1),
        *([("s", "call_after", "ask", "granted", "default", 1)] if persist else []),
    ]
    replays_clean(postgres_url, tmp_path, spec, tmp_path / "w1.jsonl", tmp_path / "w2.jsonl")


class RacedStore(PgStore):
    """A real PgStore whose next catch-up is followed by another worker's change.

    ``then`` runs once, right after :meth:`restore_point_async` read the session's point:
    the other worker's change commits between this worker's catch-up and its decision.
    """

    then: Callable[[], Awaitable[object]] | None = None

    async def restore_point_async(
        self, session_id: str, *, deadline: float | None = None
    ) -> RestorePoint | None:
        point = await super().restore_point_async(session_id, deadline=deadline)
        then, self.then = self.then, None
        if then is not None:
            await then()
        return point


async def test_a_decision_racing_a_change_in_the_other_worker_is_refused_then_retried(
    postgres_url: str, tmp_path: Path
) -> None:
    spec = preset("permission")
    one_store, one = worker(postgres_url, tmp_path / "w1.jsonl", spec)
    two_store = RacedStore(postgres_url, log=TransitionLog.to_file(tmp_path / "w2.jsonl"))
    two = ModeEngine(spec, store=two_store)
    await one.new_session_async("s")
    await one.set_mode("s", "acceptEdits")
    await restore(two, two_store, "s")
    two_store.then = lambda: one.set_mode("s", "plan")
    edit = ToolCall("call_edit", "edit", "Edit", "Edit notes.txt")
    decision = await two.decide_async("s", edit)
    # decided allow in acceptEdits (seq 2), refused by the database, retried in plan (seq 3)
    assert (decision.decision, decision.mode, decision.mode_seq) == ("deny", "plan", 3)
    assert two.get("s").state == "plan"
    for store in (one_store, two_store):
        store.close()
    assert decided(postgres_url) == [("s", "call_edit", "deny", None, "plan", 3)]
    replays_clean(postgres_url, tmp_path, spec, tmp_path / "w1.jsonl", tmp_path / "w2.jsonl")


async def test_the_store_refuses_a_decision_behind_the_session_and_writes_nothing(
    postgres_url: str, tmp_path: Path
) -> None:
    spec = preset("permission")
    store, engine = worker(postgres_url, tmp_path / "w1.jsonl", spec)
    created = await engine.new_session_async("s")
    await engine.set_mode("s", "plan")
    point = await store.restore_point_async("s")
    stale = RestorePoint("s", "default", 1, None, created.digest)
    fields = {
        "timestamp": "2026-12-02T08:00:00.000000Z", "session_id": "s",
        "tool_call_id": "call_stale", "kind": "edit", "tool": "Edit", "title_digest": None,
        "rule": None, "decision": "ask", "outcome": "allow_once", "mode": "default",
        "mode_seq": 1, "spec": spec.name, "spec_hash": spec.content_hash,
    }  # fmt: skip
    with pytest.raises(SessionMoved) as moved:
        await store.note_async(EVENT_DECIDED, dict(fields), stale)
    assert moved.value.current == point
    assert moved.value.current[1:3] == ("plan", 2)
    store.close()
    assert decided(postgres_url) == []
    lines = (tmp_path / "w1.jsonl").read_bytes()
    assert b"call_stale" not in lines


def test_a_version_1_database_is_migrated_and_keeps_its_records(
    postgres_url: str, tmp_path: Path
) -> None:
    spec = preset("permission")
    store, engine = worker(postgres_url, tmp_path / "w1.jsonl", spec)
    engine.new_session("old")
    store.close()
    with psycopg.connect(postgres_url, autocommit=True) as db:  # as version 1 left it
        db.execute("DROP TABLE modefsm_decisions")
        db.execute("UPDATE modefsm_schema SET version = 1")
    store = PgStore(postgres_url, log=TransitionLog.to_stream(io.BytesIO()))
    with psycopg.connect(postgres_url) as db:
        versions = db.execute("SELECT version FROM modefsm_schema").fetchall()
        tables = db.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = %s",
            ("modefsm_decisions",),
        ).fetchone()
    assert (versions, tables, SCHEMA_VERSION) == ([(2,)], (1,), 2)
    point = store.restore_point("old")
    assert point is not None
    assert point[:3] == ("old", "default", 1)
    store.close()


SLOW_THIRD_RECORD = """
CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(0.5); RETURN NULL; END $$;
CREATE TRIGGER slow_insert AFTER INSERT ON modefsm_records
FOR EACH ROW WHEN (NEW.seq = 3) EXECUTE FUNCTION slow_insert();
"""
"""The server holds the insert of a session's third record for 0.5 s after the row is in
(its ``gseq`` taken, not committed): the window of a change in flight."""


async def test_a_decision_committed_while_a_change_is_in_flight_replays_before_it(
    postgres_url: str, tmp_path: Path
) -> None:
    spec = preset("permission")
    one_store, one = worker(postgres_url, tmp_path / "w1.jsonl", spec)
    two_store, two = worker(postgres_url, tmp_path / "w2.jsonl", spec)
    await one.new_session_async("s")
    await one.set_mode("s", "acceptEdits")
    await restore(two, two_store, "s")
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(SLOW_THIRD_RECORD)
        change = asyncio.create_task(one.set_mode("s", "plan"))
        for _ in range(1000):  # until the change's row is in, its gseq taken, not committed
            sleeping = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
            if db.execute(sleeping).fetchone()[0]:
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the change never reached the server")
        edit = ToolCall("call_edit", "edit", "Edit", "Edit notes.txt")
        decision = await two.decide_async("s", edit)
        await change
        gseqs = db.execute(
            "SELECT (SELECT gseq FROM modefsm_records WHERE seq = 2), "
            "(SELECT gseq FROM modefsm_records WHERE seq = 3), gseq, at_gseq "
            "FROM modefsm_decisions"
        ).fetchall()
    # decided against the committed mode (the change was not committed yet)
    assert (decision.decision, decision.mode, decision.mode_seq) == ("allow", "acceptEdits", 2)
    ((decided_against, change_gseq, decision_gseq, at_gseq),) = gseqs
    assert change_gseq < decision_gseq  # numbered after the change it precedes
    assert at_gseq == decided_against  # placed after the record it was decided against
    for store in (one_store, two_store):
        store.close()
    assert decided(postgres_url) == [("s", "call_edit", "allow", None, "acceptEdits", 2)]
    replays_clean(postgres_url, tmp_path, spec, tmp_path / "w1.jsonl", tmp_path / "w2.jsonl")
