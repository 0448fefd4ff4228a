"""Benchmark 8: start-up, each figure a ratio to a baseline measured in the same run.

- ``modefsm --help``: wall time of the whole process, against
  ``python -c "import pydantic, structlog, transitions, orjson"`` (modefsm's own
  dependencies, imported and nothing done).
- ``from modefsm import ModeEngine, preset`` (what a host embedding the engine imports):
  wall and CPU time of the whole process, against the same baseline; the engine loads no
  part of the ACP SDK.
- ``modefsm serve``: from spawn to the ``initialize`` response on its stdout (the request
  written at once), against :mod:`benchmarks.baselines.minimal_agent` (the SDK and nothing else).
  Each of those processes also reports the CPU time (user + system) it used in all, its
  input closed after the response: on a loaded machine the wall times wait for a core,
  the CPU times much less so.

Every sample is a fresh process; the commands alternate, so that the machine's noise falls
on all alike, and each runs once untimed first (its bytecode compiled, the files cached).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchmarks.harness import ROOT, Result, Row, Size, benchmark, child_env

__all__ = ["run"]

TITLE = "9. start-up"
HELP = "modefsm --help wall time"
SERVE = "spawn to initialize response"
SERVE_CPU = "CPU time of a process answering initialize"
ENGINE = "from modefsm import ModeEngine, preset: wall time"
ENGINE_CPU = "from modefsm import ModeEngine, preset: CPU time"
BASE_IMPORTS = ("-c", "import pydantic, structlog, transitions, orjson")

INITIALIZE = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize",'
    b'"params":{"protocolVersion":1,"clientCapabilities":{}}}\n'
)

COMMANDS: dict[str, tuple[str, str, tuple[str, ...], bool]] = {
    "help": (HELP, "modefsm --help", ("-m", "modefsm", "--help"), False),
    "imports": (
        HELP,
        "baseline: python -c 'import pydantic, structlog, transitions, orjson'",
        ("-c", "import pydantic, structlog, transitions, orjson"),
        True,
    ),
    "engine": (
        ENGINE,
        "from modefsm import ModeEngine, preset",
        ("-c", "from modefsm import ModeEngine, preset"),
        False,
    ),
    "engine-imports": (
        ENGINE,
        "baseline: python -c 'import pydantic, structlog, transitions, orjson'",
        BASE_IMPORTS,
        True,
    ),
    "serve": (SERVE, "modefsm serve", ("-m", "modefsm", "serve"), False),
    "minimal": (
        SERVE,
        "baseline: minimal SDK agent",
        ("-m", "benchmarks.baselines.minimal_agent"),
        True,
    ),
}
"""key -> (metric, implementation, python arguments, baseline)."""


def _wall(args: tuple[str, ...]) -> tuple[float, float]:
    """Milliseconds from spawn to exit of ``python ARGS`` (its output discarded), and the
    milliseconds of CPU time (user + system) it used."""
    start = time.perf_counter()
    with subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=child_env(),
        cwd=ROOT,
    ) as process:
        _pid, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    elapsed = (time.perf_counter() - start) * 1000
    if process.returncode != 0:
        msg = f"python {' '.join(args)}: exit status {process.returncode}"
        raise RuntimeError(msg)
    return elapsed, (usage.ru_utime + usage.ru_stime) * 1000


def _to_initialized(args: tuple[str, ...]) -> tuple[float, float]:
    """Milliseconds from spawn of the agent ``python ARGS`` to its ``initialize`` response,
    and the milliseconds of CPU time (user + system) the process used until it ended (its
    input closed after the response)."""
    start = time.perf_counter()
    with subprocess.Popen(
        [sys.executable, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=child_env(),
        cwd=ROOT,
    ) as process:
        stdin, stdout = process.stdin, process.stdout
        if stdin is None or stdout is None:  # pragma: no cover - both are pipes
            raise RuntimeError("no pipes")
        stdin.write(INITIALIZE)
        stdin.flush()
        line = stdout.readline()
        elapsed = (time.perf_counter() - start) * 1000
        stdin.close()
        stdout.read()
        _pid, _status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(_status)
    if b'"id":0' not in line or b'"result"' not in line:
        msg = f"python {' '.join(args)}: no initialize response, got {line[:200]!r}"
        raise RuntimeError(msg)
    return elapsed, (usage.ru_utime + usage.ru_stime) * 1000


def sample(key: str) -> tuple[float, float | None]:
    """One sample of command *key*: milliseconds, and CPU milliseconds for an agent."""
    metric, _name, args, _baseline = COMMANDS[key]
    if metric == HELP:
        return _wall(args)[0], None
    return _wall(args) if metric == ENGINE else _to_initialized(args)


@benchmark("startup", TITLE)
def run(size: Size) -> Result:
    """Each command ``3 x size.repeat`` times (once at the tiny size), alternated."""
    samples = 1 if size.name == "tiny" else 3 * size.repeat
    times: dict[str, list[float]] = {key: [] for key in COMMANDS}
    cpu: dict[str, list[float]] = {key: [] for key in COMMANDS}
    for key in COMMANDS if size.name != "tiny" else ():  # warm-up: bytecode compiled
        sample(key)
    for index in range(samples):
        keys = list(COMMANDS)
        if index % 2:
            keys.reverse()
        for key in keys:
            wall, used = sample(key)
            times[key].append(wall)
            if used is not None:
                cpu[key].append(used)
    result = Result("startup", TITLE)
    for key, (metric, name, _args, baseline) in COMMANDS.items():
        result.add(Row(metric, name, "ms", times[key], baseline))
    for key, (metric, name, _args, baseline) in COMMANDS.items():
        if cpu[key]:
            cpu_metric = ENGINE_CPU if metric == ENGINE else SERVE_CPU
            result.add(Row(cpu_metric, name, "ms", cpu[key], baseline))
    for key, metric, limit in (
        ("help", HELP, 1.5),
        ("engine", ENGINE_CPU, 1.5),
        ("serve", SERVE, 1.1),
    ):
        row = result.row(metric, COMMANDS[key][1])
        ratio = result.ratio(row) or 0.0
        kind = " (CPU)" if metric == ENGINE_CPU else ""
        result.target(
            f"{COMMANDS[key][1]} <= {limit}x the baseline{kind}",
            met=ratio <= limit,
            measured=f"{ratio:.2f}x",
        )
    result.notes.append(
        f"{samples} fresh processes per command, alternated, after one untimed run each; "
        "the initialize request is written at spawn"
    )
    return result
