"""A raw NDJSON peer of `modefsm serve` over stdio, for frames the SDKs do not send."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.acp_client import start_serve

TIMEOUT = 30

INIT_V2 = {"protocolVersion": 2, "info": {"name": "raw", "version": "0"}}


def call(request_id: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def note(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


class Stdio:
    """A raw NDJSON peer of one `modefsm serve` process."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def write(self, value: Any) -> None:
        assert self.process.stdin is not None
        data = value if isinstance(value, bytes) else json.dumps(value).encode()
        self.process.stdin.write(data + b"\n")
        await self.process.stdin.drain()

    async def read(self) -> Any:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), TIMEOUT)
        assert line, "the agent closed stdout"
        return json.loads(line)


@contextlib.asynccontextmanager
async def stdio(log: Path, *args: str, version: int | None = 2) -> AsyncIterator[Stdio]:
    """`modefsm serve --log LOG ARGS...` initialized with *version* (``None``: not yet)."""
    process = await start_serve(log, *args, limit=2**27)
    peer = Stdio(process)
    try:
        if version is not None:
            params = INIT_V2 if version == 2 else {"protocolVersion": 1}
            await peer.write(call(0, "initialize", params))
            assert (await peer.read())["result"]["protocolVersion"] == version
        yield peer
    finally:
        assert process.stdin is not None
        process.stdin.close()
        await asyncio.wait_for(process.wait(), TIMEOUT)
    assert process.returncode == 0
