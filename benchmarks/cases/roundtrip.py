"""Benchmark 5: mode round trips per second over stdio, through the SDK, for ACP v1 and v2.

The official SDK client drives five agents, each in its own process, one request at a time
(the next request leaves when the response arrived, with its notifications before it).
ACP v1 (``acp.spawn_agent_process``, ``session/set_mode``):

- ``modefsm serve --log FILE`` (the engine, its log, both notifications);
- the minimal dict agent (:mod:`benchmarks.baselines.dict_agent`) sending the same notifications and
  writing the same log line: the baseline;
- the minimal dict agent sending no notification and writing no log (the bare wire).

ACP v2 (the SDK's v2 client, ``acp.experimental.v2.connect_to_agent``,
``session/set_config_option`` with ``type: "id"``):

- ``modefsm serve --log FILE`` negotiating v2 (the engine, its log, ``config_option_update``);
- the minimal SDK v2 agent (:mod:`benchmarks.baselines.dict_agent_v2`) keeping the mode in a dict,
  sending the same notification and writing the same log line: the v2 baseline.

Each repetition starts the three agents afresh and measures each in turn (the order
alternates), so that noise, and the luck of where a process lands, fall on all alike. The
client runs in a fresh child process of its own (``python -m benchmarks.cases.roundtrip``), so
that what earlier benchmarks left in the parent's heap does not slow it down.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import acp

from benchmarks.harness import ROOT, Result, Row, Size, benchmark, child_env, run_child

__all__ = ["alternate", "compare", "run"]

TITLE = "5. over the wire"
METRIC = "set_mode round trips/s"
METRIC_V2 = "ACP v2: set_config_option round trips/s"


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
    "modefsm": ("modefsm serve", ("modefsm", "serve", "--log", "{log}"), ""),
    "baseline": (
        "baseline: dict agent, same notifications and log",
        ("benchmarks.baselines.dict_agent", "--notify", "--log", "{log}"),
        "",
    ),
    "bare": (
        "dict agent, no notification, no log",
        ("benchmarks.baselines.dict_agent",),
        "1 message back per request instead of 3",
    ),
}

V2_AGENTS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "modefsm_v2": ("modefsm serve, v2 client", ("modefsm", "serve", "--log", "{log}"), ""),
    "baseline_v2": (
        "baseline: minimal SDK v2 agent, dict, same notification and log",
        ("benchmarks.baselines.dict_agent_v2", "--log", "{log}"),
        "",
    ),
}


async def _rate(conn: Any, session_id: str, count: int) -> float:
    modes = ["architect", "code", "ask"]
    v2 = not hasattr(conn, "set_session_mode")
    start = time.perf_counter()
    for i in range(count):
        if v2:
            await conn.set_config_option(
                config_id="mode", session_id=session_id, value=modes[i % len(modes)], type="id"
            )
        else:
            await conn.set_session_mode(session_id=session_id, mode_id=modes[i % len(modes)])
    return count / (time.perf_counter() - start)


@benchmark("roundtrip", TITLE)
def run(size: Size) -> Result:
    """Round trips per second of each agent, repetitions alternated (client in a child)."""
    rates: dict[str, list[float]] = run_child(
        "benchmarks.cases.roundtrip",
        str(size.round_trips),
        str(size.repeat),
        what="round-trip client",
    )
    result = Result("roundtrip", TITLE)
    rows = {key: (name, note) for key, (name, _command, note) in AGENTS.items()}
    compare(result, METRIC, rows, rates, "modefsm >= 0.8x the dict agent's rate")
    rows = {key: (name, note) for key, (name, _command, note) in V2_AGENTS.items()}
    compare(
        result,
        METRIC_V2,
        rows,
        rates,
        "ACP v2: modefsm >= 0.8x the minimal SDK v2 agent's rate",
        pair=("modefsm_v2", "baseline_v2"),
    )
    result.notes.append(
        f"one session per agent, {size.round_trips:,} sequential round trips per repetition, "
        f"{size.repeat} repetitions, each with fresh agent processes; client pinned to CPU 0, "
        "agents to CPU 1"
    )
    return result


def compare(
    result: Result,
    metric: str,
    rows: dict[str, tuple[str, str]],
    rates: dict[str, list[float]],
    target: str,
    *,
    pair: tuple[str, str] = ("modefsm", "baseline"),
) -> None:
    """Add a row of *rates* per agent key (*rows*: key -> name, note) and the target
    *target*: the median rate of *pair*'s first key (modefsm) >= 0.8x its second's (the
    baseline)."""
    ours, base = pair
    for key, (name, note) in rows.items():
        result.add(Row(metric, name, "round trips/s", rates[key], key == base, note))
    ratio = result.row(metric, rows[ours][0]).median / result.row(metric, rows[base][0]).median
    result.target(target, met=ratio >= 0.8, measured=f"{ratio:.2f}x")


def _pin(pid: int, cpu: int) -> None:
    """Run process *pid* (0: this one) on CPU *cpu* only, where the system allows it."""
    if hasattr(os, "sched_setaffinity") and cpu in os.sched_getaffinity(0):
        os.sched_setaffinity(pid, {cpu})


Session = tuple[Any, str, _Client]
"""An agent's connection, its session's id and the client that counts its updates."""


async def alternate(
    keys: list[str],
    start: Callable[[contextlib.AsyncExitStack[Any], str], Awaitable[Session]],
    round_trips: int,
    repeat: int,
    pairs: tuple[tuple[str, str], ...] = (("modefsm", "baseline"),),
) -> dict[str, list[float]]:
    """Round trips per second of the agent of every key, *repeat* times each.

    Each repetition starts every agent afresh with *start* (which registers its clean-up
    on the stack), in alternating order, warms each up, then measures each. The two agents
    of each of *pairs* (modefsm, its baseline) must have sent the same number of updates.
    """
    rates: dict[str, list[float]] = {key: [] for key in keys}
    updates: dict[str, int] = dict.fromkeys(keys, 0)
    for index in range(repeat):
        order = list(reversed(keys)) if index % 2 else list(keys)
        async with contextlib.AsyncExitStack() as stack:
            sessions: dict[str, Session] = {}
            for key in order:
                sessions[key] = await start(stack, key)
            for conn, session_id, _client in sessions.values():
                await _rate(conn, session_id, max(10, round_trips // 5))
            for key, (conn, session_id, client) in sessions.items():
                before = client.updates
                rates[key].append(await _rate(conn, session_id, round_trips))
                updates[key] += client.updates - before
    for ours, base in pairs:
        if updates[ours] != updates[base]:
            raise AssertionError(f"{ours} and {base} sent different updates: {updates}")
    return rates


async def measure(round_trips: int, repeat: int) -> dict[str, list[float]]:
    """Round trips per second of every agent (v1 and v2), *repeat* times each.

    Each repetition starts all five agents afresh (in alternating order), warms each up,
    then measures each: the rate of one agent process can sit 10-20% above or below
    another's for its whole life (where the scheduler and the allocator put it), so each
    sample gets processes of its own. With two CPUs or more, the client runs on CPU 0 and
    every agent on CPU 1, so that all agents compete under the same placement.
    """
    _pin(0, 0)
    rng = random.Random()  # a new layout for every process of every run
    with tempfile.TemporaryDirectory() as tmp:
        return await alternate(
            [*AGENTS, *V2_AGENTS],
            lambda stack, key: _start(stack, key, Path(tmp), rng),
            round_trips,
            repeat,
            pairs=(("modefsm", "baseline"), ("modefsm_v2", "baseline_v2")),
        )


async def _start(
    stack: contextlib.AsyncExitStack[Any], key: str, tmp: Path, rng: random.Random
) -> Session:
    """Spawn agent *key*, initialize it and open a session; the stack closes it.

    The agent starts through :mod:`benchmarks.launch` with a random seed (its heap laid
    out anew) and a random number of padding bytes in its environment (its stack starts
    elsewhere): layout effects become noise, not a bias for one agent.
    """
    client = _Client()
    command = AGENTS[key][1] if key in AGENTS else V2_AGENTS[key][1]
    module, *rest = (part.format(log=tmp / f"{key}.jsonl") for part in command)
    seed, pad = rng.randrange(2**32), rng.randrange(4096)
    args = ["-m", "benchmarks.launch", str(seed), module, *rest]
    env = {**child_env(), "MODEFSM_BENCH_PAD": "x" * pad}
    if key in V2_AGENTS:
        return await _start_v2(stack, client, args, env, tmp)
    conn, process = await stack.enter_async_context(
        acp.spawn_agent_process(
            cast("Any", client),
            sys.executable,
            *args,
            env=env,
            cwd=ROOT,
            transport_kwargs={"stderr": None, "shutdown_timeout": 60.0},  # a loaded machine
        )
    )
    _pin(process.pid, 1)
    await asyncio.wait_for(conn.initialize(protocol_version=acp.PROTOCOL_VERSION), 60)
    session = await conn.new_session(cwd=str(tmp))
    return conn, session.session_id, client


async def _start_v2(
    stack: contextlib.AsyncExitStack[Any],
    client: _Client,
    args: list[str],
    env: dict[str, str],
    tmp: Path,
) -> tuple[Any, str, _Client]:
    """As :func:`_start`, with the SDK's v2 client on the agent's pipes."""
    from acp.experimental import v2  # noqa: PLC0415 - only this row needs the v2 schema

    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert process.stdin is not None  # noqa: S101 - pipes were asked for
    assert process.stdout is not None  # noqa: S101

    async def stop() -> None:
        await conn.close()
        assert process.stdin is not None  # noqa: S101
        process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()

    conn = v2.connect_to_agent(client, process.stdin, process.stdout)
    stack.push_async_callback(stop)
    _pin(process.pid, 1)
    info = v2.schema.Implementation(name="benchmark", version="0")
    await asyncio.wait_for(conn.initialize(protocol_version=2, info=info), 60)
    session = await conn.new_session(cwd=str(tmp))
    return conn, session.session_id, client


if __name__ == "__main__":
    print(json.dumps(asyncio.run(measure(int(sys.argv[1]), int(sys.argv[2])))))
