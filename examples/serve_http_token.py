"""An agent served over streamable HTTP and WebSocket, each request needing a bearer token.

``python examples/serve_http_token.py LOG TOKEN_FILE`` writes a new token to TOKEN_FILE
(created ``0600``; clients send ``Authorization: Bearer TOKEN``), prints the endpoint's URL
once it listens, and serves every connection from one engine and log until SIGINT or
SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from modefsm import LogStore, ModeAgent, SharedEngine, TransitionLog, new_token, preset, serve_http


def main(log_path: str, token_path: str) -> None:
    """Serve the seed preset at ``http://127.0.0.1:PORT/acp`` (a free port)."""
    token = new_token()
    fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(token + "\n")
    spec = preset("seed")
    log = TransitionLog.to_file(log_path)
    # one engine, log and history for all connections
    engine = SharedEngine(spec, store=LogStore(log))

    def connect(conn: Any) -> ModeAgent:
        agent = ModeAgent(spec, unstable=True, engine=engine)
        agent.on_connect(conn)
        return agent

    def ready(url: str) -> None:
        print(url, flush=True)

    try:
        asyncio.run(serve_http(connect, "127.0.0.1", 0, token=token, ready=ready))
    finally:
        log.close()


if __name__ == "__main__":
    try:
        log, token_file = sys.argv[1:]
    except ValueError:
        sys.exit("usage: python examples/serve_http_token.py LOG TOKEN_FILE")
    main(log, token_file)
