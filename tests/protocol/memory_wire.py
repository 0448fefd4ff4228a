"""The SDK's in-memory transport, made to deliver like a pipe, and a raw client end on it.

For the tests that cancel a request after a chosen number of event-loop turns: a frame
crosses a pipe only after ``drain()`` gave the loop a turn, and the schedule counts on it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from acp._transport import Transport, memory_transport_pair


def pipe_pair() -> tuple[Transport, Transport]:
    """The agent's end and the client's end; each send of the agent's end gives the loop a
    turn first, as a pipe's ``drain()`` does."""
    agent_end, client_end = memory_transport_pair()
    send = agent_end.send

    async def send_like_a_pipe(message: dict[str, Any]) -> None:
        await asyncio.sleep(0)  # a pipe's drain() gives the loop a turn
        await send(message)

    agent_end.send = send_like_a_pipe  # type: ignore[method-assign]
    return agent_end, client_end


class RawClient:
    """The client's end: sends raw requests and keeps every frame the agent sent."""

    def __init__(self, end: Transport) -> None:
        self.end = end
        self.frames: list[dict[str, Any]] = []
        self._arrived = asyncio.Event()
        self.reader = asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        while (frame := await self.end.receive()) is not None:
            self.frames.append(frame)
            self._arrived.set()

    async def request(self, request_id: int, method: str, params: dict[str, Any]) -> None:
        await self.end.send(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        )

    async def answer(self, request_id: int) -> tuple[int, dict[str, Any]]:
        """The answer to *request_id* and its index in :attr:`frames` (each wait for a new
        frame bounded to 5 s)."""
        while True:
            for index, frame in enumerate(self.frames):
                if frame.get("id") == request_id and "method" not in frame:
                    return index, frame
            self._arrived.clear()
            await asyncio.wait_for(self._arrived.wait(), 5)
