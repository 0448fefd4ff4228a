"""Benchmarks 3 and 4: replaying a large log, and restoring a session's mode through an index.

Both need modefsm's replay side: ``modefsm.replay.replay(paths, verify=...)`` for 3, and a
``RestoreIndex`` (in ``modefsm.replay`` or ``modefsm.store._restore``) with
``RestoreIndex.rebuild(index_path, [log])`` and ``restore_point(session_id)`` for 4. When
this build of modefsm does not have them, the benchmark reports "not available" instead.

The logs are written by the engine itself (:func:`write_log`): S sessions created, then
random valid changes until the log holds the wanted number of records. The 100k- and
1M-record logs have the same sessions, so that only the log's length differs.

3. **Replay**: in a child process each (for its peak RSS), a parse-only loop (each line
   through ``orjson.loads``: the baseline), ``replay`` and ``replay(verify=True)``, each
   timed from its first line read to its result (imports done before), wall and CPU. Then
   the final modes of the larger log: ``modefsm replay --summary LOG`` against a plain
   orjson loop that keeps each session's last ``to_mode`` (:data:`FINAL_MODES`), each a
   fresh process whose CPU time (user + system, start-up included) is measured,
   alternated.
4. **Restore**: the index is built from the log, then ``restore_point`` is timed for random
   sessions, one by one: median and p99, for the 100k- and the 1M-record log.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from benchmarks.harness import ROOT, Result, Row, Size, benchmark, child_env, run_child
from modefsm import LogStore, ModeEngine, TransitionLog, preset

__all__ = ["replay_api", "restore_index", "run_replay", "run_restore", "write_log"]


def replay_api() -> Callable[..., Any] | None:
    """``modefsm.replay.replay`` if this build has it."""
    module = importlib.import_module("modefsm.replay._replayer")
    function = getattr(module, "replay", None)
    return function if callable(function) else None


def restore_index() -> Any:
    """The ``RestoreIndex`` class if this build has one (with ``rebuild``), else ``None``."""
    for name in ("modefsm.replay._replayer", "modefsm.store._restore"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        cls = getattr(module, "RestoreIndex", None)
        if cls is not None and hasattr(cls, "rebuild"):
            return cls
    return None


def write_log(path: Path, records: int, sessions: int, seed: int = 3) -> list[str]:
    """Write a log of *records* records over *sessions* sessions through the engine.

    Returns:
        The session ids.
    """
    spec = preset("seed")
    log = TransitionLog.to_file(path)
    try:
        engine = ModeEngine(spec, store=LogStore(log))
        ids = [f"sess_{i:032x}" for i in range(sessions)]
        for session_id in ids:
            engine.new_session(session_id)
        rng = random.Random(seed)
        targets = {mode: spec.client_targets(mode) for mode in spec.mode_ids}
        change = engine.change
        get = engine.get
        for _ in range(max(0, records - sessions)):
            session_id = ids[rng.randrange(sessions)]
            change(session_id, rng.choice(targets[get(session_id).state]), "set_mode")
    finally:
        log.close()
    return ids


def _hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0  # pragma: no cover


def child(task: str, path: Path) -> dict[str, Any]:
    """Run *task* (``parse``, ``replay`` or ``verify``) over the log *path*, in this process.

    Returns:
        ``seconds`` (wall) and ``cpu`` (this process's CPU seconds) from the first line read
        to the result, and ``peak_kib``, the growth of the peak RSS meanwhile.
    """
    function = None
    if task != "parse":
        function = replay_api()
        if function is None:
            raise SystemExit("modefsm.replay._replayer.replay is not available")
    before = _hwm_kib()
    cpu, start = time.process_time(), time.perf_counter()
    if function is None:
        count = 0
        with path.open("rb") as file:
            for line in file:
                orjson.loads(line)
                count += 1
    else:
        kwargs: dict[str, Any] = {"verify": task == "verify"}
        if "keep_timeline" in inspect.signature(function).parameters:
            kwargs["keep_timeline"] = False
        function([path], **kwargs)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"seconds": seconds, "cpu": cpu, "peak_kib": _hwm_kib() - before}


FINAL_MODES = """\
import sys, orjson
modes = {}
with open(sys.argv[1], "rb") as file:
    for line in file:
        data = orjson.loads(line)
        if data["event"] not in ("modefsm.change_rejected", "modefsm.spec"):
            modes[data["session_id"]] = data["to_mode"]
print(len(modes))
"""
"""The baseline of the final modes: each line parsed, each session's last mode kept."""

SUMMARY = {
    "loop": ("baseline: plain orjson loop, last to_mode per session", ("-c", FINAL_MODES)),
    "summary": ("modefsm replay --summary", ("-m", "modefsm", "replay", "--summary")),
}


def _cpu_seconds(args: tuple[str, ...], path: Path) -> float:
    """CPU seconds (user + system) of a fresh ``python ARGS PATH``, start-up included.

    Raises:
        RuntimeError: the process failed (a replay that is not clean exits 1).
    """
    with subprocess.Popen(
        [sys.executable, *args, str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=child_env(),
        cwd=ROOT,
    ) as process:
        stderr = process.stderr.read() if process.stderr is not None else b""
        _pid, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        msg = f"python {' '.join(args[:3])} exited {process.returncode}: {stderr[-500:]!r}"
        raise RuntimeError(msg)
    return usage.ru_utime + usage.ru_stime


def _spawn(task: str, path: Path) -> dict[str, Any]:
    figures: dict[str, Any] = run_child(
        "benchmarks.cases.replay", task, str(path), what=f"replay child {task}"
    )
    return figures


_LOGS: dict[Size, dict[str, tuple[Path, list[str]]]] = {}
_LOG_DIR: list[tempfile.TemporaryDirectory[str]] = []


def _logs(size: Size) -> dict[str, tuple[Path, list[str]]]:
    """The two logs of *size*, written once per process (benchmarks 3 and 4 share them)."""
    if size in _LOGS:
        return _LOGS[size]
    if not _LOG_DIR:
        _LOG_DIR.append(tempfile.TemporaryDirectory())  # removed when the process exits
    tmp = Path(_LOG_DIR[0].name)
    sessions = max(1, size.records // 100)
    small, large = max(sessions, size.records // 10), size.records
    logs = {}
    for label, records in ((f"{small:,} records", small), (f"{large:,} records", large)):
        path = tmp / f"{size.name}-{records}.jsonl"
        logs[label] = (path, write_log(path, records, sessions))
    _LOGS[size] = logs
    return logs


@benchmark("replay", "3. replay")
def run_replay(size: Size) -> Result:
    """Replay and verify against the parse-only loop; peak memory for two log lengths."""
    result = Result("replay", "3. replay")
    if replay_api() is None:
        result.skipped = "modefsm.replay._replayer.replay() is not in this build"
        return result
    logs = _logs(size)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for label, (path, _ids) in logs.items():
        for task in ("parse", "replay", "verify"):
            runs[task, label] = [_spawn(task, path) for _ in range(size.replay_repeat)]
    names = {"parse": "parse only (orjson.loads)", "replay": "replay", "verify": "replay --verify"}
    for unit, key in (("µs/record", "seconds"), ("µs/record (CPU)", "cpu")):
        for (task, label), figures in runs.items():
            records = int(label.split()[0].replace(",", ""))
            result.add(
                Row(
                    f"{unit}, {label}",
                    names[task],
                    "µs/record",
                    [f[key] / records * 1e6 for f in figures],
                    baseline=task == "parse",
                )
            )
    for (task, label), figures in runs.items():
        result.add(
            Row(
                f"peak RSS growth, {label}",
                names[task],
                "MiB",
                [f["peak_kib"] / 1024 for f in figures],
            )
        )
    small, large = logs
    _final_modes(result, logs[large][0], large, 1 if size.name == "tiny" else 3)
    for task, limit in (("replay", 3), ("verify", 5)):
        ratio = result.ratio(result.row(f"µs/record, {large}", names[task])) or 0.0
        result.target(
            f"{names[task]} <= {limit}x parse only", met=ratio <= limit, measured=f"{ratio:.2f}x"
        )
        peaks = [
            statistics.median(f["peak_kib"] for f in runs[task, label]) for label in (small, large)
        ]
        growth = peaks[1] / peaks[0] if peaks[0] else float("inf")
        result.target(
            f"{names[task]}: peak memory, {large} / {small} within 20%",
            met=0.8 <= growth <= 1.2,
            measured=f"{growth:.2f}x",
        )
    result.notes.append(
        f"logs written by the engine over {max(1, size.records // 100):,} sessions; each "
        f"measurement in a fresh child process, {size.replay_repeat} run(s) each"
    )
    return result


def _final_modes(result: Result, path: Path, label: str, samples: int) -> None:
    """The summary row: ``modefsm replay --summary`` against :data:`FINAL_MODES`, CPU."""
    cpu: dict[str, list[float]] = {key: [] for key in SUMMARY}
    warmup = samples > 1  # a first round untimed: bytecode compiled, the file cached
    for index in range(samples + warmup):
        keys = list(SUMMARY) if index % 2 else list(reversed(SUMMARY))
        for key in keys:
            seconds = _cpu_seconds(SUMMARY[key][1], path)
            if index or not warmup:
                cpu[key].append(seconds)
    metric = f"final modes, CPU of a process (start-up included), {label}"
    for key, (name, _args) in SUMMARY.items():
        result.add(Row(metric, name, "s", cpu[key], baseline=key == "loop"))
    ratio = result.ratio(result.row(metric, SUMMARY["summary"][0])) or 0.0
    result.target(
        "replay --summary <= 2x the plain orjson loop (CPU)",
        met=ratio <= 2,
        measured=f"{ratio:.2f}x",
    )


@benchmark("restore", "4. restore")
def run_restore(size: Size) -> Result:
    """``restore_point`` through the index: median and p99, for two log lengths."""
    result = Result("restore", "4. restore")
    index_cls = restore_index()
    if index_cls is None:
        result.skipped = (
            "modefsm has no RestoreIndex with rebuild() (modefsm.replay._replayer, .restore)"
        )
        return result
    rng = random.Random(4)
    medians = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, (path, ids) in _logs(size).items():
            index_path = Path(tmp) / f"{path.stem}.sqlite"
            start = time.perf_counter()
            index_cls.rebuild(index_path, [path])
            result.add(
                Row(f"index rebuild, {label}", "rebuild", "s", [time.perf_counter() - start])
            )
            index = index_cls(index_path)
            samples = []
            try:
                for session_id in (rng.choice(ids) for _ in range(size.lookups)):
                    start = time.perf_counter()
                    point = index.restore_point(session_id)
                    samples.append((time.perf_counter() - start) * 1e3)
                    if point is None:
                        raise AssertionError(f"{session_id} is not in the index")
            finally:
                close = getattr(index, "close", None)
                if close is not None:
                    close()
            samples.sort()
            p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
            medians[label] = statistics.median(samples)
            result.add(Row(f"restore_point, {label}", "median", "ms", [medians[label]]))
            result.add(Row(f"restore_point, {label}", "p99", "ms", [p99]))
    scan = _scan_ms(size, rng)
    if scan is not None:
        label, samples = scan
        result.add(
            Row(f"restore_point, {label}", "no index: LogRestore (full scan)", "ms", samples)
        )
    worst = max(medians.values())
    result.target("restore_point median <= 1 ms", met=worst <= 1, measured=f"{worst:.3f} ms")
    first, last = medians.values()
    result.target(
        "independent of log size (median, large / small log)",
        met=last / first <= 2,
        measured=f"{last / first:.2f}x",
    )
    result.notes.append(f"{size.lookups:,} look-ups of random sessions per log, one at a time")
    return result


def _scan_ms(size: Size, rng: random.Random) -> tuple[str, list[float]] | None:
    """A few look-ups through ``LogRestore`` (a full scan of the smaller log each), in ms."""
    restore_cls = getattr(importlib.import_module("modefsm.replay._replayer"), "LogRestore", None)
    if restore_cls is None:
        return None
    label, (path, ids) = next(iter(_logs(size).items()))
    restore = restore_cls(path)
    samples = []
    for session_id in (rng.choice(ids) for _ in range(3)):
        start = time.perf_counter()
        restore.restore_point(session_id)
        samples.append((time.perf_counter() - start) * 1e3)
    return label, samples


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], Path(sys.argv[2]))))
