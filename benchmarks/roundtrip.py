"""Benchmark 5: ``session/set_mode`` round trips per second over stdio, through the SDK.

The official SDK client (``acp.spawn_agent_process``) drives three agents, each in its own
process, one request at a time (the next request leaves when the response arrived, with
both notifications before it):

- ``modefsm serve --log FILE`` (the engine, its log, both notifications);
- the minimal dict agent (:mod:`benchmarks.dict_agent`) sending the same notifications and
  writing the same log line: the baseline;
- the minimal dict agent sending no notification and writing no log (the bare wire).

All three are started first and their repetitions alternate, so noise falls on all alike.
The client runs in a fresh child process of its own (``python -m benchmarks.roundtrip``),
so that what earlier benchmarks left in the parent's heap does not slow it down.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import acp

from benchmarks.harness import ROOT, Result, Row, Size, benchmark, child_env

__all__ = ["run"]

TITLE = "5. over the wire"
METRIC = "set_mode round trips/s"


class _Client:
    """A client that accepts every notification (the SDK has already parsed it)."""

    def __init__(self) -> None:
        self.updates = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        del session_id, update, kwargs
        self.updates += 1

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


AGENTS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "modefsm": ("modefsm serve", ("-m", "modefsm", "serve", "--log", "{log}"), ""),
    "baseline": (
        "baseline: dict agent, same notifications and log",
        ("-m", "benchmarks.dict_agent", "--notify", "--log", "{log}"),
        "",
    ),
    "bare": (
        "dict agent, no notification, no log",
        ("-m", "benchmarks.dict_agent"),
        "1 message back per request instead of 3",
    ),
}


async def _rate(conn: Any, session_id: str, modes: list[str], count: int) -> float:
    start = time.perf_counter()
    for i in range(count):
        await conn.set_session_mode(session_id=session_id, mode_id=modes[i % len(modes)])
    return count / (time.perf_counter() - start)


@benchmark("roundtrip", TITLE)
def run(size: Size) -> Result:
    """Round trips per second of each agent, repetitions alternated (client in a child)."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.roundtrip", str(size.round_trips), str(size.repeat)],
        capture_output=True,
        text=True,
        check=False,
        env=child_env(),
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"round-trip client failed:\n{done.stderr}")
    rates: dict[str, list[float]] = json.loads(done.stdout)
    result = Result("roundtrip", TITLE)
    for key, (name, _command, note) in AGENTS.items():
        result.add(Row(METRIC, name, "round trips/s", rates[key], key == "baseline", note))
    ratio = (
        result.row(METRIC, AGENTS["modefsm"][0]).median
        / result.row(METRIC, AGENTS["baseline"][0]).median
    )
    result.target(
        "modefsm >= 0.8x the dict agent's rate", met=ratio >= 0.8, measured=f"{ratio:.2f}x"
    )
    result.notes.append(
        f"one session per agent, {size.round_trips:,} sequential round trips per repetition, "
        f"{size.repeat} repetitions; each agent and the client in a process of its own"
    )
    return result


async def measure(round_trips: int, repeat: int) -> dict[str, list[float]]:
    """Round trips per second of every agent, *repeat* times each, alternated."""
    modes = ["architect", "code", "ask"]
    rates: dict[str, list[float]] = {key: [] for key in AGENTS}
    with tempfile.TemporaryDirectory() as tmp:
        async with contextlib.AsyncExitStack() as stack:
            sessions: dict[str, tuple[Any, str]] = {}
            clients: dict[str, _Client] = {}
            for key, (_name, command, _note) in AGENTS.items():
                client = _Client()
                args = [part.format(log=Path(tmp) / f"{key}.jsonl") for part in command]
                conn, _process = await stack.enter_async_context(
                    acp.spawn_agent_process(
                        cast("Any", client),
                        sys.executable,
                        *args,
                        env=child_env(),
                        cwd=ROOT,
                        transport_kwargs={"stderr": None},
                    )
                )
                await asyncio.wait_for(conn.initialize(protocol_version=acp.PROTOCOL_VERSION), 60)
                session = await conn.new_session(cwd=tmp)
                sessions[key] = (conn, session.session_id)
                clients[key] = client
            for conn, session_id in sessions.values():
                await _rate(conn, session_id, modes, max(10, round_trips // 5))
            for index in range(repeat):
                keys = list(sessions)
                if index % 2:
                    keys.reverse()
                for key in keys:
                    conn, session_id = sessions[key]
                    rates[key].append(await _rate(conn, session_id, modes, round_trips))
        if clients["modefsm"].updates != clients["baseline"].updates:
            raise AssertionError("modefsm and the baseline sent different numbers of updates")
    return rates


if __name__ == "__main__":
    print(json.dumps(asyncio.run(measure(int(sys.argv[1]), int(sys.argv[2])))))
