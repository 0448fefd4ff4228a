"""Seeded random schedules over N `modefsm serve` processes sharing one session store.

Each process is a real `python -m modefsm serve` driven by the official SDK client
(:class:`tests.acp_client.TestClient`). A schedule picks, step by step, a live process
and one of: a new session, ``session/load`` or ``session/resume`` (the same session is
taken up and changed in several processes), ``session/set_mode``,
``session/set_config_option``, a switch approved or rejected through
``session/request_permission`` (a prompt in ``architect``), ``session/close``; and, with
kills, a SIGKILL of a random process in the middle of a change, after which it is
started again. It keeps every session's acknowledged modes (``truth``): the store's
history must be exactly that, in order, and every process must restore every session to
its latest mode.

The store is given by a :class:`Backend`: the embedded file store (one ``--log`` file)
or PostgreSQL (``--store URL``, each process with its own ``--log`` file).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tests.acp_client import TestClient, select, spawn, text_block

TIMEOUT = 30.0
"""Seconds any single request may take before the test calls it a hang."""

MODES = ("ask", "architect", "code")
SWITCH_TARGETS = {"code": "code", "ask": "ask", "reject": None}
"""The seed spec's switch in ``architect``: option -> the mode it moves to."""


def soak_factor() -> int:
    """The ``MODEFSM_SOAK`` multiplier (1 without it)."""
    raw = os.environ.get("MODEFSM_SOAK", "")
    return max(1, int(raw)) if raw.strip() else 1


def seeds(count: int) -> list[int]:
    """``MODEFSM_SEED`` alone, else ``count`` x soak seeds."""
    fixed = os.environ.get("MODEFSM_SEED", "")
    return [int(fixed)] if fixed.strip() else list(range(count * soak_factor()))


def reproduce(test: str, seed: int) -> str:
    """The line a failing seeded test prints."""
    return f"seed {seed} failed; reproduce with: MODEFSM_SEED={seed} python -m pytest -q {test}"


class Backend(Protocol):
    """The store the processes share."""

    def command(self, slot: int) -> tuple[Path, tuple[str, ...]]:
        """Process *slot*'s ``--log`` file and its other arguments to ``modefsm serve``."""
        ...  # pragma: no cover

    def committed(self, session_id: str) -> list[str]:
        """The session's committed modes, ``seq`` 1 to n, as the store holds them now."""
        ...  # pragma: no cover

    def ended(self, pid: int) -> bool:
        """Whether nothing the killed process *pid* sent can still change the store."""
        ...  # pragma: no cover


async def set_mode(conn: Any, sid: str, mode: str) -> None:
    await asyncio.wait_for(conn.set_session_mode(session_id=sid, mode_id=mode), TIMEOUT)


async def load(conn: Any, sid: str) -> str:
    loaded = await asyncio.wait_for(conn.load_session(cwd=".", session_id=sid), TIMEOUT)
    mode: str = loaded.modes.current_mode_id
    return mode


@dataclass
class Slot:
    """One `modefsm serve` process and what the test knows of it."""

    number: int
    conn: Any = None
    client: TestClient | None = None
    process: asyncio.subprocess.Process | None = None
    live: set[str] = field(default_factory=set)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    failed: BaseException | None = None  # why the process never became ready

    async def until_ready(self) -> None:
        """Wait until the process answered ``initialize``; fail at once if it cannot.

        Raises:
            AssertionError: the process ended (or failed to start) before it was ready.
        """
        assert self.task is not None
        ready = asyncio.ensure_future(self.ready.wait())
        try:
            await asyncio.wait({ready, self.task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if not self.ready.is_set():
            raise AssertionError(f"process {self.number} never became ready: {self.failed!r}")


async def _run_slot(slot: Slot, command: tuple[Path, tuple[str, ...]]) -> None:
    log, args = command
    try:
        async with spawn(log, *args) as (conn, process, client):
            slot.conn, slot.process, slot.client = conn, process, client
            slot.ready.set()
            await slot.done.wait()
    except Exception as exc:  # a killed process's connection fails: expected
        if not slot.ready.is_set():
            slot.failed = exc


class Schedule:
    """A seeded random schedule over N processes, with a model of every session's history.

    Args:
        backend: the shared store.
        processes: how many `modefsm serve` processes.
        seed: the random seed (the whole schedule follows from it).
        on_kill: called after each kill has been settled (for extra checks).
    """

    def __init__(
        self,
        backend: Backend,
        processes: int,
        seed: int,
        on_kill: Callable[[], None] | None = None,
    ) -> None:
        self.backend = backend
        self.rng = random.Random(seed)
        self.slots = [Slot(number) for number in range(processes)]
        self.truth: dict[str, list[str]] = {}  # every session's acknowledged modes
        self.kills = 0
        self.switches = {"code": 0, "ask": 0, "reject": 0}
        self.on_kill = on_kill

    def start(self, slot: Slot) -> None:
        slot.live.clear()
        slot.conn = slot.process = slot.client = None
        slot.done, slot.ready = asyncio.Event(), asyncio.Event()
        slot.task = asyncio.create_task(_run_slot(slot, self.backend.command(slot.number)))

    async def open(self) -> None:
        for slot in self.slots:
            self.start(slot)
        for slot in self.slots:
            await slot.until_ready()

    async def ready_slot(self) -> Slot:
        ready = [s for s in self.slots if s.ready.is_set()]
        if not ready:
            waits = [asyncio.create_task(s.until_ready()) for s in self.slots]
            done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            next(iter(done)).result()  # a process that never became ready fails here
            ready = [s for s in self.slots if s.ready.is_set()]
        return self.rng.choice(ready)

    async def ensure_live(self, slot: Slot, sid: str) -> None:
        if sid not in slot.live:
            if self.rng.random() < 0.5:
                mode = await load(slot.conn, sid)
            else:
                resumed = await asyncio.wait_for(
                    slot.conn.resume_session(cwd=".", session_id=sid), TIMEOUT
                )
                mode = resumed.modes.current_mode_id
            assert mode == self.truth[sid][-1], (sid, mode, self.truth[sid])
            slot.live.add(sid)

    def _moved(self, sid: str, target: str | None) -> None:
        if target is not None and target != self.truth[sid][-1]:
            self.truth[sid].append(target)

    async def switch(self, slot: Slot, sid: str) -> None:
        """Bring the session to ``architect`` here, prompt, answer the proposed switch."""
        await set_mode(slot.conn, sid, "architect")  # a stale process adopts first
        self._moved(sid, "architect")
        option = self.rng.choice(sorted(SWITCH_TARGETS))
        assert slot.client is not None

        async def answer(options: list[Any], tool_call: Any) -> Any:
            assert sorted(o.option_id for o in options) == sorted(SWITCH_TARGETS)
            return select(option)

        slot.client.answer = answer
        try:
            response = await asyncio.wait_for(
                slot.conn.prompt(session_id=sid, prompt=[text_block("plan")]), TIMEOUT
            )
        finally:
            slot.client.answer = None
        assert response.stop_reason == "end_turn"
        self.switches[option] += 1
        self._moved(sid, SWITCH_TARGETS[option])

    async def step(self) -> None:
        slot = await self.ready_slot()
        roll = self.rng.random()
        if not self.truth or roll < 0.1:
            sid = (await asyncio.wait_for(slot.conn.new_session(cwd="."), TIMEOUT)).session_id
            self.truth[sid] = ["ask"]
            slot.live.add(sid)
            return
        sid = self.rng.choice(sorted(self.truth))
        if roll < 0.2:
            await self.ensure_live(slot, sid)
            return
        if roll < 0.25 and sid in slot.live:
            await asyncio.wait_for(slot.conn.close_session(session_id=sid), TIMEOUT)
            slot.live.discard(sid)
            return
        await self.ensure_live(slot, sid)
        if roll < 0.4:
            await self.switch(slot, sid)
            return
        target = self.rng.choice(MODES)
        if roll < 0.7:
            await set_mode(slot.conn, sid, target)
        else:
            await asyncio.wait_for(
                slot.conn.set_config_option(config_id="mode", session_id=sid, value=target),
                TIMEOUT,
            )
        self._moved(sid, target)

    async def kill_one(self) -> None:
        """SIGKILL a process in the middle of a change; settle what the store says of it."""
        slot = await self.ready_slot()
        if not slot.live:
            await self.step()
            return
        sid = self.rng.choice(sorted(slot.live))
        target = self.rng.choice([m for m in MODES if m != self.truth[sid][-1]])
        request = asyncio.create_task(set_mode(slot.conn, sid, target))
        await asyncio.sleep(self.rng.uniform(0, 0.01))
        assert slot.process is not None
        pid = slot.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        acknowledged = False
        with contextlib.suppress(Exception):
            await asyncio.wait_for(request, TIMEOUT)
            acknowledged = True
        # a statement the process sent before it died may still commit: wait for its end
        for _ in range(round(TIMEOUT / 0.01)):
            if self.backend.ended(pid):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError(f"process {pid} still holds the store {TIMEOUT:g} s after SIGKILL")
        committed = self.backend.committed(sid)
        expected = (sid, committed, self.truth[sid], target)
        if acknowledged:  # nothing a client was told is lost
            assert committed == [*self.truth[sid], target], expected
        else:  # written ahead before the kill, or not written at all
            assert committed in (self.truth[sid], [*self.truth[sid], target]), expected
        self.truth[sid] = committed
        self.kills += 1
        slot.done.set()
        if slot.task is not None:
            await asyncio.wait_for(slot.task, TIMEOUT)
        self.start(slot)
        if self.on_kill is not None:
            self.on_kill()

    async def check(self) -> None:
        """Every process restores every session to its latest mode."""
        for slot in self.slots:
            await slot.until_ready()
            for sid, modes in self.truth.items():
                assert await load(slot.conn, sid) == modes[-1], sid

    async def close(self) -> None:
        for slot in self.slots:
            slot.done.set()
        for slot in self.slots:
            if slot.task is not None:
                await asyncio.wait_for(slot.task, TIMEOUT)


async def run_schedule(schedule: Schedule, steps: int, kills: int) -> None:
    """Open the processes, run *steps* steps with *kills* kills spread among them, check."""
    await schedule.open()
    try:
        every = max(1, steps // max(1, kills))
        for number in range(steps):
            await schedule.step()
            if kills and number % every == every - 1 and schedule.kills < kills:
                await schedule.kill_one()
        while schedule.kills < kills:
            await schedule.kill_one()
        await schedule.check()
    finally:
        await schedule.close()
    for sid, modes in schedule.truth.items():
        assert schedule.backend.committed(sid) == modes, sid
