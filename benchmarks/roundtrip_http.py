"""Benchmark 5 over HTTP: ``session/set_mode`` round trips per second over streamable HTTP.

As :mod:`benchmarks.roundtrip`, but each agent serves HTTP on 127.0.0.1 and the official
SDK client connects with ``acp.http.create_http_stream``:

- ``modefsm serve --http 127.0.0.1:0 --log FILE`` (modefsm's ASGI app on uvicorn: frame
  checks, bounds, the engine, its log, both notifications);
- the minimal dict agent served by the SDK's own ASGI app (``acp.http.asgi.create_asgi_app``)
  on uvicorn, sending the same notifications and writing the same log line: the baseline.

Each repetition starts both servers afresh and measures each in turn (the order alternates).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import acp

from benchmarks.harness import ROOT, Result, Size, benchmark, child_env, run_child
from benchmarks.roundtrip import Session, _Client, _pin, alternate, compare

__all__ = ["run"]

TITLE = "5b. over the wire, HTTP"
METRIC = "set_mode round trips/s over HTTP"

AGENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "modefsm": (
        "modefsm serve --http",
        ("modefsm", "serve", "--http", "127.0.0.1:0", "--log", "{log}"),
    ),
    "baseline": (
        "baseline: dict agent on the SDK's ASGI app, same notifications and log",
        ("benchmarks.dict_agent", "--notify", "--log", "{log}", "--http", "127.0.0.1:0"),
    ),
}


@benchmark("roundtrip_http", TITLE)
def run(size: Size) -> Result:
    """Round trips per second of each HTTP agent, repetitions alternated (client in a child)."""
    rates: dict[str, list[float]] = run_child(
        "benchmarks.roundtrip_http",
        str(size.round_trips),
        str(size.repeat),
        what="HTTP round-trip client",
    )
    result = Result("roundtrip_http", TITLE)
    rows = {key: (name, "") for key, (name, _command) in AGENTS.items()}
    compare(result, METRIC, rows, rates, "modefsm >= 0.8x the SDK dict agent's rate over HTTP")
    result.notes.append(
        f"one session per agent, {size.round_trips:,} sequential round trips per repetition, "
        f"{size.repeat} repetitions, fresh servers each; uvicorn, HTTP/1.1 + SSE on 127.0.0.1"
    )
    return result


@contextlib.asynccontextmanager
async def _server(key: str, tmp: Path) -> AsyncIterator[str]:
    module, *rest = (part.format(log=tmp / f"{key}.jsonl") for part in AGENTS[key][1])
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        *rest,
        cwd=ROOT,
        env=child_env(),
        stdin=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None  # noqa: S101
    try:
        line = (await asyncio.wait_for(process.stderr.readline(), 60)).decode()
        found = re.search(r"listening on (http://\S+)", line)
        if found is None:
            raise AssertionError(f"{key} did not start: {line!r}")
        _pin(process.pid, 1)
        yield found.group(1)
    finally:
        process.terminate()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 15)
        if process.returncode is None:
            process.kill()
            await process.wait()


async def measure(round_trips: int, repeat: int) -> dict[str, list[float]]:
    """Round trips per second of both HTTP agents, *repeat* times each."""
    from acp.http import create_http_stream  # noqa: PLC0415 - the http extra

    async def start(stack: contextlib.AsyncExitStack[Any], key: str) -> Session:
        url = await stack.enter_async_context(_server(key, Path(tmp)))
        client = _Client()
        conn = acp.connect_to_agent(cast("Any", client), create_http_stream(url))
        stack.push_async_callback(conn.close)
        await asyncio.wait_for(conn.initialize(protocol_version=1), 60)
        session = await conn.new_session(cwd=tmp)
        return conn, session.session_id, client

    _pin(0, 0)
    with tempfile.TemporaryDirectory() as tmp:
        return await alternate(list(AGENTS), start, round_trips, repeat)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(measure(int(sys.argv[1]), int(sys.argv[2])))))
