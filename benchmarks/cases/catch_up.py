"""Benchmark 12: the restore index catching up with a log it is behind, per line.

A restore index that is behind its log (a process that was down, ``modefsm index`` on a
long log, a store whose index fell behind) reads the lines from its position and applies
them: :meth:`RestoreIndex.catch_up <modefsm.store.RestoreIndex.catch_up>`. A file store does
that under the log file's exclusive lock, so every other process's append waits for it.

The log is mixed, as the engine writes it (:func:`write_mixed_log`): spec headers,
creations, client changes, host option changes (``config_changed``), rejections and tool
decisions, over S sessions. Each repetition times, in this process and alternating which
goes first, the CPU time (``time.process_time``) of:

- the baseline: a plain loop reading the same file line by line and ``orjson.loads``-ing
  each line (what any reader of the log pays at least);
- ``RestoreIndex(fresh).catch_up(log)``: an empty index catching up with the whole log
  (every line read, every session's row written and committed).

Both are divided by the log's line count: CPU µs per line.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import tempfile
import time
from pathlib import Path

import orjson

from benchmarks.harness import Result, Row, Size, benchmark, no_gc
from modefsm import HostOption, LogStore, ModeEngine, ToolCall, TransitionLog, preset
from modefsm.errors import ModefsmError
from modefsm.spec import ModeSpec
from modefsm.store import RestoreIndex, RestorePoint, last_points

__all__ = ["append_mixed", "catch_up_seconds", "orjson_seconds", "run", "write_mixed_log"]

TITLE = "12. index catch-up"
METRIC = "index catch-up, per line"
RATIO_BOUND = 3.0
"""The most a catch-up may take per line, as a multiple of the plain orjson loop."""
LINES = {"full": (100_000, 1_000_000), "quick": (100_000,), "tiny": (2_000,)}
REPEAT = {"full": 3, "quick": 3, "tiny": 1}
MODEL = HostOption("model", "Model", [("fast", "Fast"), ("smart", "Smart")], "fast")
_CALLS = (("edit", "Edit"), ("execute", "Bash"), ("read", "Read"), ("fetch", "WebFetch"))


def write_mixed_log(path: Path, records: int, sessions: int, seed: int = 13) -> list[str]:
    """Write a log of about *records* lines over *sessions* sessions through the engine.

    Returns:
        The session ids.
    """
    ids = [f"sess_{i:032x}" for i in range(sessions)]
    append_mixed(path, "seed", ids, max(0, records - sessions - 1), seed)
    return ids


def append_mixed(path: Path, spec: str, ids: list[str], actions: int, seed: int) -> None:
    """Append to the log *path* through an engine of the preset *spec* and a host option.

    Each of *ids* is created (a ``cwd`` each), or restored from the log's last point of
    it (a restore record when *spec* does not have its mode); then come *actions* random
    actions, each one of: a client change (60%), a host option change (10%), a rejection
    (an unknown mode, 10%), a tool decision (20%).
    """
    points = last_points([path]) if path.exists() else {}
    asyncio.run(_actions(path, preset(spec), ids, actions, seed, points))


async def _actions(  # noqa: PLR0917 - append_mixed's arguments
    path: Path,
    spec: ModeSpec,
    ids: list[str],
    actions: int,
    seed: int,
    points: dict[str, RestorePoint],
) -> None:
    log = TransitionLog.to_file(path)
    try:
        engine = ModeEngine(spec, store=LogStore(log), config_options=[MODEL])
        for session_id in ids:
            point = points.get(session_id)
            if point is None:
                engine.new_session(session_id, cwd=f"/srv/{session_id[-1]}")
            else:
                engine.restore_session(
                    session_id, point.mode, point.seq, previous=point.previous,
                    config=point.config,
                )  # fmt: skip
        rng = random.Random(seed)
        targets = {mode: spec.client_targets(mode) for mode in spec.mode_ids}
        for number in range(actions):
            session_id = ids[rng.randrange(len(ids))]
            pick = rng.random()
            if pick < 0.6:
                mode = rng.choice(targets[engine.get(session_id).state])
                engine.change(session_id, mode, "set_mode")
            elif pick < 0.7:
                value = (engine.get(session_id).config or {}).get("model", "fast")
                engine.set_config_value(session_id, "model", "smart" if value == "fast" else "fast")
            elif pick < 0.8:
                with contextlib.suppress(ModefsmError):  # logged as a rejection
                    engine.change(session_id, "nope", "set_mode")
            else:
                kind, name = rng.choice(_CALLS)
                call = ToolCall(f"call_{seed}_{number}", kind, name, f"{name} something")  # type: ignore[arg-type]
                await engine.decide_async(session_id, call)
    finally:
        log.close()


def orjson_seconds(path: Path) -> tuple[float, int]:
    """CPU seconds of a plain loop reading *path* and ``orjson.loads``-ing each line; lines."""
    count = 0
    start = time.process_time()
    with path.open("rb") as file:
        for line in file:
            orjson.loads(line)
            count += 1
    return time.process_time() - start, count


def catch_up_seconds(path: Path, folder: Path) -> float:
    """CPU seconds of a fresh index in *folder* catching up with all of *path*."""
    index_path = folder / "catch-up.index"
    for leftover in (index_path, folder / "catch-up.index-wal", folder / "catch-up.index-shm"):
        leftover.unlink(missing_ok=True)
    index = RestoreIndex(index_path)
    try:
        start = time.process_time()
        index.catch_up(path)
        return time.process_time() - start
    finally:
        index.close()


@benchmark("catchup", TITLE)
def run(size: Size) -> Result:
    """CPU µs per line: a fresh index's catch-up against the plain orjson loop."""
    result = Result("catchup", TITLE)
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for lines in LINES[size.name]:
            path = folder / f"mixed-{lines}.jsonl"
            write_mixed_log(path, lines, max(1, lines // 100))
            loop: list[float] = []
            caught: list[float] = []
            count = 1
            for repetition in range(REPEAT[size.name]):
                with no_gc():
                    order = (0, 1) if repetition % 2 == 0 else (1, 0)
                    for which in order:
                        if which == 0:
                            seconds, count = orjson_seconds(path)
                            loop.append(seconds / count * 1e6)
                        else:
                            caught.append(catch_up_seconds(path, folder) / count * 1e6)
            label = f"{METRIC}, {lines:,} lines"
            base = result.add(
                Row(label, "baseline: plain orjson loop", "CPU µs/line", loop, baseline=True)
            )
            row = result.add(Row(label, "RestoreIndex.catch_up", "CPU µs/line", caught))
            worst = max(worst, row.median / base.median)
        result.target(
            f"catch-up within {RATIO_BOUND:g}x of the orjson loop",
            met=worst <= RATIO_BOUND,
            measured=f"{worst:.2f}x",
        )
    result.notes.append(
        "mixed log written by the engine: headers, creations, changes, config changes, "
        "rejections, tool decisions; 100 lines per session"
    )
    return result
