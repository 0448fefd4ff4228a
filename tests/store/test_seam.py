"""The store seam: every member declared on ``SessionStore``, implemented by every store.

A host's own store (:class:`HostStore` below, no modefsm base class: it keeps its records
in a :class:`~modefsm.MemoryStore` and notes each call) implements the seam as
docs/stores.md says; ``mypy --strict`` (the suite's own run) checks it where it is given
to the engine, and the engine calls each member directly.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from typing import Any

import pytest

from modefsm import FileStore, LogStore, MemoryStore, ModeEngine, ModeSpec, ToolCall, preset
from modefsm.log import DecisionRecord, TransitionRecord
from modefsm.store import ListAfter, ListedSession, RestorePoint, SessionStore
from modefsm.store._postgres import PgStore

SEAM = {
    "append", "append_async", "close", "decisions", "describe", "grants_seen", "history",
    "list_sessions", "list_sessions_async", "note", "note_async", "release", "reopen_async",
    "restore_point", "restore_point_async", "timeout",
}  # fmt: skip


def test_the_seam_declares_every_member_the_engine_and_serve_use() -> None:
    declared = {name for name in vars(SessionStore) if not name.startswith("_")}
    assert declared == SEAM


@pytest.mark.parametrize("store", [MemoryStore, LogStore, FileStore, PgStore])
def test_every_store_implements_every_member_itself(store: type[Any]) -> None:
    # PgStore's timeout is set per instance (the constructor's argument): checked in
    # tests/store/test_postgres.py; every other member is the class's own
    members = SEAM - {"timeout"} if store is PgStore else SEAM
    assert {name for name in members if not hasattr(store, name)} == set()
    assert {n for n in members if getattr(store, n) is getattr(SessionStore, n, None)} == set()


@pytest.mark.parametrize("store", [MemoryStore, LogStore, FileStore, PgStore])
def test_every_store_takes_the_callers_word_that_a_records_keys_are_exact(
    store: type[Any],
) -> None:
    for member in (store.append, store.append_async):
        exact = inspect.signature(member).parameters["exact"]
        assert (exact.kind, exact.default) == (inspect.Parameter.KEYWORD_ONLY, False)


class HostStore:
    """A host's store: the whole seam, by delegation; each call of the new members noted."""

    def __init__(self) -> None:
        self.kept = MemoryStore()
        self.calls: list[tuple[str, str]] = []

    @property
    def timeout(self) -> float:
        return self.kept.timeout

    def append(
        self, event: str, fields: dict[str, Any], head: RestorePoint | None, *, exact: bool = False
    ) -> str:
        return self.kept.append(event, fields, head, exact=exact)

    async def append_async(
        self,
        event: str,
        fields: dict[str, Any],
        head: RestorePoint | None,
        *,
        deadline: float | None = None,
        exact: bool = False,
    ) -> str:
        return await self.kept.append_async(event, fields, head, deadline=deadline, exact=exact)

    def note(self, event: str, fields: dict[str, Any], head: RestorePoint | None = None) -> None:
        self.kept.note(event, fields, head)

    async def note_async(
        self, event: str, fields: dict[str, Any], head: RestorePoint | None = None
    ) -> None:
        await self.kept.note_async(event, fields, head)

    def restore_point(self, session_id: str) -> RestorePoint | None:
        return self.kept.restore_point(session_id)

    async def restore_point_async(
        self, session_id: str, *, deadline: float | None = None
    ) -> RestorePoint | None:
        return await self.kept.restore_point_async(session_id, deadline=deadline)

    def history(self, session_id: str) -> Iterator[TransitionRecord]:
        return self.kept.history(session_id)

    def list_sessions(
        self, cwd: str | None = None, after: ListAfter = None, limit: int = 100
    ) -> list[ListedSession]:
        return self.kept.list_sessions(cwd, after, limit)

    async def list_sessions_async(
        self, cwd: str | None = None, after: ListAfter = None, limit: int = 100
    ) -> list[ListedSession]:
        return await self.kept.list_sessions_async(cwd, after, limit)

    def decisions(self, session_id: str) -> Iterator[DecisionRecord]:
        self.calls.append(("decisions", session_id))
        return self.kept.decisions(session_id)

    def grants_seen(self, session_id: str) -> list[DecisionRecord]:
        self.calls.append(("grants_seen", session_id))
        return []

    def describe(self, spec: ModeSpec) -> None:
        self.calls.append(("describe", spec.name))

    def release(self, session_id: str) -> None:
        self.calls.append(("release", session_id))

    async def reopen_async(self) -> None:
        self.calls.append(("reopen_async", ""))

    def close(self) -> None:
        self.kept.close()


def persistent() -> ModeSpec:
    data = preset("permission").model_dump(mode="json", by_alias=True, exclude_none=True)
    data["grants"] = {"scope": "mode", "persist": True}
    return ModeSpec.model_validate(data)


async def test_a_host_store_gets_each_member_called_by_the_engine() -> None:
    host = HostStore()
    spec = persistent()
    engine = ModeEngine(spec, store=host)
    await engine.new_session_async("s")
    asked = await engine.decide_async("s", ToolCall("call_1", "execute", "Bash"))
    await engine.settle(asked, "allow_always")
    engine.close_session("s")
    again = ModeEngine(spec, store=host)
    point = host.restore_point("s")
    assert point is not None
    await again.restore_session_async("s", point.mode, point.seq, digest=point.digest)
    granted = await again.decide_async("s", ToolCall("call_2", "execute", "Bash"))
    assert (granted.decision, granted.outcome) == ("allow", "granted")
    await host.reopen_async()
    assert host.calls == [
        ("describe", "permission"),
        ("grants_seen", "s"),  # decide_async
        ("grants_seen", "s"),  # settle
        ("release", "s"),
        ("describe", "permission"),
        ("decisions", "s"),  # the restore rebuilds the persisted grant
        ("grants_seen", "s"),
        ("reopen_async", ""),
    ]
    assert [d.outcome for d in host.kept.decisions("s")] == ["allow_always", "granted"]


def test_the_memory_store_gives_the_neutral_answers() -> None:
    memory = MemoryStore()
    engine = ModeEngine(preset("seed"), store=memory)
    engine.new_session("s")
    engine.close_session("s")
    assert (memory.grants_seen("s"), asyncio.run(memory.reopen_async())) == ([], None)
    assert memory.restore_point("s") is not None  # release forgets nothing: memory keeps all
    assert [line["event"] for line in memory.lines] == ["modefsm.session_created"]
