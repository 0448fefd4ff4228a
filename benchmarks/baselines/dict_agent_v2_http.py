"""The v2 HTTP baseline: the dict agent's v2 face behind the SDK's router, on its ASGI app.

``python -m benchmarks.baselines.dict_agent_v2_http LOG`` serves the seed spec's mode on
streamable HTTP at 127.0.0.1 (a free port): the official SDK's ``create_asgi_app`` around
``AgentProtocolRouter(v2=...)`` on uvicorn, the mode in a dict
(:class:`benchmarks.baselines.handlers.DictHandler`, which writes the same JSON line per
change to LOG as modefsm). Each change sends one ``config_option_update``. Prints
``listening on URL`` on stderr once it listens; serves until terminated.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["serve_v2_baseline"]


class _V2DictAgent:
    """The v1 dict agent's handler behind v2 frames: one ``config_option_update`` a change."""

    def __init__(self, conn: Any, log: Path) -> None:
        from acp.experimental.v2 import schema as v2  # noqa: PLC0415

        from benchmarks.baselines.handlers import DictHandler  # noqa: PLC0415
        from modefsm import preset  # noqa: PLC0415
        from modefsm.engine import build_views  # noqa: PLC0415
        from modefsm.protocol.v2._render import config_options  # noqa: PLC0415

        self.v2 = v2
        self.conn = conn
        self.spec = preset("seed")
        views = build_views(self.spec)
        self.options = {m: config_options([view.mode_option]) for m, view in views.items()}
        self.announced = {m: v2.ConfigOptionUpdate(config_options=self.options[m]) for m in views}
        self.handler = DictHandler(self.spec, log, self._send)

    async def _send(self, session_id: str, update: Any) -> None:
        if update.session_update == "config_option_update":  # no current_mode_update in v2
            mode = update.config_options[0].current_value
            await self.conn.session_update(session_id=session_id, update=self.announced[mode])

    async def initialize(self, protocol_version: int, **kwargs: Any) -> Any:
        del protocol_version, kwargs
        info = self.v2.Implementation(name="dict", version="0")
        return self.v2.InitializeResponse(
            protocol_version=2, capabilities=self.v2.AgentCapabilities(), info=info
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> Any:
        del cwd, kwargs
        session_id = f"sess_{time.monotonic_ns()}"
        self.handler.new_session(session_id)
        options = self.options[self.spec.initial]
        return self.v2.NewSessionResponse(session_id=session_id, config_options=options)

    async def set_config_option(
        self, config_id: str, session_id: str, value: Any, **kwargs: Any
    ) -> Any:
        del config_id, kwargs
        await self.handler.set_mode(session_id, value)
        options = self.options[self.handler.mode(session_id)]
        return self.v2.SetSessionConfigOptionResponse(config_options=options)


def serve_v2_baseline(log: Path) -> None:
    """The v2 baseline: the dict agent's v2 face on the SDK's ASGI app behind its router.

    Prints ``listening on URL`` on stderr once it listens; serves until terminated.
    """
    from acp.experimental import AgentProtocolRouter  # noqa: PLC0415
    from acp.http.asgi import create_asgi_app  # noqa: PLC0415

    from benchmarks.baselines.dict_agent import serve_asgi  # noqa: PLC0415

    handlers: list[Any] = []

    def agent(conn: Any) -> _V2DictAgent:
        made = _V2DictAgent(conn, log)
        handlers.append(made.handler)
        return made

    app = create_asgi_app(AgentProtocolRouter(v2=agent))
    serve_asgi(app, ("127.0.0.1", 0), "v2 dict agent", handlers)


if __name__ == "__main__":
    serve_v2_baseline(Path(sys.argv[1]))
