"""Two `modefsm serve` processes acting on the same sessions at once: a seeded storm.

Real processes, each driven by the official SDK client, sharing one store (the embedded
file store, or a real PostgreSQL database with each worker's own file). Both processes
hold every session live; each client runs concurrent actors for :data:`STORM_SECONDS`:
``session/set_mode``, ``session/set_config_option``, ``session/resume``, and prompts, which
in a mode with a switch propose it (answered with a random offered option, cancelled, or
never: still pending when the clients hang up). What must hold (issue 19):

- every decision is made on the committed mode: ``modefsm replay --verify`` of the logs
  is clean (a rejection or a pending switch logged with a mode the session had left is a
  ``from_mode`` violation in a shared file);
- every prompt's reply names the mode its client was last told of (the adopted mode's
  ``current_mode_update`` precedes the reply);
- at the end, each process resumes each session in the mode of its last committed record.

``MODEFSM_SOAK=N`` runs N seeds per backend; ``MODEFSM_SEED=S`` runs seed S only.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
from pathlib import Path
from typing import Any

import acp
import pytest

from modefsm import preset
from tests.acp_client import TestClient, cancelled, select, spawn, text_block
from tests.reliability.harness import reproduce, seeds
from tests.store.two_processes import KINDS, backend

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

THIS = "tests/store/test_two_process_storm.py"
STORM_SECONDS = 30.0
TIMEOUT = 60.0
"""Seconds any single request may take before the storm calls it a hang."""
ACTORS = 2
"""Concurrent actors per client."""
SESSIONS = 3
HELD_MAX = 3
"""Permission requests a client leaves unanswered until it hangs up, at most."""
PRESETS = ("permission", "seed")
BUSY = "is being changed by another process; retry"
"""The -32603 a change answers after losing three races in a row (allowed, counted)."""
REPLY = re.compile(
    r"Mode (?P<a>[^:.]+)[:.].*|Approved: now in (?P<b>\S+) mode\."
    r"|Not switched \([a-z_]+\): still in (?P<c>\S+) mode\."
)


class Storm:
    """One client's side of the storm: its actors, its answers, and what it was told."""

    def __init__(self, name: str, conn: Any, client: TestClient, seed: int, spec: str) -> None:
        self.name = name
        self.conn = conn
        self.client = client
        self.rng = random.Random(seed)
        self.modes = preset(spec).mode_ids
        self.held: list[asyncio.Future[Any]] = []
        self.background: set[asyncio.Task[Any]] = set()
        self.counts = {"busy": 0, "refused": 0, "prompts": 0, "changes": 0, "held": 0}
        client.answer = self.answer

    async def answer(self, options: list[Any], tool_call: Any) -> Any:
        roll = self.rng.random()
        if roll < 0.15 and len(self.held) < HELD_MAX:
            waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self.held.append(waiter)  # never answered: the client hangs up with it open
            self.counts["held"] += 1
            return await waiter
        if roll < 0.25:
            return cancelled()
        return select(self.rng.choice([o.option_id for o in options]))

    async def act(self, sessions: list[str], until: float) -> None:
        while time.monotonic() < until:
            sid = self.rng.choice(sessions)
            roll = self.rng.random()
            try:
                if roll < 0.35:
                    mode = self.rng.choice(self.modes)
                    await asyncio.wait_for(
                        self.conn.set_session_mode(session_id=sid, mode_id=mode), TIMEOUT
                    )
                    self.counts["changes"] += 1
                elif roll < 0.5:
                    mode = self.rng.choice(self.modes)
                    await asyncio.wait_for(
                        self.conn.set_config_option(config_id="mode", session_id=sid, value=mode),
                        TIMEOUT,
                    )
                    self.counts["changes"] += 1
                elif roll < 0.85:
                    self.counts["prompts"] += 1
                    turn = asyncio.ensure_future(
                        self.conn.prompt(session_id=sid, prompt=[text_block("go")])
                    )
                    self.background.add(turn)
                    done, _ = await asyncio.wait({turn}, timeout=2.0)
                    if done:  # else its switch is held: it ends when the client hangs up
                        self.background.discard(turn)
                        assert turn.result().stop_reason in ("end_turn", "cancelled")
                else:  # resume reports the mode (load would replay the conversation too)
                    await asyncio.wait_for(
                        self.conn.resume_session(cwd=".", session_id=sid), TIMEOUT
                    )
            except acp.RequestError as exc:
                if exc.code == -32603 and BUSY in str(exc.data):
                    self.counts["busy"] += 1
                elif exc.code == -32602 and "field" in (exc.data or {}):
                    self.counts["refused"] += 1  # not allowed from the committed mode
                else:
                    raise

    def check_replies(self, start: int, view: dict[str, str]) -> int:
        """Every prompt reply names the mode this client was last told of; how many.

        *view* is every session's mode when the storm starts at frame *start*; from there
        only notifications move it (an answer built before a concurrent change may be
        written after that change's notifications).
        """
        view = dict(view)
        checked = 0
        for direction, message in self.client.frames[start:]:
            if direction != "incoming" or message.get("method") != "session/update":
                continue
            params = message["params"]
            update = params["update"]
            if update["sessionUpdate"] == "current_mode_update":
                view[params["sessionId"]] = update["currentModeId"]
            elif update["sessionUpdate"] == "agent_message_chunk":
                found = REPLY.fullmatch(update["content"]["text"])
                assert found, update
                told = found.group("a") or found.group("b") or found.group("c")
                where = (self.name, params["sessionId"], update["content"]["text"])
                assert told == view[params["sessionId"]], where
                checked += 1
        return checked


async def run_storm(backend: Any, seed: int, spec: str) -> dict[str, Any]:
    """Two processes, :data:`STORM_SECONDS` of concurrent actors; what each reported."""
    rng = random.Random(seed)
    async with contextlib.AsyncExitStack() as stack:
        storms = []
        for index, name in enumerate(("a", "b")):
            log, args = backend.command(index)
            conn, _process, client = await stack.enter_async_context(
                spawn(log, "--preset", spec, *args)
            )
            storms.append(Storm(name, conn, client, rng.randrange(2**32), spec))
        first, second = storms
        sessions = []
        for _ in range(SESSIONS):
            created = await asyncio.wait_for(first.conn.new_session(cwd="."), TIMEOUT)
            sessions.append(created.session_id)
            await asyncio.wait_for(
                second.conn.resume_session(cwd=".", session_id=created.session_id), TIMEOUT
            )
        marks = [storm.client.mark() for storm in storms]
        until = time.monotonic() + STORM_SECONDS
        await asyncio.gather(
            *(storm.act(sessions, until) for storm in storms for _ in range(ACTORS))
        )
        finals = {}
        for storm in storms:  # settled turns; the held ones stay open until the hang-up
            for turn in list(storm.background):
                if turn.done():
                    storm.background.discard(turn)
            for sid in sessions:
                loaded = await asyncio.wait_for(
                    storm.conn.resume_session(cwd=".", session_id=sid), TIMEOUT
                )
                finals[storm.name, sid] = loaded.modes.current_mode_id
        initial = dict.fromkeys(sessions, preset(spec).initial)
        replies = sum(
            storm.check_replies(mark, initial) for storm, mark in zip(storms, marks, strict=True)
        )
        counts = {k: sum(s.counts[k] for s in storms) for k in storms[0].counts}
    for storm in storms:  # the hang-up ended the held turns
        for turn in storm.background:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(turn, TIMEOUT)
    return {"sessions": sessions, "finals": finals, "replies": replies, **counts}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", seeds(1))
async def test_two_processes_acting_on_shared_sessions_keep_one_clean_history(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str, seed: int
) -> None:
    store = backend(request, kind, tmp_path)
    spec = PRESETS[(seed + (kind == "postgresql")) % len(PRESETS)]
    test = f"{THIS}::test_two_processes_acting_on_shared_sessions_keep_one_clean_history"
    try:
        result = await run_storm(store, seed, spec)
        report = store.replay()
        assert report[-1] == "RESULT  clean", report
        for (name, sid), mode in result["finals"].items():
            assert mode == store.committed(sid)[-1], (name, sid, mode)
        assert result["replies"] >= 10, result
        assert result["changes"] >= 50, result
    except AssertionError as exc:
        raise AssertionError(f"{reproduce(test, seed)} ({kind}, {spec})") from exc
