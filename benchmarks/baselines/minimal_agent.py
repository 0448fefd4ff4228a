"""The minimal agent the start-up benchmark compares ``modefsm serve`` with.

``python -m benchmarks.baselines.minimal_agent`` serves ACP over stdio with the official SDK and
nothing else: it imports ``acp`` (and so pydantic), answers ``initialize`` and
``session/new``, and imports no part of modefsm.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import acp
from acp import PROTOCOL_VERSION
from acp.schema import InitializeResponse, NewSessionResponse

__all__ = ["MinimalAgent", "main"]


class MinimalAgent:
    """``initialize`` and ``session/new``: what a client asks first."""

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        """Answer with the SDK's protocol version."""
        del protocol_version, kwargs
        return InitializeResponse(protocol_version=PROTOCOL_VERSION)

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        """A fresh ``sessionId``."""
        del cwd, kwargs
        return NewSessionResponse(session_id=f"sess_{uuid.uuid4().hex}")


def main() -> None:
    """Serve until standard input ends."""
    asyncio.run(acp.run_agent(MinimalAgent()))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
