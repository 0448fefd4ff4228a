"""Benchmark 2: many sessions: create, change each once, close; time, memory, GC pause.

Each implementation runs in a fresh child process (``python -m benchmarks.cases.sessions``), so
that its peak RSS and its garbage collector's work are its own. In the child, with the
transition log written to a real file and notifications discarded:

1. the session ids are made first (the same ids for every implementation; not counted);
2. N sessions are created, then each is changed once (``session/set_mode``), timed;
3. the peak RSS (``VmHWM``) growth is taken, and a full ``gc.collect()`` is timed with the
   N sessions live (and once before any session existed, for comparison);
4. all N are closed, timed; then N/10 are created and closed, timed, so that the time per
   close with ten times fewer live sessions shows whether closing is O(1);
5. tracemalloc counts the memory that stays allocated per session (created and changed
   once), over ``min(N, alt_tracemalloc)`` sessions for the slow alternatives.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from benchmarks.baselines.handlers import HANDLERS, discard, statechart_available
from benchmarks.harness import Result, Row, Size, benchmark, run_child
from modefsm import preset

__all__ = ["child", "run"]

TITLE = "2. sessions"


def _hwm_kib() -> int:
    """The process's peak resident set (``VmHWM``), in KiB; 0 where /proc is missing."""
    status = Path("/proc/self/status")
    if not status.exists():  # pragma: no cover - Linux has it
        return 0
    for line in status.read_text(encoding="ascii").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0  # pragma: no cover


def _full_gc_ms(times: int = 5) -> list[float]:
    samples = []
    for _ in range(times):
        start = time.perf_counter()
        gc.collect()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def _ids(prefix: str, count: int) -> list[str]:
    return [f"sess_{prefix}{i:031x}" for i in range(count)]


def child(key: str, count: int, traced: int, log_dir: Path, gc_runs: int = 5) -> dict[str, Any]:
    """Measure handler *key* with *count* sessions (in this process); return the figures.

    *traced* sessions are traced by tracemalloc; a full collection is timed *gc_runs* times.
    """
    spec = preset("seed")
    handler = HANDLERS[key](spec, log_dir / f"{key}.jsonl", discard)
    others = {m: [d for d in spec.mode_ids if d in spec.client_targets(m)] for m in spec.mode_ids}
    ids = _ids("a", count)
    dests = [others[spec.initial][i % len(others[spec.initial])] for i in range(count)]
    gc.collect()
    gc_empty = _full_gc_ms(gc_runs)
    hwm_before = _hwm_kib()

    start = time.perf_counter()
    for session_id in ids:
        handler.new_session(session_id)
    create = time.perf_counter() - start

    async def change_all(ids: list[str]) -> float:
        set_mode = handler.set_mode
        start = time.perf_counter()
        for session_id, dest in zip(ids, dests, strict=False):
            await set_mode(session_id, dest)
        return time.perf_counter() - start

    change = asyncio.run(change_all(ids))
    hwm_after = _hwm_kib()
    gc_live = _full_gc_ms(gc_runs)

    start = time.perf_counter()
    for session_id in ids:
        handler.close(session_id)
    close = time.perf_counter() - start

    few = _ids("b", max(1, count // 10))
    for session_id in few:
        handler.new_session(session_id)
    start = time.perf_counter()
    for session_id in few:
        handler.close(session_id)
    close_few = time.perf_counter() - start

    traced_ids = _ids("c", traced)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for session_id in traced_ids:
        handler.new_session(session_id)
    asyncio.run(change_all(traced_ids))
    gc.collect()
    memory = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    handler.shutdown()
    return {
        "sessions": count,
        "create_us": create / count * 1e6,
        "change_us": change / count * 1e6,
        "close_us": close / count * 1e6,
        "close_few_us": close_few / len(few) * 1e6,
        "gc_live_ms": statistics.median(gc_live),
        "gc_empty_ms": statistics.median(gc_empty),
        "rss_bytes": (hwm_after - hwm_before) * 1024 / count,
        "traced": traced,
        "traced_bytes": memory / traced,
    }


def _spawn(key: str, count: int, traced: int, gc_runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        figures: dict[str, Any] = run_child(
            "benchmarks.cases.sessions",
            *(key, str(count), str(traced), tmp, str(gc_runs)),
            what=f"sessions child {key}",
        )
        return figures


METRICS = [
    ("create", "create_us", "µs/session"),
    ("change once", "change_us", "µs/session"),
    ("close", "close_us", "µs/session"),
    ("close, 10x fewer live", "close_few_us", "µs/session"),
    ("memory (tracemalloc)", "traced_bytes", "B/session"),
    ("peak RSS growth", "rss_bytes", "B/session"),
    ("full gc.collect(), N live", "gc_live_ms", "ms"),
    ("full gc.collect(), no session", "gc_empty_ms", "ms"),
]


@benchmark("sessions", TITLE)
def run(size: Size) -> Result:
    """Sessions benchmark: each implementation in its own child processes."""
    result = Result("sessions", TITLE)
    count = size.sessions
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "modefsm": []}
    for index in range(size.child_repeat):
        order = ["baseline", "modefsm"] if index % 2 == 0 else ["modefsm", "baseline"]
        for key in order:
            runs[key].append(_spawn(key, count, count, 5))
    alternatives = ["machine_per_session"]
    if statechart_available():
        alternatives.append("statechart_per_session")
    else:
        result.notes.append(
            "python-statemachine is not installed (pip install -e '.[bench]'): its row is missing"
        )
    for key in alternatives:
        runs[key] = [_spawn(key, count, min(count, size.alt_tracemalloc), 1)]
    result.notes.append(
        f"{count:,} sessions per child process; baseline and modefsm {size.child_repeat} runs "
        "each, alternated, full GC timed 5 times per run; alternatives 1 run, GC timed once, "
        f"tracemalloc over {min(count, size.alt_tracemalloc):,} of their sessions; every "
        "implementation writes its records to a real file; notifications are queued and "
        "discarded"
    )
    for metric, field, unit in METRICS:
        for key, figures in runs.items():
            result.add(
                Row(
                    metric,
                    HANDLERS[key].name,
                    unit,
                    [f[field] for f in figures],
                    baseline=key == "baseline",
                )
            )
    _targets(result, runs["modefsm"], runs["baseline"])
    return result


def _targets(result: Result, figures: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> None:
    def median(field: str, of: list[dict[str, Any]] = figures) -> float:
        return float(statistics.median(f[field] for f in of))

    create = median("create_us") / median("create_us", baseline)
    result.target(
        "create <= 1.3x the baseline (per session)", met=create <= 1.3, measured=f"{create:.2f}x"
    )
    for field, label in (("traced_bytes", "tracemalloc"), ("rss_bytes", "peak RSS")):
        value = median(field)
        result.target(f"<= 1 KB/session ({label})", met=value <= 1024, measured=f"{value:.0f} B")
    close = median("close_us") / median("close_few_us")
    result.target(
        "close O(1): per-close time, N live / N/10 live <= 1.5",
        met=close <= 1.5,
        measured=f"{close:.2f}",
    )
    pause = median("gc_live_ms")
    result.target("full gc.collect() <= 50 ms, N live", met=pause <= 50, measured=f"{pause:.1f} ms")


if __name__ == "__main__":
    _key, _count, _traced, _dir, _gc_runs = sys.argv[1:6]
    print(json.dumps(child(_key, int(_count), int(_traced), Path(_dir), int(_gc_runs))))
