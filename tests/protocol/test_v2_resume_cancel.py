"""``$/cancel_request`` at seeded random points of a v2 ``session/resume`` with ``replayFrom``.

Each schedule builds, in a first life of the agent, a session whose mode is not restorable
(``bypassPermissions`` of the ``permission`` preset falls back to ``default``) and a kept
conversation; then a second life (a fresh agent on the same log and journal, served by the
v2 connection ``modefsm serve`` uses, on an in-memory transport whose sends yield as a
pipe's ``drain()`` does) gets ``session/resume`` with ``replayFrom: {"type": "start"}`` and,
a random number of loop turns later (each first waits for a journal read in flight, so that
a schedule does not depend on how soon a loaded machine runs that thread),
``$/cancel_request`` for it. Whatever the point:

- the answer is a success with the whole replay, the fallback announced once and ``idle``
  before it, and the fallback logged once; or ``-32800`` with at most a prefix of the
  replay before it and nothing restored, announced or logged;
- a later plain resume then restores the session once (never a second fallback record).

``MODEFSM_SOAK`` multiplies the number of schedules.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from acp.schema import AgentMessageChunk, TextContentBlock, UserMessageChunk

from modefsm import preset
from modefsm.cli._serve import ScriptedAgent, conversation_path
from modefsm.log import ConversationStore
from modefsm.protocol.v2._agent import connect_v2
from modefsm.store import open_store
from tests.conftest import read_log
from tests.protocol.memory_wire import RawClient, pipe_pair

SPEC = preset("permission")
SCHEDULES = 240 * (int(os.environ.get("MODEFSM_SOAK", "0") or 0) * 10 or 1)
MAX_TURNS = 40
TURNS = 3  # prompts kept in the conversation: a user message and an agent message each


class _Reads(ThreadPoolExecutor):
    """The loop's default executor (real threads), which also waits for the work in flight:
    the journal is read back in a worker thread, and a schedule's loop turns are to count
    the agent's steps, not how soon a loaded machine runs that thread."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.running: list[Future[Any]] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        self.running.append(future)
        return future

    async def settle(self) -> None:
        """Return once every piece of work submitted so far has finished."""
        while self.running:
            await asyncio.wrap_future(self.running.pop(0))


class _Quiet:
    async def session_update(self, session_id: str, update: Any) -> None:
        del session_id, update


async def _first_life(log: Path) -> str:
    store = open_store(log)
    conversation = ConversationStore(conversation_path(log))
    agent = ScriptedAgent(SPEC, store=store, conversation=conversation)
    agent.on_connect(_Quiet())
    session_id = (await agent.new_session(cwd="/")).session_id
    await agent.engine.set_mode(session_id, "bypassPermissions")
    for turn in range(TURNS):
        block = TextContentBlock(type="text", text=f"prompt {turn}")
        agent.record(
            session_id, UserMessageChunk(session_update="user_message_chunk", content=block)
        )
        reply = TextContentBlock(type="text", text=f"reply {turn}")
        agent.record(
            session_id, AgentMessageChunk(session_update="agent_message_chunk", content=reply)
        )
    store.close()
    conversation.close()
    return session_id


def _shown(frame: dict[str, Any]) -> tuple[str, Any]:
    update = frame["params"]["update"]
    kind = update["sessionUpdate"]
    if kind == "user_message":
        return kind, update["content"][0]["text"]
    if kind == "agent_message_chunk":
        return kind, update["content"]["text"]
    if kind == "agent_message":  # the whole-message update a replay sends before its chunks
        return kind, update["content"]
    if kind == "config_option_update":
        return kind, update["configOptions"][0]["currentValue"]
    return kind, update.get("state")


NO_CONTENT: list[Any] = []
REPLAY: list[tuple[str, Any]] = [
    item
    for turn in range(TURNS)
    for item in (
        ("user_message", f"prompt {turn}"),
        ("agent_message", NO_CONTENT),
        ("agent_message_chunk", f"reply {turn}"),
    )
]


async def _run(seed: int, log: Path, template: tuple[Path, str]) -> str:  # noqa: PLR0915 - one schedule, checked whole
    rng = random.Random(seed)
    first, session_id = template  # the first life's log, index and journal, copied
    for path in first.parent.glob(first.name + "*"):
        shutil.copyfile(path, log.with_name(log.name + path.name.removeprefix(first.name)))
    records = len(read_log(log))
    store = open_store(log)
    conversation = ConversationStore(conversation_path(log))
    agent = ScriptedAgent(SPEC, store=store, conversation=conversation)
    reads = _Reads()
    asyncio.get_running_loop().set_default_executor(reads)
    agent_end, client_end = pipe_pair()
    conn = connect_v2(agent, agent_end)
    listen = asyncio.ensure_future(conn.listen())
    client = RawClient(client_end)
    frames, answer, request = client.frames, client.answer, client.request

    try:
        await request(
            0, "initialize", {"protocolVersion": 2, "info": {"name": "t", "version": "0"}}
        )
        await answer(0)
        start = len(frames)
        resume = {"sessionId": session_id, "cwd": "/", "replayFrom": {"type": "start"}}
        await request(1, "session/resume", resume)
        for _ in range(rng.randrange(MAX_TURNS)):
            await reads.settle()  # a journal read in flight ends before the turn is counted
            await asyncio.sleep(0)
        await client_end.send(
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}}
        )
        end, reply = await answer(1)
        shown = [_shown(f) for f in frames[start:end]]
        after = read_log(log)
        if "result" in reply:
            assert shown == [*REPLAY, ("config_option_update", "default"), ("state_update", "idle")]
            assert reply["result"]["configOptions"][0]["currentValue"] == "default", seed
            assert len(after) == records + 1, seed
            assert (after[-1]["origin"], after[-1]["to_mode"]) == ("restore", "default"), seed
        else:
            assert reply["error"]["code"] == -32800, (seed, reply)
            assert shown == REPLAY[: len(shown)], seed  # a prefix of the replay, nothing else
            assert len(after) == records, seed
            assert session_id not in agent.engine, seed
        start = len(frames)
        await request(2, "session/resume", {"sessionId": session_id, "cwd": "/"})
        end, again = await answer(2)
        assert again["result"]["configOptions"][0]["currentValue"] == "default", seed
        restored = [r for r in read_log(log) if r["origin"] == "restore"]
        assert [r["to_mode"] for r in restored] == ["default"], seed
        fallback = [("config_option_update", "default")] if "error" in reply else []
        assert [_shown(f) for f in frames[start:end]] == [*fallback, ("state_update", "idle")]
        return "answered" if "result" in reply else "cancelled"
    finally:
        await client_end.close()
        await asyncio.wait_for(listen, 5)
        client.reader.cancel()
        reads.shutdown(wait=True)
        store.close()
        conversation.close()


@pytest.mark.parametrize("block", range(4))
async def test_cancel_at_random_points_of_a_resume_never_half_restores(tmp_path: Path, block: int):
    first = tmp_path / "first.jsonl"
    template = (first, await _first_life(first))
    per_block = SCHEDULES // 4
    outcomes = set()
    for n in range(per_block):
        seed = block * per_block + n
        outcomes.add(await _run(seed, tmp_path / f"log-{seed}.jsonl", template))
    assert outcomes == {"answered", "cancelled"}  # the schedules reach both ends
