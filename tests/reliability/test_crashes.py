"""Crashes: SIGKILL ``modefsm serve`` at random points of a busy run, many times over one log.

Durability policy under test (docs/durability.md): each record is one unbuffered
``write`` on an ``O_APPEND`` file *before* its change takes effect, so a killed process
loses nothing it acknowledged; ``--fsync`` also syncs each record to disk (power loss).
After every kill: every line of the log but the last parses; every change the client was
told about (a notification, or a success response) is in the log; and after a restart,
``session/load`` restores exactly the mode the log ends with, numbering goes on without a
gap, and a torn last line never swallows the next record.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import acp
import pytest

from modefsm import preset
from modefsm.replay import last_points
from tests.acp_client import TestClient, select, spawn, text_block

from .harness import TIMEOUT, raw_serve, reproduce, seeds, verify_log_after_crash

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

SEED = preset("seed")
THIS = "tests/reliability/test_crashes.py"
RUNS = 4
KILLS_PER_RUN = 5


@dataclass
class CrashClient(TestClient):
    """Answers every permission request at once, by a seeded choice."""

    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        TestClient.__init__(self)

    async def request_permission(
        self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any
    ) -> Any:
        return select(self.rng.choice(("code", "ask", "reject")))


@contextlib.asynccontextmanager
async def agent(log: Path, client: TestClient, *args: str) -> AsyncIterator[tuple[Any, Any]]:
    """Spawn ``modefsm serve`` with the SDK client; a SIGKILLed agent may leave the
    client's pipe broken, which closing the connection then reports: that is expected."""
    killed = False
    try:
        async with spawn(log, *args, client=client) as (conn, process, _client):
            yield conn, process
            killed = process.returncode == -signal.SIGKILL
    except ConnectionError:
        if not killed:
            raise


def notified(client: TestClient, sid: str, start: int, end: int | None = None) -> list[str]:
    """The modes announced for *sid* in the client's frames[start:end]."""
    return [
        m["params"]["update"]["currentModeId"]
        for d, m in client.frames[start:end]
        if d == "incoming"
        and m.get("method") == "session/update"
        and m["params"]["sessionId"] == sid
        and m["params"]["update"]["sessionUpdate"] == "current_mode_update"
    ]


Acked = list[tuple[str, int, int]]
"""Per session: (mode asked for, frame mark when sent, frame mark when answered)."""


async def work(conn: Any, client: TestClient, sid: str, rng: random.Random, acked: Acked):
    """Change *sid* as fast as possible until the connection dies; note each success."""
    while True:
        mode = rng.choice(SEED.mode_ids)
        sent = client.mark()
        try:
            if rng.random() < 0.5:
                await conn.set_session_mode(session_id=sid, mode_id=mode)
            elif rng.random() < 0.6:
                await conn.set_config_option(config_id="mode", session_id=sid, value=mode)
            else:
                await conn.prompt(session_id=sid, prompt=[text_block("go")])
                continue
        except (ConnectionError, acp.RequestError):
            return
        acked.append((mode, sent, client.mark()))


def check_round(log: Path, client: TestClient, mark: int, before: dict[str, int], acked):
    """After a kill: what the client was told is logged, in order; the log verifies."""
    after = verify_log_after_crash(log)
    for sid, successes in acked.items():
        logged = [r["to_mode"] for r in after.changes(sid)][before.get(sid, 0) :]
        told = notified(client, sid, mark)
        # every announced change is logged, in order (the log may hold a few more:
        # changes written ahead whose notifications the kill stopped)
        assert logged[: len(told)] == told, (sid, told, logged)
        start = [r["to_mode"] for r in after.commits(sid)][before.get(sid, 0)]
        seen = [start, *told]
        for mode, sent, answered in successes:
            # a success response came after the notification of the change it made
            first = len(notified(client, sid, mark, sent))
            last = len(notified(client, sid, mark, answered))
            assert mode in seen[first : last + 1], (sid, mode, seen, first, last)


async def crash_run(log: Path, seed: int) -> int:
    """Run KILLS_PER_RUN rounds of busy work, each ended by SIGKILL; return kills survived."""
    rng = random.Random(seed)
    known: dict[str, str] = {}  # sessionId -> the mode the log ends with
    kills = 0
    for round_number in range(KILLS_PER_RUN):
        client = CrashClient(rng=random.Random(rng.random()))
        fsync = ("--fsync",) if round_number % 2 else ()
        before = verify_log_after_crash(log)
        changes_before = {sid: len(before.changes(sid)) for sid in known}
        async with agent(log, client, *fsync) as (conn, process):
            # everything acknowledged before the last kill comes back, exactly as logged
            await assert_restored(conn, known)
            sids = list(known)
            sids += [(await conn.new_session(cwd=".")).session_id for _ in range(2)]
            mark = client.mark()
            acked: dict[str, Acked] = {sid: [] for sid in sids}
            workers = [
                asyncio.create_task(
                    work(conn, client, sid, random.Random(rng.random()), acked[sid])
                )
                for sid in sids
                for _ in range(2)
            ]
            await asyncio.sleep(rng.uniform(0.02, 0.3))
            os.kill(process.pid, signal.SIGKILL)
            await asyncio.wait_for(process.wait(), TIMEOUT)
            # the SDK client fails its pending requests on EOF, but a request it was
            # writing when the pipe broke can wait forever client-side: stop those
            _done, stuck = await asyncio.wait(workers, timeout=5)
            for worker in stuck:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        kills += 1
        check_round(log, client, mark, changes_before, acked)
        points = last_points([log])
        known = {sid: points[sid].mode for sid in sids}
    async with agent(log, CrashClient()) as (conn, _process):  # after the last kill, too
        await assert_restored(conn, known)
    return kills


async def assert_restored(conn: Any, known: dict[str, str]) -> None:
    for sid, mode in known.items():
        response = await asyncio.wait_for(conn.load_session(cwd=".", session_id=sid), TIMEOUT)
        assert response.modes.current_mode_id == mode, (sid, mode)


@pytest.mark.parametrize("seed", seeds(RUNS))
async def test_sigkill_at_random_points_loses_nothing_acknowledged(tmp_path: Path, seed: int):
    log = tmp_path / "log.jsonl"
    try:
        kills = await crash_run(log, seed)
    except BaseException as exc:
        exc.add_note(reproduce(THIS, seed))
        raise
    assert kills == KILLS_PER_RUN


class TestTornLastLine:
    """A crash mid-write leaves a torn last line; the reader skips it, and appending goes on."""

    async def write_some(self, log: Path) -> tuple[str, list[str]]:
        async with raw_serve(log) as peer:
            sid = await peer.new_session()
            for mode in ("architect", "code", "ask"):
                assert "result" in await peer.set_mode(sid, mode)
        return sid, ["ask", "architect", "code", "ask"]

    @pytest.mark.parametrize("cut", [1, 10, 50, -2], ids=lambda c: f"cut{c}")
    async def test_restart_after_a_torn_line_keeps_the_next_record(self, tmp_path: Path, cut):
        log = tmp_path / "log.jsonl"
        sid, _modes = await self.write_some(log)
        data = log.read_bytes()
        start = data.rstrip(b"\n").rfind(b"\n") + 1  # the last record's first byte
        end = len(data) + cut if cut < 0 else start + cut
        log.write_bytes(data[:end])  # the last record, torn
        torn = verify_log_after_crash(log)
        assert torn.torn is not None
        assert last_points([log])[sid].mode == "code"  # the torn `ask` never happened
        async with raw_serve(log) as peer:
            assert await peer.current_mode(sid) == "code"
            assert "result" in await peer.set_mode(sid, "architect")
        async with raw_serve(log) as peer:
            assert await peer.current_mode(sid) == "architect"
        healed = verify_log_after_crash(log)
        assert (healed.torn, healed.repaired) == (None, 1)
        assert [(r["seq"], r["to_mode"]) for r in healed.commits(sid)] == [
            (1, "ask"),
            (2, "architect"),
            (3, "code"),
            (4, "architect"),
        ]

    async def test_a_whole_record_without_its_newline_counts(self, tmp_path: Path):
        log = tmp_path / "log.jsonl"
        sid, _modes = await self.write_some(log)
        log.write_bytes(log.read_bytes()[:-1])
        assert last_points([log])[sid].mode == "ask"
        async with raw_serve(log) as peer:
            assert await peer.current_mode(sid) == "ask"
            assert "result" in await peer.set_mode(sid, "code")
        healed = verify_log_after_crash(log)
        assert (healed.torn, healed.repaired) == (None, 0)  # the line was whole
        assert log.read_bytes().count(b'"modefsm.log_repaired"') == 1
        assert [(r["seq"], r["to_mode"]) for r in healed.commits(sid)][-2:] == [
            (4, "ask"),
            (5, "code"),
        ]

    async def test_a_log_cut_at_every_byte_restores_the_last_whole_record(self, tmp_path: Path):
        log = tmp_path / "log.jsonl"
        sid, modes = await self.write_some(log)
        data = log.read_bytes()
        # a record is whole once its closing brace is in; the newline is not needed
        ends = [i for i, byte in enumerate(data) if byte == ord("\n")][1:]  # after the header
        for cut in range(ends[0], len(data) + 1):
            log.write_bytes(data[:cut])
            whole = sum(1 for end in ends if end <= cut)
            assert len(verify_log_after_crash(log).commits(sid)) == whole, cut
            assert last_points([log])[sid].mode == modes[whole - 1], cut
