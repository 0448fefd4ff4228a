"""Concurrency: many sessions and every kind of request in flight at once over one stdio pipe.

Each schedule is a seeded plan: per session, a random sequence of ``set_mode``,
``set_config_option``, prompts (in ``architect`` a prompt proposes the seed switch),
``session/cancel``, ``session/load`` and ``session/close``, each sent without waiting for
the previous one, with the client answering permission requests by a seeded plan (allow,
reject, an option that was not offered, cancelled, held until cancel, never). Then, per
session: notifications follow commit order, every committed change is logged once and
announced once per channel, each success response comes after the notifications of the
change it made, every proposed switch ends in exactly the records its answer allows, the
final mode equals the one the log gives, and no request hangs.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import acp
import pytest

from modefsm import LogStore, preset
from modefsm.replay import last_points
from tests.acp_client import TestClient, cancelled, select, serve, text_block

from .harness import TIMEOUT, assert_sequences, read_log, reproduce, seeds

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

SEED = preset("seed")
MODES = (*SEED.mode_ids, "does-not-exist")
ANSWERS = ("code", "ask", "reject", "bogus", "cancelled", "hold", "never")
OPS = ("set_mode", "set_mode", "set_config", "prompt", "prompt", "cancel", "load", "close")
SESSIONS = 4
OPS_PER_SESSION = 14
SCHEDULES = 12
THIS = "tests/reliability/test_concurrency.py"


@dataclass
class Plan:
    """A seeded schedule: per session, ops with start delays, and permission answers."""

    ops: list[list[tuple[str, str, float]]]
    answers: list[list[tuple[str, float]]]

    @classmethod
    def draw(cls, seed: int) -> Plan:
        rng = random.Random(seed)
        ops = []
        answers = []
        for _ in range(SESSIONS):
            steps = []
            for _ in range(OPS_PER_SESSION):
                op = rng.choice(OPS)
                # bias towards architect so that prompts propose switches
                mode = "architect" if rng.random() < 0.4 else rng.choice(MODES)
                steps.append((op, mode, rng.uniform(0, 0.012)))
            ops.append(steps)
            answers.append(
                [(rng.choice(ANSWERS), rng.uniform(0, 0.02)) for _ in range(OPS_PER_SESSION)]
            )
        return cls(ops, answers)


@dataclass
class ScheduleClient(TestClient):
    """Answers the k-th permission request of each session by the plan."""

    plan: Plan | None = None
    index: dict[str, int] = field(default_factory=dict)
    answered: dict[str, str] = field(default_factory=dict)  # toolCallId -> answer
    cancels: dict[str, asyncio.Event] = field(default_factory=dict)
    order: dict[str, int] = field(default_factory=dict)  # sessionId -> its plan

    def __post_init__(self) -> None:
        TestClient.__init__(self)

    async def request_permission(
        self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any
    ) -> Any:
        assert self.plan is not None
        k = self.index.get(session_id, 0)
        self.index[session_id] = k + 1
        plan = self.plan.answers[self.order[session_id]]
        answer, delay = plan[k % len(plan)]
        self.answered[tool_call.tool_call_id] = answer
        await asyncio.sleep(delay)
        if answer == "hold":  # a compliant client answers `cancelled` once it cancels
            await self.cancels.setdefault(session_id, asyncio.Event()).wait()
            return cancelled()
        if answer == "never":  # a client that relies on the agent to end the turn
            await asyncio.Event().wait()
        if answer == "cancelled":
            return cancelled()
        return select("not-offered" if answer == "bogus" else answer)


@dataclass
class Outcome:
    """What the client saw of one request: its tag, frame marks, and how it ended."""

    session: int
    op: str
    mode: str
    sent: int
    result: Any = None
    error: acp.RequestError | None = None


async def run_op(conn: Any, client: ScheduleClient, *, sid: str, op: str, mode: str, tag: str):
    outcome = Outcome(0, op, mode, client.mark())
    try:
        if op == "set_mode":
            outcome.result = await conn.set_session_mode(session_id=sid, mode_id=mode, op=tag)
        elif op == "set_config":
            outcome.result = await conn.set_config_option(
                config_id="mode", session_id=sid, value=mode, op=tag
            )
        elif op == "prompt":
            outcome.result = await conn.prompt(
                session_id=sid, prompt=[text_block(f"plan {tag}")], op=tag
            )
        elif op == "cancel":
            client.cancels.setdefault(sid, asyncio.Event()).set()
            await conn.cancel(session_id=sid)
        elif op == "load":
            outcome.result = await conn.load_session(cwd=".", session_id=sid, op=tag)
        elif op == "close":
            client.cancels.setdefault(sid, asyncio.Event()).set()
            outcome.result = await conn.close_session(session_id=sid, op=tag)
    except acp.RequestError as exc:
        outcome.error = exc
    return outcome


async def run_schedule(log_path: Path, seed: int) -> None:  # noqa: C901, PLR0912, PLR0915
    plan = Plan.draw(seed)
    client = ScheduleClient(plan=plan)
    async with serve(log_path, client=client) as (conn, client_):
        assert client_ is client
        sids = [(await conn.new_session(cwd=".")).session_id for _ in range(SESSIONS)]
        client.order.update({sid: i for i, sid in enumerate(sids)})
        tasks: list[tuple[str, asyncio.Task[Outcome]]] = []

        async def launch(i: int, sid: str) -> None:
            for k, (op, mode, delay) in enumerate(plan.ops[i]):
                await asyncio.sleep(delay)
                tag = f"{i}.{k}"
                tasks.append(
                    (
                        tag,
                        asyncio.create_task(
                            run_op(conn, client, sid=sid, op=op, mode=mode, tag=tag)
                        ),
                    )
                )

        await asyncio.gather(*(launch(i, sid) for i, sid in enumerate(sids)))
        # teardown: cancel every session until every request has ended
        deadline = asyncio.get_running_loop().time() + TIMEOUT
        while True:
            for sid in sids:
                client.cancels.setdefault(sid, asyncio.Event()).set()
                await conn.cancel(session_id=sid)
            _done, pending = await asyncio.wait([t for _, t in tasks], timeout=0.5)
            if not pending:
                break
            if asyncio.get_running_loop().time() > deadline:
                hung = [tag for tag, t in tasks if not t.done()]
                pytest.fail(f"requests hang after session/cancel: {hung}")
        outcomes = {tag: t.result() for tag, t in tasks}
        finals = {}
        for sid in sids:
            response = await asyncio.wait_for(conn.load_session(cwd=".", session_id=sid), TIMEOUT)
            finals[sid] = response.modes.current_mode_id
        frames = list(client.frames)

    log = read_log(log_path)
    assert log.torn is None
    assert_sequences(log)
    incoming = [(i, m) for i, (d, m) in enumerate(frames) if d == "incoming"]
    out_ids = {
        m["params"]["_meta"]["op"]: m["id"]
        for d, m in frames
        if d == "outgoing" and "id" in m and (m.get("params") or {}).get("_meta")
    }
    response_at = {m["id"]: i for i, m in incoming if "method" not in m}
    notified = [i for i, m in incoming if m.get("method") == "session/update"]
    ordinal = {i: n for n, i in enumerate(notified)}
    points = last_points([log_path])

    for sid in sids:
        updates = [
            (i, m["params"]["update"])
            for i, m in incoming
            if m.get("method") == "session/update" and m["params"]["sessionId"] == sid
        ]
        by_mode = [
            (i, u["currentModeId"])
            for i, u in updates
            if u["sessionUpdate"] == "current_mode_update"
        ]
        by_option = [
            (i, u["configOptions"])
            for i, u in updates
            if u["sessionUpdate"] == "config_option_update"
        ]
        logged = [r["to_mode"] for r in log.changes(sid)]
        # every committed change: logged once, announced once per channel, in commit order
        assert [mode for _, mode in by_mode] == logged, (sid, by_mode, logged)
        assert [o[0]["currentValue"] for _, o in by_option] == logged
        assert all(len(o) == 1 and len(o[0]["options"]) == 3 for _, o in by_option)
        # the two notifications of one change are adjacent among all notifications (a
        # response to another request may be written between them)
        for (i, mode), (j, options) in zip(by_mode, by_option, strict=True):
            assert ordinal[j] == ordinal[i] + 1, (sid, mode, frames[i : j + 1])
            assert options[0]["currentValue"] == mode
        # final mode: what the client was told == what the log says == what load reports
        told = by_mode[-1][1] if by_mode else SEED.initial
        assert finals[sid] == told == points[sid].mode, (sid, finals[sid], told, points[sid])

        def modes_between(start: int, end: int, by_mode=by_mode) -> set[str]:
            known = [SEED.initial, *(mode for _, mode in by_mode)]
            first = sum(1 for i, _ in by_mode if i < start)
            last = sum(1 for i, _ in by_mode if i < end)
            return set(known[first : last + 1])

        # a success response follows the notifications of the change it made
        i = sids.index(sid)
        setmode_ok: Counter[str] = Counter()
        for k in range(len(plan.ops[i])):
            tag = f"{i}.{k}"
            outcome = outcomes[tag]
            if outcome.error is not None:
                # -32002 when the session is closed; -32602 only for the unknown mode
                codes = {-32002}
                if outcome.op in ("set_mode", "set_config") and outcome.mode == "does-not-exist":
                    codes.add(-32602)
                assert outcome.error.code in codes, (tag, outcome.op, outcome.error)
                continue
            if outcome.op not in ("set_mode", "set_config", "load"):
                continue
            assert outcome.mode != "does-not-exist" or outcome.op == "load"
            window = modes_between(outcome.sent, response_at[out_ids[tag]])
            if outcome.op == "load":
                reported = outcome.result.modes.current_mode_id
                assert reported in window, (tag, "load answered", reported, "window", window)
            else:
                assert outcome.mode in window, (tag, outcome.op, outcome.mode, window)
                setmode_ok[outcome.mode] += 1
        # a client change is committed only by a request that succeeded
        committed = Counter(r["to_mode"] for r in log.changes(sid) if r["origin"] != "switch_mode")
        assert all(committed[m] <= setmode_ok[m] for m in committed), (committed, setmode_ok)
        rejected = [r for r in log.rejections() if r["session_id"] == sid]
        unknown = sum(1 for r in rejected if r["reason"] == "unknown_mode")
        expected_unknown = sum(
            1
            for k in range(len(plan.ops[i]))
            if (o := outcomes[f"{i}.{k}"]).error is not None and o.error.code == -32602
        )
        assert unknown == expected_unknown

    # every proposed switch ends in the records its answer allows, and only allows move
    for tool_call_id, answer in client.answered.items():
        records = [r for r in log.records if r.get("tool_call_id") == tool_call_id]
        # after a cancel or close ended the wait, the client's answer is logged as late
        late = [r for r in records if r.get("reason") == "late_answer"]
        records = [r for r in records if r.get("reason") != "late_answer"]
        ends = {(r["event"], r.get("reason")) for r in records}
        assert len(records) <= 1, (tool_call_id, records)
        if late:
            assert len(late) == 1, (tool_call_id, late)
            assert ends & {
                ("modefsm.change_rejected", "cancelled"),
                ("modefsm.change_rejected", "session_closed"),
            }, (tool_call_id, records, late)
            bogus = "not-offered" if answer == "bogus" else answer
            assert late[0]["option_id"] == bogus, (tool_call_id, answer, late)
        raced: set[tuple[str, str | None]] = {
            ("modefsm.change_rejected", "cancelled"),
            ("modefsm.change_rejected", "session_closed"),
        }
        by_answer: dict[str, set[tuple[str, str | None]]] = {
            "code": {("modefsm.mode_changed", None)},
            "ask": {("modefsm.mode_changed", None)},
            "reject": {("modefsm.change_rejected", "option_rejected")},
            "bogus": {("modefsm.change_rejected", "option_not_offered")},
        }
        allowed = by_answer.get(answer, set()) | raced
        assert ends <= allowed, (tool_call_id, answer, records)
        if not records:  # only an approval to the mode the session was already in
            assert answer in ("code", "ask"), (tool_call_id, answer)
        for r in records:
            if r["event"] == "modefsm.mode_changed":
                assert (r["option_id"], r["to_mode"]) == (answer, answer)
    switched = [r for r in log.records if r.get("origin") == "switch_mode" and r["seq"]]
    assert all(r["tool_call_id"] in client.answered for r in switched)


@pytest.mark.parametrize("seed", seeds(SCHEDULES))
async def test_random_schedule_keeps_every_promise(tmp_path: Path, seed: int):
    try:
        await run_schedule(tmp_path / "log.jsonl", seed)
    except BaseException as exc:
        exc.add_note(reproduce(THIS, seed))
        raise


class GatedConnection:
    """A stand-in for the SDK connection whose ``session/update`` waits for a gate."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.sent: list[tuple[str, str]] = []
        self.waiting = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.waiting.set()
        await self.gate.wait()
        self.sent.append((session_id, update.session_update))

    async def request_permission(self, **kwargs: Any) -> Any:
        await asyncio.Event().wait()  # never answers


@pytest.fixture
def gated(tmp_path: Path):
    """A :class:`ScriptedAgent` on a real log whose notifications wait for a gate."""
    from modefsm import TransitionLog
    from modefsm.cli._serve import ScriptedAgent

    conn = GatedConnection()
    log = TransitionLog.to_file(tmp_path / "log.jsonl")
    agent = ScriptedAgent(SEED, store=LogStore(log))
    agent.on_connect(conn)
    yield agent, conn
    log.close()


class TestRegressions:
    """Deterministic versions of what the random schedules found."""

    async def test_cancel_ends_every_concurrent_turn_of_a_session(self, gated):
        agent, conn = gated
        conn.gate.set()
        sid = (await agent.new_session(cwd=".")).session_id
        await agent.set_session_mode(session_id=sid, mode_id="architect")
        turns = [asyncio.create_task(agent.prompt([text_block("go")], sid)) for _ in range(2)]
        await asyncio.sleep(0.05)  # both turns wait for an answer that never comes
        await agent.cancel(sid)
        responses = await asyncio.wait_for(asyncio.gather(*turns), 5)
        assert [r.stop_reason for r in responses] == ["cancelled", "cancelled"]
        assert agent._cancels == {}

    async def test_load_answers_only_after_pending_notifications(self, gated):
        agent, conn = gated
        conn.gate.set()
        sid = (await agent.new_session(cwd=".")).session_id
        conn.gate.clear()
        change = asyncio.create_task(agent.set_session_mode(session_id=sid, mode_id="code"))
        await conn.waiting.wait()  # committed; its notifications are leaving
        load = asyncio.create_task(agent.load_session(cwd=".", session_id=sid))
        await asyncio.sleep(0.05)
        assert not load.done()  # it would report `code` before the client was told
        conn.gate.set()
        response = await asyncio.wait_for(load, 5)
        await change
        assert response.modes.current_mode_id == "code"
        assert conn.sent == [(sid, "current_mode_update"), (sid, "config_option_update")]

    async def test_config_option_change_succeeds_when_the_session_closes_meanwhile(self, gated):
        agent, conn = gated
        conn.gate.set()
        sid = (await agent.new_session(cwd=".")).session_id
        conn.gate.clear()
        change = asyncio.create_task(
            agent.set_config_option(config_id="mode", session_id=sid, value="code")
        )
        await conn.waiting.wait()  # committed and logged
        await agent.close_session(session_id=sid)
        conn.gate.set()
        response = await asyncio.wait_for(change, 5)  # was -32002 for a committed change
        assert response.config_options[0].current_value == "code"
