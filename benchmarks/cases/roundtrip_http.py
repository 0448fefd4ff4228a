"""Benchmark 5b: mode round trips per second over streamable HTTP, ACP v1 and v2.

As :mod:`benchmarks.cases.roundtrip`, but each agent serves HTTP on 127.0.0.1 and the official
SDK client connects with ``acp.http.create_http_stream``:

- ``modefsm serve --http 127.0.0.1:0 --log FILE`` (modefsm's ASGI app on uvicorn: the
  ``Host``, ``Origin`` and bearer token checks (the client sends the token the server
  wrote), frame checks, bounds, negotiation, the shared engine, its log, the
  notifications), driven by
  the SDK's v1 client (``session/set_mode``) and by its v2 client
  (``session/set_config_option``, one ``config_option_update`` each);
- the baselines: for v1 the minimal dict agent served by the SDK's own ASGI app
  (``acp.http.asgi.create_asgi_app``), for v2 the same dict agent's v2 face behind the
  SDK's ``AgentProtocolRouter`` on that app (:mod:`benchmarks.baselines.dict_agent_v2_http`);
  each sends the same notifications and writes the same log line.

Each repetition starts every server afresh and measures each in turn (the order alternates).

The trust checks (``Host``, ``Origin``, the bearer token: the ASGI guard in front of
modefsm's routes) are also timed on their own, in this process: an ASGI call through the
guard against the same call without it, with the headers the SDK client sends with a
``session/set_mode``; their cost per request is compared with modefsm's v1 round trip
(target: at most 5% of it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import acp

from benchmarks.cases.roundtrip import Session, _Client, _pin, alternate, compare
from benchmarks.harness import ROOT, Result, Row, Size, benchmark, child_env, run_child

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
    costs = [asyncio.run(_check_cost(CHECKED_CALLS)) for _ in range(size.repeat)]
    result.add(Row(CHECKS, "Host, Origin and token checks (the ASGI guard)", "µs/request", costs))
    trip = 1e6 / result.row(METRIC, AGENTS["modefsm"][0]).median
    share = result.row(CHECKS, "Host, Origin and token checks (the ASGI guard)").median / trip
    result.target(
        "the trust checks <= 5% of modefsm's HTTP round trip (v1)",
        met=share <= 0.05,
        measured=f"{share:.2%} of {trip:,.0f} µs",
    )
    result.notes.append(
        f"one session per agent, {size.round_trips:,} sequential round trips per repetition, "
        f"{size.repeat} repetitions, fresh servers each; uvicorn, HTTP/1.1 + SSE on 127.0.0.1"
    )
    result.notes.append(
        f"trust checks: {CHECKED_CALLS:,} ASGI calls through the guard less as many without "
        "it, in this process, per repetition; one check per POST (the SSE stream is checked "
        "once, when it opens)"
    )
    return result


CHECKS = "trust checks per request"
CHECKED_CALLS = 20_000


async def _check_cost(calls: int) -> float:
    """µs per request that the guard adds to an ASGI call (a ``session/set_mode`` POST)."""
    from modefsm.protocol import Access, new_token  # noqa: PLC0415
    from modefsm.protocol.transport._http import _Guard  # noqa: PLC0415 - the checks alone

    token = new_token()
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"accept", b"*/*"),
        (b"accept-encoding", b"gzip, deflate"),
        (b"connection", b"keep-alive"),
        (b"user-agent", b"python-httpx/2"),
        (b"content-type", b"application/json"),
        (b"acp-connection-id", b"0" * 32),
        (b"acp-session-id", b"sess_" + b"0" * 32),
        (b"authorization", b"Bearer " + token.encode()),
        (b"content-length", b"96"),
    ]
    scope = {"type": "http", "method": "POST", "path": "/acp", "headers": headers}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        del scope, receive, send

    guarded = _Guard(app, Access(token))

    async def timed(call: Any) -> float:
        started = time.perf_counter()
        for _ in range(calls):
            await call(scope, None, None)
        return time.perf_counter() - started

    await timed(guarded)  # warm up
    bare = await timed(app)
    through = await timed(guarded)
    return max(through - bare, 0.0) * 1e6 / calls


@contextlib.asynccontextmanager
async def _server(key: str, tmp: Path) -> AsyncIterator[tuple[str, str | None]]:
    """Start the server of *key*; its URL and its bearer token (``None``: none)."""
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
        found = re.search(r"listening on (http://\S+)(?: \(token in (.+)\))?", line)
        if found is None:
            raise AssertionError(f"{key} did not start: {line!r}")
        token = Path(found.group(2)).read_text().strip() if found.group(2) else None  # noqa: ASYNC240
        _pin(process.pid, 1)
        yield found.group(1), token
    finally:
        process.terminate()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 15)
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _connect(key: str, url: str, token: str | None, client: _Client) -> Any:
    """The SDK's v1 or v2 client (by *key*) over streamable HTTP, initialized."""
    from acp.experimental import v2  # noqa: PLC0415
    from acp.http import create_http_stream  # noqa: PLC0415 - the http extra

    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    conn: Any
    if not key.endswith("_v2"):
        conn = acp.connect_to_agent(cast("Any", client), create_http_stream(url, headers=headers))
        await asyncio.wait_for(conn.initialize(protocol_version=1), 60)
        return conn
    conn = v2.connect_to_agent(client, create_http_stream(url, headers=headers))
    info = v2.schema.Implementation(name="bench", version="0")
    await asyncio.wait_for(conn.initialize(protocol_version=2, info=info), 60)
    return conn


async def measure(round_trips: int, repeat: int) -> dict[str, list[float]]:
    """Round trips per second of every HTTP agent, *repeat* times each."""

    async def start(stack: contextlib.AsyncExitStack[Any], key: str) -> Session:
        url, token = await stack.enter_async_context(_server(key, Path(tmp)))
        client = _Client()
        conn = await _connect(key, url, token, client)
        stack.push_async_callback(conn.close)
        session = await conn.new_session(cwd=tmp)
        return conn, session.session_id, client

    _pin(0, 0)
    with tempfile.TemporaryDirectory() as tmp:
        pairs = tuple((ours, baseline) for ours, baseline, _metric in PAIRS)
        return await alternate(list(AGENTS), start, round_trips, repeat, pairs=pairs)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(measure(int(sys.argv[1]), int(sys.argv[2])))))
