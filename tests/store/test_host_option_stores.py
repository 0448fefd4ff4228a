"""A host option's value in each shared store: restored by another process's engine, and
taken up by a live session that another process moved (the file store, PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from modefsm import FileStore, HostOption, ModeEngine, TransitionLog, preset
from modefsm.store import RestorePoint, SessionStore

SEED = preset("seed")
MODEL = HostOption("model", "Model", [("fast", "Fast"), ("smart", "Smart")], "fast")


@pytest.fixture(params=["file", "postgres"])
def open_shared(request: Any, tmp_path: Path) -> Iterator[Callable[[], SessionStore]]:
    """Opens one more handle on one shared store (as another process would)."""
    opened: list[Any] = []

    def open_file() -> SessionStore:
        opened.append(FileStore(tmp_path / "modes.jsonl"))
        return opened[-1]  # type: ignore[no-any-return]

    def open_postgres() -> SessionStore:
        from modefsm.store._postgres import PgStore

        log = TransitionLog.to_file(tmp_path / f"w{len(opened)}.jsonl")
        opened.append(log)
        opened.append(PgStore(request.getfixturevalue("postgres_url"), log=log))
        return opened[-1]  # type: ignore[no-any-return]

    yield open_file if request.param == "file" else open_postgres
    for handle in reversed(opened):
        handle.close()


def values(engine: ModeEngine, session_id: str) -> list[tuple[str, str]]:
    return [(o.id, o.current_value) for o in engine.config_options(session_id)]


async def test_another_engine_restores_the_value_and_a_live_one_takes_it_up(open_shared):
    first = ModeEngine(SEED, store=open_shared(), config_options=[MODEL])
    await first.new_session_async("s1")
    await first.set_config_option("s1", "model", "smart")
    await first.set_mode("s1", "architect")

    store = open_shared()
    point = await store.restore_point_async("s1")
    assert point is not None
    assert point._replace(digest=None) == RestorePoint(
        "s1", "architect", 3, "ask", None, {"model": "smart"}
    )
    second = ModeEngine(SEED, store=store, config_options=[MODEL])
    await second.restore_session_async(
        "s1", point.mode, point.seq, previous=point.previous, digest=point.digest,
        config=point.config,
    )  # fmt: skip
    assert values(second, "s1") == [("mode", "architect"), ("model", "smart")]
    await second.set_config_option("s1", "model", "fast")

    # the first engine's session is behind: its next change takes the value up first
    await first.set_mode("s1", "code")
    assert values(first, "s1") == [("mode", "code"), ("model", "fast")]
    last = await store.restore_point_async("s1")
    assert last is not None
    assert (last.mode, last.seq, last.previous, last.config) == (
        "code",
        5,
        "architect",
        {"model": "fast"},
    )
