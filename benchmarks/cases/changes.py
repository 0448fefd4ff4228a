"""Benchmark 1: change throughput with many live sessions, and the alternatives on it.

Every implementation follows the same plan: random live sessions, each moved to a random
mode its current mode allows (``session/set_mode``), computed once so that all of them
do exactly the same changes in the same order. The full-pipeline rows write each change's
record to a real file and serialize both notifications as the SDK sends them
(:class:`~benchmarks.baselines.wire.NullWire`). The baseline and modefsm alternate repetitions, so
that machine noise falls on both alike.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from transitions import Machine

from benchmarks.baselines.handlers import (
    DictHandler,
    MachinePerSession,
    ModefsmHandler,
    StatechartPerSession,
    statechart_available,
)
from benchmarks.baselines.wire import NullWire
from benchmarks.harness import Result, Row, Size, benchmark
from modefsm import ModeEngine, ModeSpec, preset

__all__ = ["make_plan", "run", "session_ids"]

TITLE = "1. change throughput"
METRIC = "µs/change"
Plan = list[tuple[str, str]]


def session_ids(count: int) -> list[str]:
    """*count* session ids shaped like modefsm's own (``sess_`` and 32 hex digits)."""
    return [f"sess_{i:032x}" for i in range(count)]


def make_plan(spec: ModeSpec, ids: list[str], count: int, seed: int = 6) -> Plan:
    """*count* random valid client changes ``(session_id, mode_id)`` over sessions *ids*.

    Each change picks a random session and a random mode its current mode allows a
    client to move to; the modes are tracked, so the whole plan is valid in order.
    """
    rng = random.Random(seed)
    targets = {mode: spec.client_targets(mode) for mode in spec.mode_ids}
    modes = dict.fromkeys(ids, spec.initial)
    plan: Plan = []
    for _ in range(count):
        session_id = ids[rng.randrange(len(ids))]
        dest = rng.choice(targets[modes[session_id]])
        modes[session_id] = dest
        plan.append((session_id, dest))
    return plan


def _segments(plan: Plan, size: int) -> list[Plan]:
    return [plan[i : i + size] for i in range(0, len(plan), size)]


def _per_change(seconds: float, count: int) -> float:
    return seconds / count * 1e6


async def _drive(set_mode: Callable[[str, str], Awaitable[Any]], segment: Plan) -> float:
    start = time.perf_counter()
    for session_id, mode_id in segment:
        await set_mode(session_id, mode_id)
    return time.perf_counter() - start


def _floor_dict(spec: ModeSpec, ids: list[str], segments: list[Plan]) -> list[float]:
    modes = dict.fromkeys(ids, spec.initial)
    times = []
    for segment in segments:
        start = time.perf_counter()
        for session_id, mode_id in segment:
            modes[session_id] = mode_id
        times.append(time.perf_counter() - start)
    return times


class _Bare:
    __slots__ = ("state",)

    def __init__(self, state: str) -> None:
        self.state = state


def _floor_transitions(spec: ModeSpec, ids: list[str], segments: list[Plan]) -> list[float]:
    machine = Machine(
        model=None, states=list(spec.mode_ids), initial=spec.initial, auto_transitions=False
    )
    for dest in spec.mode_ids:
        sources: list[Any] = [s for s in spec.mode_ids if dest in spec.client_targets(s)]
        machine.add_transition(f"set>{dest}", sources, dest)
    events = {dest: machine.events[f"set>{dest}"] for dest in spec.mode_ids}
    models = {session_id: _Bare(spec.initial) for session_id in ids}
    times = []
    for segment in segments:
        start = time.perf_counter()
        for session_id, mode_id in segment:
            events[mode_id].trigger(models[session_id])
        times.append(time.perf_counter() - start)
    return times


def _engine_alone(spec: ModeSpec, ids: list[str], segments: list[Plan]) -> list[float]:
    engine = ModeEngine(spec)
    for session_id in ids:
        engine.new_session(session_id)
    change = engine.change
    times = []
    for segment in segments:
        start = time.perf_counter()
        for session_id, mode_id in segment:
            change(session_id, mode_id, "set_mode")
        times.append(time.perf_counter() - start)
    return times


@benchmark("changes", TITLE)
def run(size: Size) -> Result:
    """Time per change: floors, the engine alone, baseline vs modefsm, the alternatives."""
    return asyncio.run(_run(size))


async def _run(size: Size) -> Result:
    spec = preset("seed")
    ids = session_ids(size.sessions)
    rounds = size.warmup + size.repeat
    plan = make_plan(spec, ids, rounds * size.changes)
    segments = _segments(plan, size.changes)
    result = Result("changes", TITLE)
    result.notes.append(
        f"{size.sessions:,} live sessions (seed spec), {size.changes:,} random valid "
        f"session/set_mode changes per repetition, {size.repeat} repetitions after "
        f"{size.warmup} warm-up; full-pipeline rows write every record to a real file and "
        "serialize both notifications as the ACP SDK does (into a null sink)"
    )

    def floor(impl: str, times: list[float], note: str = "") -> None:
        samples = [_per_change(t, size.changes) for t in times[size.warmup :]]
        result.add(Row(METRIC, impl, METRIC, samples, note=note))

    floor("floor: dict assignment", _floor_dict(spec, ids, segments))
    floor(
        "floor: bare transitions trigger",
        _floor_transitions(spec, ids, segments),
        "one shared Machine, unbound models, no callbacks",
    )
    floor(
        "modefsm engine alone",
        _engine_alone(spec, ids, segments),
        "ModeEngine.change without log or notifications",
    )

    with tempfile.TemporaryDirectory() as tmp:
        wires = {"baseline": NullWire(), "modefsm": NullWire()}
        baseline = DictHandler(spec, Path(tmp) / "baseline.jsonl", wires["baseline"])
        modefsm = ModefsmHandler(spec, Path(tmp) / "modefsm.jsonl", wires["modefsm"])
        for session_id in ids:
            baseline.new_session(session_id)
            modefsm.new_session(session_id)
        times: dict[str, list[float]] = {"baseline": [], "modefsm": []}
        for index, segment in enumerate(segments):
            order: list[tuple[str, DictHandler | ModefsmHandler]] = [
                ("baseline", baseline),
                ("modefsm", modefsm),
            ]
            if index % 2:
                order.reverse()
            for key, handler in order:
                times[key].append(await _drive(handler.set_mode, segment))
        _check_same(ids, baseline, modefsm, wires, Path(tmp))
        baseline.shutdown()
        modefsm.shutdown()
    base_row = result.add(
        Row(
            METRIC,
            DictHandler.name,
            METRIC,
            [_per_change(t, size.changes) for t in times["baseline"][size.warmup :]],
            baseline=True,
            note="dict of modes, the same checks, log line and notification bytes",
        )
    )
    ours = result.add(
        Row(
            METRIC,
            ModefsmHandler.name,
            METRIC,
            [_per_change(t, size.changes) for t in times["modefsm"][size.warmup :]],
            note="ModeEngine.set_mode with a TransitionLog file",
        )
    )
    ratio = ours.median / base_row.median
    result.target("modefsm <= 1.5x baseline per change", met=ratio <= 1.5, measured=f"{ratio:.2f}x")

    await _alternatives(size, spec, ids, result)
    return result


async def _alternatives(size: Size, spec: ModeSpec, ids: list[str], result: Result) -> None:
    alternatives: list[type[Any]] = [MachinePerSession]
    if statechart_available():
        alternatives.append(StatechartPerSession)
    else:
        result.notes.append(
            "python-statemachine is not installed (pip install -e '.[bench]'): its row is missing"
        )
    plan = make_plan(spec, ids, (1 + size.alt_repeat) * size.alt_changes, seed=7)
    segments = _segments(plan, size.alt_changes)
    for cls in alternatives:
        with tempfile.TemporaryDirectory() as tmp:
            handler = cls(spec, Path(tmp) / "alt.jsonl", NullWire())
            for session_id in ids:
                handler.new_session(session_id)
            times = [await _drive(handler.set_mode, segment) for segment in segments]
            handler.shutdown()
            del handler
        result.add(
            Row(
                METRIC,
                cls.name,
                METRIC,
                [_per_change(t, size.alt_changes) for t in times[1:]],
                note=f"{size.alt_changes:,} changes per repetition",
            )
        )


def _check_same(
    ids: list[str],
    baseline: DictHandler,
    modefsm: ModefsmHandler,
    wires: dict[str, NullWire],
    tmp: Path,
) -> None:
    """The baseline and modefsm did the same work: same modes, log lines, wire bytes.

    modefsm's log has one line more: its header (``modefsm.spec``), which names the spec.
    """
    for session_id in ids[:: max(1, len(ids) // 1000)]:
        if baseline.mode(session_id) != modefsm.mode(session_id):
            raise AssertionError(f"{session_id}: the implementations disagree")
    lines = {
        key: (tmp / f"{key}.jsonl").read_bytes().count(b"\n") for key in ("baseline", "modefsm")
    }
    lines["modefsm"] -= 1  # its header
    if len(set(lines.values())) != 1:
        raise AssertionError(f"log lines differ: {lines}")
    sizes = {key: (wire.sent, wire.size) for key, wire in wires.items()}
    if len(set(sizes.values())) != 1:
        raise AssertionError(f"notifications differ: {sizes}")
