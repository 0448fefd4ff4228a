"""Property: for any run of the engine, replaying its log gives back every session exactly."""

from __future__ import annotations

import contextlib
import io

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from modefsm import (
    LogStore,
    ModeChange,
    ModeEngine,
    ModefsmError,
    TransitionLog,
    preset,
    preset_names,
)
from modefsm.replay._replayer import replay
from tests.conftest import offer_now, settle_now

SESSION_IDS = st.sampled_from(["s0", "s1", "s2", "s3"])
REQUEST_IDS = st.none() | st.integers(0, 1000) | st.text("abc", min_size=1, max_size=3)


def _row(change: ModeChange) -> tuple[object, ...]:
    return (
        change.seq,
        change.from_mode,
        change.to_mode,
        change.origin,
        change.request_id,
        change.tool_call_id,
        change.option_id,
        change.proposed_in,
    )


class EngineRuns(RuleBasedStateMachine):
    """Random requests on every preset; after each step, replay the log and compare."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer = io.BytesIO()
        self.expected: dict[str, list[tuple[object, ...]]] = {}
        self.modes: dict[str, str] = {}
        self.engine: ModeEngine | None = None
        self.calls = 0

    @initialize(name=st.sampled_from(preset_names()))
    def start(self, name: str) -> None:
        self.engine = ModeEngine(
            preset(name),
            store=LogStore(TransitionLog.to_stream(self.buffer)),
            after_change=[self._changed],
        )

    def _changed(self, change: ModeChange) -> None:
        self.expected[change.session_id].append(_row(change))
        self.modes[change.session_id] = change.to_mode

    @property
    def live(self) -> ModeEngine:
        assert self.engine is not None
        return self.engine

    @rule(session_id=SESSION_IDS, request_id=REQUEST_IDS)
    def new_session(self, session_id: str, request_id: object) -> None:
        if session_id in self.expected:
            return
        session = self.live.new_session(session_id, request_id=request_id)  # type: ignore[arg-type]
        row = (1, None, session.state, "new", request_id, None, None, None)
        self.expected[session_id] = [row]
        self.modes[session_id] = session.state

    @precondition(lambda self: self.expected)
    @rule(data=st.data(), origin=st.sampled_from(["set_mode", "set_config_option"]))
    def client_change(self, data: st.DataObject, origin: str) -> None:
        session_id = data.draw(st.sampled_from(sorted(self.expected)))
        mode = data.draw(st.sampled_from([*self.live.spec.mode_ids, "bogus"]))
        request_id = data.draw(REQUEST_IDS)
        with contextlib.suppress(ModefsmError):
            self.live.change(session_id, mode, origin, request_id=request_id)  # type: ignore[arg-type]

    @precondition(lambda self: self.expected)
    @rule(data=st.data(), meanwhile=st.booleans())
    def switch(self, data: st.DataObject, meanwhile: bool) -> None:
        engine = self.live
        session_id = data.draw(st.sampled_from(sorted(self.expected)))
        if session_id not in engine:
            return
        switch = engine.spec.switch_from(engine.get(session_id).state)
        if switch is None:
            return
        self.calls += 1
        offer = offer_now(engine, session_id, f"call_{self.calls}")
        if meanwhile:
            mode = data.draw(st.sampled_from(engine.spec.mode_ids))
            with contextlib.suppress(ModefsmError):
                engine.change(session_id, mode, "set_mode")
        option = data.draw(st.sampled_from(switch.options))
        settle_now(engine, offer, option.option_id)

    @precondition(lambda self: self.expected)
    @rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        """Close a session and load it again, as after an agent restart."""
        engine = self.live
        session_id = data.draw(st.sampled_from(sorted(self.expected)))
        if session_id not in engine:
            return
        session = engine.get(session_id)
        mode, seq = session.state, session.seq
        engine.close_session(session_id)
        engine.restore_session(session_id, mode, seq)

    @invariant()
    def replay_gives_back_every_session(self) -> None:
        if self.engine is None:
            return
        stdin = io.BufferedReader(io.BytesIO(self.buffer.getvalue()))
        report = replay(["-"], [self.live.spec], verify=True, stdin=stdin)
        timelines = {
            s.session_id: [
                (
                    r.seq,
                    r.from_mode,
                    r.to_mode,
                    r.origin,
                    r.request_id,
                    r.tool_call_id,
                    r.option_id,
                    r.proposed_in,
                )
                for r in s.changes
            ]
            for s in report.sessions
            if s.changes
        }
        finals = {s.session_id: s.mode for s in report.sessions if s.mode is not None}
        assert ((), self.expected, self.modes) == (report.violations, timelines, finals)


EngineRuns.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestEngineRuns = EngineRuns.TestCase
