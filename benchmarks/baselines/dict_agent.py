"""A minimal ACP agent for benchmark 5: the mode of each session in a dict, over the SDK.

``python -m benchmarks.baselines.dict_agent [--notify] [--log FILE]`` serves the seed spec's modes
over stdio with the official SDK, as ``modefsm serve`` does, but with no state machine: a
``session/set_mode`` checks the mode id, stores it in a dict and answers. With
``--notify`` it first sends the same two notifications modefsm sends
(``current_mode_update`` and ``config_option_update``, the same SDK models); with
``--log`` it also appends the same JSON line per change as the baseline of benchmark 1.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from pathlib import Path
from typing import Any

import acp
from acp import PROTOCOL_VERSION, RequestError
from acp.schema import (
    InitializeResponse,
    NewSessionResponse,
    SetSessionModeResponse,
)

from benchmarks.baselines.handlers import DictHandler
from modefsm import preset
from modefsm.engine import build_views
from modefsm.protocol.v1 import config_options, mode_state

__all__ = ["DictAgent", "main"]


class DictAgent:
    """The minimal agent: ``initialize``, ``session/new``, ``session/set_mode``."""

    def __init__(self, *, notify: bool, log: Path | None) -> None:
        """Serve the seed spec; send notifications if *notify*; log to *log* if given."""
        self.spec = preset("seed")
        self.views = build_views(self.spec)
        self.conn: Any = None
        self.handler = DictHandler(self.spec, log, self._send if notify else None)

    def on_connect(self, conn: Any) -> None:
        """Called by the SDK with the connection to the client."""
        self.conn = conn

    async def _send(self, session_id: str, update: Any) -> None:
        await self.conn.session_update(session_id=session_id, update=update)

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        """``initialize``."""
        del protocol_version, kwargs
        return InitializeResponse(protocol_version=PROTOCOL_VERSION)

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        """``session/new`` in the initial mode."""
        del cwd, kwargs
        session_id = f"sess_{uuid.uuid4().hex}"
        self.handler.new_session(session_id)
        view = self.views[self.spec.initial]
        return NewSessionResponse(
            session_id=session_id,
            modes=mode_state(view),
            config_options=config_options([view.mode_option]),
        )

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse:
        """``session/set_mode``: check, store, (notify), answer."""
        del kwargs
        try:
            await self.handler.set_mode(session_id, mode_id)
        except KeyError:
            raise RequestError(-32002, "unknown session", {"uri": session_id}) from None
        except ValueError:
            raise RequestError(-32602, "invalid modeId", {"field": "modeId"}) from None
        return SetSessionModeResponse()


def main(argv: list[str] | None = None) -> int:
    """Serve the dict agent over stdio until stdin closes."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.baselines.dict_agent")
    parser.add_argument("--notify", action="store_true", help="send both mode notifications")
    parser.add_argument("--log", type=Path, help="append one JSON line per change")
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve the SDK's streamable HTTP app on uvicorn instead of stdio",
    )
    args = parser.parse_args(argv)
    if args.http:
        return _serve_http(args)
    agent = DictAgent(notify=args.notify, log=args.log)
    try:
        asyncio.run(acp.run_agent(agent))  # type: ignore[arg-type]
    finally:
        agent.handler.shutdown()
    return 0


def _serve_http(args: argparse.Namespace) -> int:
    """The SDK's own ASGI app (``acp.http.asgi.create_asgi_app``) on uvicorn, one agent per
    connection; prints ``listening on URL`` on stderr once it listens."""
    from acp.http.asgi import create_asgi_app  # noqa: PLC0415

    handlers: list[DictHandler] = []

    def factory(conn: Any) -> Any:
        agent = DictAgent(notify=args.notify, log=args.log)
        agent.on_connect(conn)
        handlers.append(agent.handler)
        return agent

    host, _colon, port = args.http.rpartition(":")
    serve_asgi(create_asgi_app(factory), (host, int(port)), "dict agent", handlers)
    return 0


def serve_asgi(app: Any, address: tuple[str, int], label: str, handlers: list[Any]) -> None:
    """Serve the ASGI *app* on uvicorn at *address* (``(host, port)``, port 0: any) until
    terminated; print ``{label}: listening on URL`` on stderr once it listens, and shut
    down each of *handlers* (filled while serving) at the end."""
    import socket  # noqa: PLC0415
    import sys  # noqa: PLC0415

    import uvicorn  # noqa: PLC0415

    sock = socket.create_server(address)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))

    async def announce() -> None:
        while not server.started:  # noqa: ASYNC110 - uvicorn offers only this flag
            await asyncio.sleep(0.01)
        url = f"http://{address[0]}:{sock.getsockname()[1]}/acp"
        print(f"{label}: listening on {url}", file=sys.stderr, flush=True)

    async def run() -> None:
        waiter = asyncio.ensure_future(announce())
        try:
            await server.serve(sockets=[sock])
        finally:
            waiter.cancel()

    try:
        asyncio.run(run())
    finally:
        for handler in handlers:
            handler.shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
