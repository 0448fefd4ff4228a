"""A process of the cross-process settlement tests: one that asks, or one that restores.

``python -m tests.reliability.settle_worker ask STORE JOURNAL LOG N``: creates N sessions
(``sess_0`` ...) through :class:`~modefsm.protocol.ModeAgent` on the store *STORE* (a log
path, or a ``postgresql://`` URL whose worker log is *LOG*) with the conversation journal
*JOURNAL*, runs one ``edit`` tool call (``call_<n>``) in each, which the ``ask`` mode asks
the client about; the client never answers. Prints ``ready`` once every request is out,
then waits to be killed.

``python -m tests.reliability.settle_worker restore STORE JOURNAL LOG``: opens the store and
the journal, prints ``open``, then for each session id read from its input restores it
(``session/load``) and prints the updates its client got, as one JSON list (the SDK's
wire shapes). The read blocks, so two of these given the same line at once restore at once.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import orjson

from modefsm import preset
from modefsm.engine import ToolCall
from modefsm.log import ConversationStore, TransitionLog
from modefsm.protocol import ModeAgent
from modefsm.store import SessionStore, open_store


class Client:
    """The client side of the connection: keeps each update; never answers a permission."""

    def __init__(self, expected: int = 0) -> None:
        self.updates: list[dict[str, Any]] = []
        self.expected = expected
        self.asked = 0
        self.all_asked = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update.model_dump(mode="json", by_alias=True, exclude_none=True))

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        self.asked += 1
        if self.asked == self.expected:
            self.all_asked.set()
        await asyncio.Event().wait()


def say(line: str) -> None:
    """One line to the test, at once."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def opened(store: str, log: str) -> SessionStore:
    if store.startswith("postgresql://"):
        return open_store(store, log=TransitionLog.to_file(log))
    return open_store(Path(store))


async def ask(store: str, journal: str, log: str, count: int) -> None:
    conversation = ConversationStore(journal)
    agent = ModeAgent(preset("seed"), store=opened(store, log), conversation=conversation)
    client = Client(count)
    agent.on_connect(client)

    async def never() -> None:  # the tool never runs: it is never allowed
        raise AssertionError

    running = []
    for n in range(count):
        session_id = f"sess_{n}"
        agent.engine.new_session(session_id, cwd="/")
        call = ToolCall(f"call_{n}", "edit", None, "Edit notes.txt")
        running.append(asyncio.ensure_future(agent.run_tool(session_id, call, never)))
    await client.all_asked.wait()
    say("ready")
    await asyncio.Event().wait()


async def restore(store: str, journal: str, log: str) -> None:
    shared = opened(store, log)
    conversation = ConversationStore(journal)
    say("open")
    loop = asyncio.get_running_loop()
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            agent = ModeAgent(preset("seed"), store=shared, conversation=conversation)
            agent.replay_on_load = True  # as `modefsm serve`: the kept conversation is shown
            client = Client()
            agent.on_connect(client)
            await agent.load_session(cwd="/", session_id=line.strip())
            say(orjson.dumps(client.updates).decode())
    finally:
        shared.close()


def main(argv: list[str]) -> None:
    command, store, journal, log, *rest = argv
    if command == "ask":
        asyncio.run(ask(store, journal, log, int(rest[0])))
    else:
        asyncio.run(restore(store, journal, log))


if __name__ == "__main__":
    main(sys.argv[1:])
