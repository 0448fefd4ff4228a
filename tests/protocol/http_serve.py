"""`serve_http` of `modefsm serve`'s scripted agent with the bounds a test chooses.

``python -m tests.protocol.http_serve LOG [--first-frame S] [--header S] [--body S]
[--idle S] [--max-connections N] [--max-sockets N]``: the agent, engine and log of
`modefsm serve --http 127.0.0.1:0 --log LOG` (whose command line does not expose these
bounds), a new token in ``LOG.token`` (0600), and the same listening line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from modefsm import LogStore, SharedEngine, TransitionLog, new_token, preset, serve_http
from modefsm.cli._serve import ScriptedAgent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("log", type=Path)
    limits = {
        "--first-frame": "first_frame_seconds",
        "--header": "header_seconds",
        "--body": "body_seconds",
        "--idle": "idle_seconds",
    }
    for flag, name in limits.items():
        parser.add_argument(flag, type=float, dest=name)
    parser.add_argument("--max-connections", type=int)
    parser.add_argument("--max-sockets", type=int)
    args = parser.parse_args()
    given = {k: v for k, v in vars(args).items() if k != "log" and v is not None}
    spec = preset("seed")
    log = TransitionLog.to_file(args.log)
    engine = SharedEngine(spec, store=LogStore(log))
    token = new_token()
    token_file = args.log.with_name(args.log.name + ".token")
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, token.encode())
    os.close(fd)

    def factory(conn: Any) -> ScriptedAgent:
        agent = ScriptedAgent(spec, unstable=True, engine=engine)
        agent.on_connect(conn)
        return agent

    def ready(url: str) -> None:
        line = f"modefsm serve: listening on {url} (token in {token_file})\n"
        sys.stderr.write(line)
        sys.stderr.flush()

    try:
        asyncio.run(serve_http(factory, "127.0.0.1", 0, token=token, ready=ready, **given))
    finally:
        log.close()


if __name__ == "__main__":
    main()
