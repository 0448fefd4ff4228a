"""The benchmark harness: sizes, measurements, the registry, the table and the JSON.

A benchmark is a function ``run(size) -> Result`` registered under a key with
:func:`benchmark`. It measures every implementation it compares *in the same run*: a
:class:`Row` holds one quantity of one implementation, measured ``repeat`` times after
warm-up, and its ratio is taken to the row marked as the baseline of the same metric.
Absolute times on a shared machine move by 15-30% between runs; the ratios are what count.
"""

from __future__ import annotations

import atexit
import functools
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

__all__ = [
    "BENCHMARKS",
    "FULL",
    "QUICK",
    "ROOT",
    "TINY",
    "Benchmark",
    "Result",
    "Row",
    "Size",
    "benchmark",
    "child_env",
    "format_table",
    "machine",
    "no_gc",
    "timed",
]


ROOT = Path(__file__).resolve().parent.parent
"""The project's root, from which ``python -m benchmarks...`` child processes run."""


def child_env() -> dict[str, str]:
    """This process's environment for a child: the project's root first on ``PYTHONPATH``,
    and bytecode cached in a directory of this run's own (``PYTHONPYCACHEPREFIX``).

    Python 3.11.x accepts the ``__pycache__`` files of any other 3.11 release: one that
    another interpreter (a system Python 3.11.2) left in the source tree made
    ``modefsm serve`` 20-30% slower for its whole life under 3.11.7, and the same code in
    another directory looked 0.7x or 1.05x the baseline. Each run compiles its own.

    ``PYTHONDONTWRITEBYTECODE`` is left out: with it, no child would write the bytecode it
    compiles, and every sample would compile every module it imports (the SDK's schema
    among them) from source, which no installed copy does.
    """
    path = os.environ.get("PYTHONPATH")
    inherited = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {
        **inherited,
        "PYTHONPATH": str(ROOT) if not path else f"{ROOT}{os.pathsep}{path}",
        "PYTHONPYCACHEPREFIX": _pycache_prefix(),
    }


@functools.cache
def _pycache_prefix() -> str:
    folder = tempfile.mkdtemp(prefix="modefsm-bench-pycache-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def run_child(module: str, *args: str, what: str) -> Any:
    """Run ``python -m MODULE ARGS...`` in a fresh process and return the JSON it prints.

    Raises:
        RuntimeError: the child failed (its stderr is in the message); *what* names it.
    """
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        check=False,
        env=child_env(),
        cwd=ROOT,
    )
    if done.returncode != 0:
        msg = f"{what} failed:\n{done.stderr}"
        raise RuntimeError(msg)
    return json.loads(done.stdout)


@dataclass(frozen=True)
class Size:
    """How big each benchmark runs.

    Attributes:
        name: ``full``, ``quick`` or ``tiny``.
        sessions: live sessions (benchmarks 1 and 2).
        changes: changes timed per repetition (benchmark 1).
        repeat: timed repetitions (after ``warmup`` untimed ones).
        warmup: untimed repetitions first.
        child_repeat: child processes per implementation (benchmark 2).
        alt_changes: changes timed per repetition for the slow alternatives.
        alt_repeat: repetitions for the slow alternatives.
        alt_tracemalloc: sessions traced by tracemalloc for the alternatives (their memory
            per session does not depend on the count; tracing 100k of them takes minutes).
        round_trips: ``session/set_mode`` round trips per repetition (benchmark 5).
        records: log records (benchmarks 3 and 4 use it and a tenth of it).
        replay_repeat: runs of each replay measurement (benchmark 3).
        lookups: ``session/load`` look-ups (benchmark 4).
    """

    name: str
    sessions: int
    changes: int
    repeat: int
    warmup: int
    child_repeat: int
    alt_changes: int
    alt_repeat: int
    alt_tracemalloc: int
    round_trips: int
    records: int
    replay_repeat: int
    lookups: int


FULL = Size(
    name="full",
    sessions=100_000,
    changes=20_000,
    repeat=11,
    warmup=1,
    child_repeat=5,
    alt_changes=10_000,
    alt_repeat=3,
    alt_tracemalloc=10_000,
    round_trips=2_000,
    records=1_000_000,
    replay_repeat=1,
    lookups=2_000,
)
QUICK = Size(
    name="quick",
    sessions=10_000,
    changes=5_000,
    repeat=5,
    warmup=1,
    child_repeat=2,
    alt_changes=2_000,
    alt_repeat=2,
    alt_tracemalloc=2_000,
    round_trips=300,
    records=100_000,
    replay_repeat=1,
    lookups=200,
)
TINY = Size(
    name="tiny",
    sessions=200,
    changes=100,
    repeat=1,
    warmup=0,
    child_repeat=1,
    alt_changes=50,
    alt_repeat=1,
    alt_tracemalloc=50,
    round_trips=10,
    records=2_000,
    replay_repeat=1,
    lookups=10,
)


@dataclass
class Row:
    """One quantity of one implementation, measured several times.

    Attributes:
        metric: what is measured (rows of one metric share a baseline).
        impl: the implementation.
        unit: ``µs/change``, ``B/session``, ``round trips/s``, ...
        samples: one value per repetition.
        baseline: whether this row is the baseline of its metric.
        note: anything a reader needs to compare it fairly.
    """

    metric: str
    impl: str
    unit: str
    samples: list[float]
    baseline: bool = False
    note: str = ""

    @property
    def median(self) -> float:
        """The median sample."""
        return statistics.median(self.samples)

    def to_json(self, ratio: float | None) -> dict[str, Any]:
        """The row as JSON, with its *ratio* to the baseline."""
        return {
            "metric": self.metric,
            "impl": self.impl,
            "unit": self.unit,
            "median": self.median,
            "min": min(self.samples),
            "max": max(self.samples),
            "samples": self.samples,
            "ratio": ratio,
            "baseline": self.baseline,
            "note": self.note,
        }


@dataclass
class Result:
    """What one benchmark found.

    Attributes:
        key: the registry key (``changes``, ``sessions``, ...).
        title: the heading in the table.
        rows: the measurements.
        targets: ``(target, met, measured)`` triples, e.g.
            ``("modefsm <= 1.5x baseline", True, "1.31x")``.
        notes: how it was measured.
        skipped: why it did not run, if it did not.
    """

    key: str
    title: str
    rows: list[Row] = field(default_factory=list)
    targets: list[tuple[str, bool, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None

    def add(self, row: Row) -> Row:
        """Append *row* and return it."""
        self.rows.append(row)
        return row

    def row(self, metric: str, impl: str) -> Row:
        """The row of *impl* for *metric*.

        Raises:
            KeyError: no such row.
        """
        for row in self.rows:
            if row.metric == metric and row.impl == impl:
                return row
        raise KeyError((metric, impl))

    def ratio(self, row: Row) -> float | None:
        """*row*'s median over its metric's baseline median (``None`` without a baseline)."""
        for base in self.rows:
            if base.metric == row.metric and base.baseline and base.median:
                return row.median / base.median
        return None

    def target(self, text: str, *, met: bool, measured: str) -> None:
        """Record whether the target *text* was met, and the figure that decides it."""
        self.targets.append((text, met, measured))

    def to_json(self) -> dict[str, Any]:
        """The result as JSON."""
        return {
            "key": self.key,
            "title": self.title,
            "skipped": self.skipped,
            "rows": [row.to_json(self.ratio(row)) for row in self.rows],
            "targets": [
                {"target": text, "met": met, "measured": measured}
                for text, met, measured in self.targets
            ],
            "notes": self.notes,
        }


BenchFn = Callable[[Size], Result]


@dataclass(frozen=True)
class Benchmark:
    """A registered benchmark: its key, its title and the function that runs it."""

    key: str
    title: str
    run: BenchFn


BENCHMARKS: dict[str, Benchmark] = {}
"""Every benchmark, in the order the table shows them."""


def benchmark(key: str, title: str) -> Callable[[BenchFn], BenchFn]:
    """Register the decorated ``run(size) -> Result`` under *key*."""

    def register(run: BenchFn) -> BenchFn:
        BENCHMARKS[key] = Benchmark(key, title, run)
        return run

    return register


@contextmanager
def no_gc() -> Iterator[None]:
    """Run the block with the cyclic garbage collector off (as ``timeit`` does)."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def timed(fn: Callable[[], object]) -> float:
    """Seconds that one call of *fn* took."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def machine() -> dict[str, Any]:
    """The machine the figures were measured on."""
    model = platform.processor() or "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(terse=True),
    }


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 0.1:
        return f"{value:.2f}"
    return f"{value:.2g}"


def format_table(results: list[Result], info: dict[str, Any]) -> str:
    """The results as a Markdown table (a heading line per benchmark), then the targets."""
    lines = [
        (
            f"Machine: {info['nproc']} cores, {info['cpu']}, Python {info['python']} "
            f"({info['platform']})"
        ),
        "",
        "| benchmark | metric | implementation | median | min | max | unit | ratio |",
        "|---|---|---|--:|--:|--:|---|--:|",
    ]
    for result in results:
        if result.skipped is not None:
            lines.append(f"| {result.title} | not available: {result.skipped} | | | | | | |")
            continue
        for row in result.rows:
            ratio = result.ratio(row)
            mark = " (baseline)" if row.baseline else ""
            lines.append(
                f"| {result.title} | {row.metric} | {row.impl}{mark} | {_fmt(row.median)} "
                f"| {_fmt(min(row.samples))} | {_fmt(max(row.samples))} | {row.unit} "
                f"| {'' if ratio is None else f'{ratio:.2f}x'} |"
            )
    targets = [(r, t) for r in results for t in r.targets]
    if targets:
        lines += ["", "| benchmark | target | measured | met |", "|---|---|--:|---|"]
        for result, (text, met, measured) in targets:
            lines.append(f"| {result.title} | {text} | {measured} | {'yes' if met else 'NO'} |")
    notes = [(r, n) for r in results for n in r.notes]
    if notes:
        lines.append("")
        lines.extend(f"- {result.title}: {note}" for result, note in notes)
    return "\n".join(lines)


def serve_startup(*args: str) -> float:
    """Seconds from spawning ``modefsm serve ARGS`` until ``initialize`` and ``session/new``
    are answered (a log in a temporary directory unless *args* give ``--log``)."""
    frames = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "session/new",
            "params": {"cwd": ".", "mcpServers": []},
        },
    ]
    with tempfile.TemporaryDirectory() as tmp:
        log = [] if "--log" in args else ["--log", str(Path(tmp) / "log")]
        start = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "modefsm", "serve", *log, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=child_env(),
            cwd=ROOT,
        )
        stdin, stdout = cast("IO[bytes]", process.stdin), cast("IO[bytes]", process.stdout)
        stdin.write(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
        stdin.flush()
        answered = 0
        while answered < len(frames):
            message = json.loads(stdout.readline())
            answered += "id" in message and "method" not in message
        took = time.perf_counter() - start
        stdin.close()  # end of input: the agent answers what it read, then exits 0
        stdout.read()
        stdout.close()
        if process.wait(60) != 0:
            msg = f"modefsm serve {' '.join(args)} exited {process.returncode}"
            raise RuntimeError(msg)
    return took
