"""Live sessions as rows: nothing per session for the garbage collector; Session is a view."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

from modefsm import HostOption, LogStore, ModeEngine, TransitionLog, preset
from modefsm.engine import Session

SEED = preset("seed")
MODEL = HostOption("model", "Model", [("small", "Small"), ("large", "Large")], "small")


async def _use(engine: ModeEngine, prefix: str, count: int) -> None:
    """Create *count* sessions (every other one with a ``cwd``) and change every other one."""
    for i in range(count):
        session_id = f"{prefix}{i}"
        await engine.new_session_async(session_id, cwd="/src" if i % 2 else None)
        if i % 2:
            await engine.set_mode(session_id, "architect")


def _settled() -> list[object]:
    """Every object the collector tracks, once collections stop untracking any.

    A collection untracks a tuple whose items are all untracked when it visits it; one
    visited before its items is left for the next collection.
    """
    count = -1
    for _ in range(10):
        gc.collect()
        now = len(gc.get_objects())
        if now == count:
            break
        count = now
    return gc.get_objects()


def _tracked() -> set[int]:
    """The ids of every object the collector tracks now."""
    return {id(o) for o in _settled()}


def _tracked_since(before: set[int]) -> list[str]:
    """The types of the objects tracked now that were not in *before*."""
    new: list[str] = []
    for o in _settled():
        if id(o) not in before and o is not before and o is not new:
            new.append(type(o).__name__)  # a loop: a comprehension would add a cell
    return sorted(new)


class TestNothingTracked:
    """Live sessions add no object the garbage collector tracks, whatever they did."""

    def test_thousand_live_sessions_leave_no_tracked_object(self, tmp_path: Path) -> None:
        log = TransitionLog.to_file(tmp_path / "modes.jsonl")
        engine = ModeEngine(SEED, store=LogStore(log))
        try:
            asyncio.run(_use(engine, "warm", 6))  # first uses: the machine's transitions
            before = _tracked()
            asyncio.run(_use(engine, "s", 1000))
            new = _tracked_since(before)
        finally:
            log.close()
        assert new == []
        assert len(engine) == 1006
        states = {s.session_id: (s.state, s.seq, s.cwd) for s in engine.live_sessions()}
        assert states["s0"] == ("ask", 1, None)
        assert states["s999"] == ("architect", 2, "/src")
        assert not any(gc.is_tracked(row) for row in engine._sessions.values())

    @pytest.mark.parametrize("logged", [False, True])
    def test_host_config_values_neither(self, logged: bool, tmp_path: Path) -> None:
        log = TransitionLog.to_file(tmp_path / "modes.jsonl")
        store = LogStore(log) if logged else None
        engine = ModeEngine(SEED, config_options=[MODEL], store=store)
        engine.new_session("warm")
        engine.change("warm", "code", "set_mode")
        engine.set_config_value("warm", "model", "large")
        before = _tracked()
        for i in range(1000):
            engine.new_session(f"s{i}")
            engine.change(f"s{i}", "code", "set_mode")
            engine.set_config_value(f"s{i}", "model", "large")
        new = _tracked_since(before)
        log.close()
        assert new == []
        last = engine.get("s999")
        assert (last.state, last.seq, last.config) == ("code", 3, {"model": "large"})
        assert not any(gc.is_tracked(row) for row in engine._sessions.values())


class TestView:
    """A Session is a view: it shows the session as committed now, until it is closed."""

    def test_a_held_view_sees_later_changes(self) -> None:
        engine = ModeEngine(SEED, config_options=[MODEL])
        held = engine.new_session("s1", cwd="/w")
        engine.change("s1", "architect", "set_mode")
        engine.set_config_value("s1", "model", "large")
        assert (held.state, held.fsm_state, held.seq, held.previous, held.cwd) == (
            "architect",
            "m:architect",
            3,
            "ask",
            "/w",
        )
        assert (held.digest, held.doubt, held.config) == (None, False, {"model": "large"})
        assert held == engine.get("s1")
        assert repr(held) == "Session('s1', state='architect', seq=3)"

    def test_config_is_a_copy(self) -> None:
        engine = ModeEngine(SEED, config_options=[MODEL])
        held = engine.new_session("s1")
        engine.set_config_value("s1", "model", "large")
        config = held.config
        assert config == {"model": "large"}
        config["model"] = "small"
        assert engine.get("s1").config == {"model": "large"}
        assert engine.config_options("s1")[1].current_value == "large"

    def test_attributes_are_read_only(self) -> None:
        engine = ModeEngine(SEED)
        held = engine.new_session("s1")
        with pytest.raises(AttributeError):
            held.seq = 7  # type: ignore[misc]
        assert engine.get("s1").seq == 1

    def test_after_close_a_view_keeps_the_values_it_last_read(self) -> None:
        engine = ModeEngine(SEED)
        held = engine.new_session("s1")
        engine.change("s1", "architect", "set_mode")
        assert held.state == "architect"
        engine.close_session("s1")
        assert (held.state, held.seq) == ("architect", 2)
        again = engine.new_session("s1")  # another session with the same id
        engine.change("s1", "code", "set_mode")
        assert (held.state, held.seq) == ("architect", 2)
        assert (again.state, again.seq) == ("code", 2)
        assert held != again
        assert engine.get("s1") == again

    def test_a_view_is_not_a_key_of_another_engine(self) -> None:
        one, two = ModeEngine(SEED), ModeEngine(SEED)
        assert one.new_session("s1") != two.new_session("s1")
        assert isinstance(one.get("s1"), Session)
