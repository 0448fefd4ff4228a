"""Benchmark 11: judging a tool call by its mode's rules, against a plain dict lookup.

What a host does for every tool call its model makes: find what the session's mode says of
the call's kind. The baseline is the hand-written table hosts keep beside their mode flag,
a function returning ``table[mode][kind]`` (the permission preset's decisions, the same
answers). modefsm's ``RuleTable.judge`` returns the verdict (decision, rule, reason) from its
kind table when no name pattern precedes the kind; otherwise it scans the rules in order
once per mode, kind and tool name and keeps the answer (the seed preset's architect mode,
whose plan rule matches by name, for edits).

The engine's rows time what a host calls for each tool call of a session:
``ModeEngine.decide(session_id, call)`` (the session's committed mode and seq, the rules,
the session's grants, and the immutable ``ToolDecision`` it returns), against a host's
hand-written table keyed by a mode flag it keeps per session
(``table[modes[session_id]][call.kind]``), over sessions in every mode of the preset.

Each repetition times the same calls (every mode and kind of the preset, a tool name each,
in a shuffled order) through each implementation, each first in turn, with the cyclic
garbage collector off.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from benchmarks.harness import Result, Row, Size, benchmark, no_gc
from modefsm import ModeEngine, ToolCall, preset
from modefsm.spec import TOOL_KINDS, ModeSpec

__all__ = ["run"]

TITLE = "11. tool decisions"
METRIC = "a tool call judged by its mode"
ENGINE_METRIC = "a session's tool call decided by its committed mode"
RATIO_BOUND = 3.0
"""The most ``judge`` may take, as a multiple of the dict lookup."""
ABSOLUTE_BOUND = 2.0
"""The most ``judge`` may take per call, in µs."""
CALLS_PER_CHANGE = 10
"""Calls timed per repetition, per change of the size (benchmark 1's count)."""

_Call = tuple[str, str, str]


def _calls(mode_ids: tuple[str, ...], count: int, kinds: tuple[str, ...]) -> list[_Call]:
    rng = random.Random(9)
    names = ["Read", "Edit", "Bash", "Grep", "WebFetch", "write_plan"]
    every = [(m, k, rng.choice(names)) for m in mode_ids for k in kinds]
    return [every[i % len(every)] for i in rng.sample(range(count), count)]


def _time_sessions(
    fn: Callable[[str, ToolCall], object], calls: list[tuple[str, ToolCall]]
) -> float:
    """µs per call of *fn* over *calls* (a session and a tool call each)."""
    with no_gc():
        start = time.perf_counter()
        for session_id, call in calls:
            fn(session_id, call)
        return (time.perf_counter() - start) * 1e6 / len(calls)


def _engine_rows(result: Result, spec: ModeSpec, calls: list[_Call], size: Size) -> None:
    """``ModeEngine.decide`` against a host's per-session mode flag and table."""
    engine = ModeEngine(spec)
    modes: dict[str, str] = {}
    for mode_id in spec.mode_ids:
        session_id = f"sess_{mode_id}"
        engine.new_session(session_id)
        if mode_id != spec.initial:
            engine.change(session_id, mode_id, "set_mode")
        modes[session_id] = mode_id
    table = {m: {str(k): d for k, d in spec.rules.decisions(m).items()} for m in spec.mode_ids}

    def host(session_id: str, call: ToolCall) -> object:
        return table[modes[session_id]][call.kind]  # type: ignore[index]  # kinds are set

    timed_calls = [
        (f"sess_{mode}", ToolCall(f"call_{i}", kind, name))  # type: ignore[arg-type]
        for i, (mode, kind, name) in enumerate(calls)
    ]
    assert all(engine.decide(*c).decision == host(*c) for c in timed_calls)  # noqa: S101
    samples = _sample(
        {
            "host": lambda: _time_sessions(host, timed_calls),
            "decide": lambda: _time_sessions(engine.decide, timed_calls),
        },
        size,
    )
    result.add(
        Row(
            ENGINE_METRIC,
            "host table (table[modes[session_id]][call.kind])",
            "µs/call",
            samples["host"],
            baseline=True,
        )
    )
    decided = result.add(
        Row(
            ENGINE_METRIC,
            "modefsm ModeEngine.decide",
            "µs/call",
            samples["decide"],
            note="returns the ToolDecision: decision, rule, reason, mode, seq, options",
        )
    )
    _targets(result, decided, "decide", "the host's table")


def _sample(runs: dict[str, Callable[[], float]], size: Size) -> dict[str, list[float]]:
    """Each run's µs per call, once per repetition after the warm-up, each first in turn."""
    samples: dict[str, list[float]] = {key: [] for key in runs}
    order = list(runs)
    for rep in range(size.warmup + size.repeat):
        order = order[1:] + order[:1]  # each implementation first in turn
        timed = {key: runs[key]() for key in order}
        if rep >= size.warmup:
            for key, value in timed.items():
                samples[key].append(value)
    return samples


def _targets(result: Result, row: Row, name: str, baseline: str) -> None:
    """The two targets of *row*: a ratio to its *baseline*, and a time per call."""
    ratio = result.ratio(row) or 0.0
    result.target(
        f"{name} <= {RATIO_BOUND:g}x {baseline}",
        met=ratio <= RATIO_BOUND,
        measured=f"{ratio:.2f}x",
    )
    result.target(
        f"{name} < {ABSOLUTE_BOUND:g} µs per call",
        met=row.median < ABSOLUTE_BOUND,
        measured=f"{row.median:.3f} µs",
    )


def _time(fn: Callable[[str, str, str], object], calls: list[_Call]) -> float:
    """µs per call of *fn* over *calls*."""
    with no_gc():
        start = time.perf_counter()
        for mode, kind, name in calls:
            fn(mode, kind, name)
        return (time.perf_counter() - start) * 1e6 / len(calls)


@benchmark("decide", TITLE)
def run(size: Size) -> Result:
    """``judge`` (kind table, and the scan) against a dict lookup of the same decisions."""
    result = Result("decide", TITLE)
    spec = preset("permission")
    rules = spec.rules
    table: dict[str, dict[str, str | None]] = {
        m: {str(k): d for k, d in rules.decisions(m).items()} for m in spec.mode_ids
    }

    def lookup(mode: str, kind: str, name: str) -> object:  # noqa: ARG001 - same call shape
        return table[mode][kind]

    count = max(100, size.changes * CALLS_PER_CHANGE)
    calls = _calls(spec.mode_ids, count, TOOL_KINDS)
    assert all(rules.judge(*c).decision == lookup(*c) for c in calls)  # noqa: S101 - same answers
    seed = preset("seed")
    scanned = _calls(("architect",), count, ("edit",))  # the plan rule matches by name first
    samples = _sample(
        {
            "dict": lambda: _time(lookup, calls),
            "judge": lambda: _time(rules.judge, calls),
            "scan": lambda: _time(seed.rules.judge, scanned),
        },
        size,
    )
    result.add(
        Row(METRIC, "dict lookup (table[mode][kind])", "µs/call", samples["dict"], baseline=True)
    )
    judged = result.add(Row(METRIC, "modefsm judge (kind table)", "µs/call", samples["judge"]))
    result.add(
        Row(
            METRIC,
            "modefsm judge (a name pattern first: scanned once, then kept)",
            "µs/call",
            samples["scan"],
            note="seed preset, architect mode, edit calls",
        )
    )
    _targets(result, judged, "judge", "the dict lookup")
    _engine_rows(result, spec, calls, size)
    result.notes.append(
        f"{count:,} calls per repetition over every mode and kind of the permission preset, "
        f"shuffled; {size.repeat} repetitions after {size.warmup} untimed; gc off"
    )
    return result
