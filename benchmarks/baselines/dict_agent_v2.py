"""The minimal ACP v2 agent for benchmark 5's v2 row: the mode of each session in a dict.

``python -m benchmarks.baselines.dict_agent_v2 [--log FILE]`` serves the seed spec's mode over stdio
with the official SDK's v2 agent side (``acp.experimental.v2.run_agent``), as
``modefsm serve`` serves a v2 client, but with no state machine: a
``session/set_config_option`` checks the ``configId`` and the value, stores the mode in a
dict (:class:`benchmarks.baselines.handlers.DictHandler`, which also writes the same JSON line per
change with ``--log``), sends the one notification v2 has for it (``config_option_update``
with the complete list, an SDK v2 model built once per mode) and answers the complete list.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from pathlib import Path
from typing import Any

from acp import RequestError
from acp.experimental import v2
from acp.experimental.v2 import schema as s2

from benchmarks.baselines.handlers import DictHandler
from modefsm import preset
from modefsm.engine import build_views
from modefsm.protocol.v2._render import config_options

__all__ = ["DictAgentV2", "main"]


class DictAgentV2:
    """The minimal v2 agent: ``initialize``, ``session/new``, ``session/set_config_option``."""

    def __init__(self, *, log: Path | None) -> None:
        """Serve the seed spec; log to *log* if given."""
        self.spec = preset("seed")
        views = build_views(self.spec)
        self.options = {mode: config_options([view.mode_option]) for mode, view in views.items()}
        self.updates = {
            mode: s2.ConfigOptionUpdate(config_options=options)
            for mode, options in self.options.items()
        }
        self.conn: Any = None
        self.handler = DictHandler(self.spec, log, self._send)

    def on_connect(self, conn: Any) -> None:
        """Called by the SDK with the connection to the client."""
        self.conn = conn

    async def _send(self, session_id: str, update: Any) -> None:
        if update.session_update == "config_option_update":  # v2 has no current_mode_update
            update = self.updates[self.handler.modes[session_id]]
            await self.conn.session_update(session_id=session_id, update=update)

    async def initialize(self, protocol_version: int, **kwargs: Any) -> s2.InitializeResponse:
        """``initialize``: protocol version 2."""
        del protocol_version, kwargs
        return s2.InitializeResponse(
            protocol_version=2,
            capabilities=s2.AgentCapabilities(),
            info=s2.Implementation(name="dict-agent-v2", version="0"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> s2.NewSessionResponse:
        """``session/new`` in the initial mode."""
        del cwd, kwargs
        session_id = f"sess_{uuid.uuid4().hex}"
        self.handler.new_session(session_id)
        return s2.NewSessionResponse(
            session_id=session_id, config_options=self.options[self.spec.initial]
        )

    async def set_config_option(
        self, config_id: str, session_id: str, value: Any, **kwargs: Any
    ) -> s2.SetSessionConfigOptionResponse:
        """``session/set_config_option``: check, store, notify, answer the complete list."""
        del kwargs
        if config_id != "mode":
            raise RequestError(-32602, "configId: unknown", {"field": "configId"})
        try:
            await self.handler.set_mode(session_id, value)
        except KeyError:
            raise RequestError(-32002, "unknown session", {"sessionId": session_id}) from None
        except ValueError:
            raise RequestError(-32602, "value: invalid", {"field": "value"}) from None
        return s2.SetSessionConfigOptionResponse(
            config_options=self.options[self.handler.modes[session_id]]
        )


def main(argv: list[str] | None = None) -> int:
    """Serve the v2 dict agent over stdio until stdin closes."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.baselines.dict_agent_v2")
    parser.add_argument("--log", type=Path, help="append one JSON line per change")
    args = parser.parse_args(argv)
    agent = DictAgentV2(log=args.log)
    try:
        asyncio.run(v2.run_agent(agent))
    finally:
        agent.handler.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
