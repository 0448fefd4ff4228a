"""Benchmark 5b: mode round trips per second over streamable HTTP, ACP v1 and v2.

As :mod:`benchmarks.cases.roundtrip`, but each agent serves HTTP on 127.0.0.1 and the official
SDK client connects with ``acp.http.create_http_stream``:

- ``modefsm serve --http 127.0.0.1:0 --log FILE`` (modefsm's ASGI app on uvicorn: frame
  checks, bounds, negotiation, the shared engine, its log, the notifications), driven by
  the SDK's v1 client (``session/set_mode``) and by its v2 client
  (``session/set_config_option``, one ``config_option_update`` each);
- the baselines: for v1 the minimal dict agent served by the SDK's own ASGI app
  (``acp.http.asgi.create_asgi_app``), for v2 the same dict agent's v2 face behind the
  SDK's ``AgentProtocolRouter`` on that app (:mod:`benchmarks.baselines.dict_agent_v2_http`);
  each sends the same notifications and writes the same log line.

Each repetition starts every server afresh and measures each in turn (the order alternates).
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

from benchmarks.cases.roundtrip import Session, _Client, _pin, alternate, compare
from benchmarks.harness import ROOT, Result, Size, benchmark, child_env, run_child

__all__ = ["run"]

TITLE = "5b. over the wire, HTTP"
METRIC = "set_mode round trips/s over HTTP"
METRIC_V2 = "v2 set_config_option round trips/s over HTTP"

AGENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "modefsm": (
        "modefsm serve --http",
        ("modefsm", "serve", "--http", "127.0.0.1:0", "--log", "{log}"),
    ),
    "baseline": (
        "baseline: dict agent on the SDK's ASGI app, same notifications and log",
        ("benchmarks.baselines.dict_agent", "--notify", "--log", "{log}", "--http", "127.0.0.1:0"),
    ),
    "modefsm_v2": (
        "modefsm serve --http, v2 client",
        ("modefsm", "serve", "--http", "127.0.0.1:0", "--log", "{log}"),
    ),
    "baseline_v2": (
        "baseline: v2 dict agent on the SDK's ASGI app and router, same notification and log",
        ("benchmarks.baselines.dict_agent_v2_http", "{log}"),
    ),
}
PAIRS = (("modefsm", "baseline", METRIC), ("modefsm_v2", "baseline_v2", METRIC_V2))


@benchmark("roundtrip_http", TITLE)
def run(size: Size) -> Result:
    """Round trips per second of each HTTP agent, repetitions alternated (client in a child)."""
    rates: dict[str, list[float]] = run_child(
        "benchmarks.cases.roundtrip_http",
        str(size.round_trips),
        str(size.repeat),
        what="HTTP round-trip client",
    )
    result = Result("roundtrip_http", TITLE)
    for ours, baseline, metric in PAIRS:
        rows = {key: (AGENTS[key][0], "") for key in (ours, baseline)}
        version = "v2" if ours.endswith("_v2") else "v1"
        target = f"modefsm >= 0.8x the SDK dict agent's rate over HTTP ({version})"
        compare(result, metric, rows, rates, target, pair=(ours, baseline))
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


async def _connect(key: str, url: str, client: _Client) -> Any:
    """The SDK's v1 or v2 client (by *key*) over streamable HTTP, initialized."""
    from acp.experimental import v2  # noqa: PLC0415
    from acp.http import create_http_stream  # noqa: PLC0415 - the http extra

    conn: Any
    if not key.endswith("_v2"):
        conn = acp.connect_to_agent(cast("Any", client), create_http_stream(url))
        await asyncio.wait_for(conn.initialize(protocol_version=1), 60)
        return conn
    conn = v2.connect_to_agent(client, create_http_stream(url))
    info = v2.schema.Implementation(name="bench", version="0")
    await asyncio.wait_for(conn.initialize(protocol_version=2, info=info), 60)
    return conn


async def measure(round_trips: int, repeat: int) -> dict[str, list[float]]:
    """Round trips per second of every HTTP agent, *repeat* times each."""

    async def start(stack: contextlib.AsyncExitStack[Any], key: str) -> Session:
        url = await stack.enter_async_context(_server(key, Path(tmp)))
        client = _Client()
        conn = await _connect(key, url, client)
        stack.push_async_callback(conn.close)
        session = await conn.new_session(cwd=tmp)
        return conn, session.session_id, client

    _pin(0, 0)
    with tempfile.TemporaryDirectory() as tmp:
        pairs = tuple((ours, baseline) for ours, baseline, _metric in PAIRS)
        return await alternate(list(AGENTS), start, round_trips, repeat, pairs=pairs)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(measure(int(sys.argv[1]), int(sys.argv[2])))))
