"""Property: no tool runs unless the committed mode at that moment (or the user) let it.

Random specs built from ``tools`` rules (kinds, name patterns, defaults, grant policies,
modes not restorable), and random runs over one file store: tool calls decided by one of
two engines (two processes' worth: each its own ``FileStore`` on the file), asks answered
later by the user, mode changes from either engine (mid-turn: while asks are open), and
restarts (both engines gone, new ones restoring the sessions from the file). After every
step:

- every decision an engine returned (from ``decide_async``, ``settle``, or an ask ended by
  a mode change) was made against the session's committed mode and seq in the store at
  the moment it was returned, and is what that mode's rules say (an ask a grant covers
  aside);
- a decision that lets the tool run (``runs``) is an ``allow`` of the rules, a grant, or
  an ask the user approved with an allow option;

and at the end ``replay --verify`` of the file is clean, while a copy in which one
``deny`` record is rewritten to ``allow`` (its chain recomputed, as a forger would) is
caught as ``tool_policy``.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, event, given, reject, settings
from hypothesis import strategies as st

from modefsm import FileStore, ModeEngine, ModeSpec, ToolCall, ToolDecision, replay
from modefsm.errors import AskClosedError, SpecError
from modefsm.log import EVENT_DECIDED, record_digest
from modefsm.spec import TOOL_KINDS

NAMES = ["Read", "Edit", "Bash", "write_plan", None]
PATTERNS = ["Bash", "Edit*", "write_*", "*"]
OPTIONS = ["allow_once", "allow_always", "reject_once", None]
SESSIONS = ["s0", "s1"]


@st.composite
def specs(draw: st.DrawFn) -> ModeSpec:
    count = draw(st.integers(2, 4))
    ids = [f"m{i}" for i in range(count)]
    modes = []
    for i, mode_id in enumerate(ids):
        rules = []
        for _ in range(draw(st.integers(0, 4))):
            rule: dict[str, Any] = {"decision": draw(st.sampled_from(["allow", "ask", "deny"]))}
            if draw(st.booleans()):
                rule["kind"] = draw(st.lists(st.sampled_from(TOOL_KINDS), min_size=1, max_size=4))
            if "kind" not in rule or draw(st.booleans()):
                rule["name"] = draw(st.sampled_from(PATTERNS))
            rules.append(rule)
        mode: dict[str, Any] = {
            "id": mode_id,
            "name": mode_id.upper(),
            "tools": rules,
            "tools_default": draw(st.sampled_from(["allow", "ask", "ask", "deny"])),
            "restorable": i == 0 or draw(st.booleans()),
        }
        if draw(st.booleans()):
            mode["grants"] = {
                "scope": draw(st.sampled_from(["mode", "session"])),
                "persist": draw(st.booleans()),
            }
        modes.append(mode)
    try:
        return ModeSpec(name="random", initial="m0", modes=modes)
    except SpecError:
        reject()
        raise  # pragma: no cover - reject() raises


STEPS = st.tuples(
    st.sampled_from(["call"] * 4 + ["answer"] * 3 + ["mode"] * 2 + ["restart"]),
    st.integers(0, 1),  # the engine
    st.sampled_from(SESSIONS),
    st.sampled_from([*TOOL_KINDS, None]),
    st.sampled_from(NAMES),
    st.integers(0, 63),  # which open ask an answer is for
    st.sampled_from(OPTIONS),
    st.integers(0, 3),  # the mode to change to
)
"""One step: its action (calls most often, then answers and mode changes, now and then a
restart) and what the action uses."""


class Run:
    """Two engines on one file; the open asks each handed out."""

    def __init__(self, spec: ModeSpec, path: Path) -> None:
        self.spec = spec
        self.path = path
        self.engines: list[ModeEngine] = []
        self.asks: list[tuple[ModeEngine, str, ToolDecision, asyncio.Future[ToolDecision]]] = []
        self.calls = 0
        self.start()

    def start(self) -> None:
        for *_, done in self.asks:  # the process is gone: no one waits
            done.cancel()
        self.engines = [ModeEngine(self.spec, store=FileStore(self.path)) for _ in range(2)]
        self.asks = []

    def stop(self) -> None:
        for engine in self.engines:
            assert engine.store is not None
            engine.store.close()

    async def live(self, index: int, session_id: str) -> ModeEngine:
        """Engine *index* with *session_id* live in it (created, or restored from the file)."""
        engine = self.engines[index]
        if session_id in engine:
            return engine
        store = engine.store
        assert store is not None
        point = store.restore_point(session_id)
        if point is None:
            await engine.new_session_async(session_id)
        else:
            await engine.restore_session_async(
                session_id, point.mode, point.seq, previous=point.previous, digest=point.digest
            )
        return engine

    def check(self, engine: ModeEngine, session_id: str, decided: ToolDecision) -> None:
        """*decided* was made against the committed point, and by the rules."""
        store = engine.store
        assert store is not None
        point = store.restore_point(session_id)
        assert point is not None
        assert (decided.mode, decided.mode_seq) == (point.mode, point.seq)
        call = decided.call
        verdict = self.spec.rules.judge(decided.mode, call.kind, call.name)
        assert (decided.rule, decided.reason) == (verdict.rule_index, verdict.reason)
        if decided.outcome == "granted":
            assert (verdict.decision, decided.decision) == ("ask", "allow")
        else:
            assert decided.decision == verdict.decision
        if decided.runs:
            assert decided.decision == "allow" or decided.outcome in {"allow_once", "allow_always"}

    async def settle_moved(self) -> None:
        """Let the re-judging of open asks finish; check every ask that has ended."""
        for engine in self.engines:
            await asyncio.gather(*list(engine._rejudges))
        for entry in list(self.asks):
            engine, session_id, asked, done = entry
            if any(a.call is asked.call for a in engine.open_asks(session_id)):
                continue
            final = await asyncio.wait_for(done, 5)
            self.asks.remove(entry)
            if final.decision != "ask":  # ended by a mode: what that mode's rules say
                event(f"ended by a mode: {final.decision}")
                verdict = self.spec.rules.judge(final.mode, asked.call.kind, asked.call.name)
                assert final.decision == verdict.decision or final.outcome == "granted"

    async def step(self, step: tuple[Any, ...]) -> None:
        action, index, session_id, kind, name, pick, option, mode = step
        match action:
            case "call":
                engine = await self.live(index, session_id)
                self.calls += 1
                call = ToolCall(f"call_{self.calls}", kind, name, f"{name} #{self.calls}")
                decided = await engine.decide_async(session_id, call)
                self.check(engine, session_id, decided)
                if decided.decision == "ask" and decided.outcome is None:
                    done = asyncio.ensure_future(engine.outcome_of(decided))
                    self.asks.append((engine, session_id, decided, done))
            case "answer":
                if not self.asks:
                    return
                engine, session_id, asked, done = self.asks[pick % len(self.asks)]
                try:
                    settled = await engine.settle(asked, option)
                except AskClosedError:  # a mode change ended it first
                    assert all(a.call is not asked.call for a in engine.open_asks(session_id))
                    event("answered after it ended")
                    return
                moved = "after a change" if settled.mode_seq != asked.mode_seq else "in its mode"
                event(f"answered {moved}: {settled.decision}")
                if settled.decision == "ask":  # answered: checked against the point now
                    self.check(engine, session_id, settled)
                    assert settled.outcome == (option or "cancelled")
            case "mode":
                engine = await self.live(index, session_id)
                await engine.set_mode(session_id, self.spec.mode_ids[mode % len(self.spec.modes)])
            case "restart":
                self.stop()
                self.start()
        await self.settle_moved()


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(spec=specs(), steps=st.lists(STEPS, min_size=6, max_size=40))
def test_no_tool_runs_against_its_committed_mode(spec: ModeSpec, steps: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "modes.jsonl"
        run = Run(spec, path)

        async def play() -> None:
            for step in steps:
                await run.step(step)

        try:
            asyncio.run(play())
        finally:
            run.stop()
        if not path.exists():
            return
        report = replay([path], [spec], verify=True)
        assert report.violations == (), [str(v) for v in report.violations]
        assert_a_bypass_is_caught(spec, path)


def assert_a_bypass_is_caught(spec: ModeSpec, path: Path) -> None:
    """A ``deny`` record rewritten to ``allow``, the chain recomputed: ``tool_policy``."""
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    denied = [i for i, line in enumerate(lines) if line.get("decision") == "deny"]
    if not denied:
        return
    lines[denied[0]]["decision"] = "allow"
    previous = None
    for line in lines:
        if "digest" in line:
            line["prev"] = previous
            line["digest"] = record_digest(line)
            previous = line["digest"]
    forged = path.with_name("forged.jsonl")
    forged.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    report = replay([forged], [spec], verify=True)
    kinds = {(v.kind, v.session_id) for v in report.violations}
    assert kinds == {("tool_policy", lines[denied[0]]["session_id"])}
    assert any("the record says allow" in v.message for v in report.violations)


def test_the_bypass_check_sees_a_forged_allow(tmp_path: Path) -> None:
    """The seeded edit above, on a fixed log: plan denies the edit; the record claims allow."""
    from modefsm import preset

    spec = preset("permission")
    path = tmp_path / "modes.jsonl"

    async def play() -> None:
        engine = ModeEngine(spec, store=FileStore(path))
        await engine.new_session_async("s")
        await engine.set_mode("s", "plan")
        denied = await engine.decide_async("s", ToolCall("c1", "edit", "Edit"))
        assert denied.decision == "deny"
        assert engine.store is not None
        engine.store.close()

    asyncio.run(play())
    assert replay([path], [spec], verify=True).violations == ()
    assert [orjson.loads(x)["event"] for x in path.read_bytes().splitlines()][-1] == EVENT_DECIDED
    assert_a_bypass_is_caught(spec, path)
