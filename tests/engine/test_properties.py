"""Random sequences of changes over several sessions keep every promise of the engine."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from modefsm import LogStore, ModeEngine, ModefsmError, TransitionLog, preset
from modefsm.protocol.v1 import session_updates
from modefsm.replay._replayer import last_points
from tests.conftest import read_log

SPECS = [preset(n) for n in ("seed", "permission", "sandbox")]
SESSIONS = ("s1", "s2", "s3")


class EngineMachine(RuleBasedStateMachine):
    """Drives one engine with client changes, switches (approved or declined) and restores."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.path = self.dir / "log.jsonl"
        self.loop = asyncio.new_event_loop()
        self.sent: list[tuple[str, str, str]] = []
        self.spec = SPECS[0]
        self.log = TransitionLog.to_file(self.path)
        self.engine: ModeEngine | None = None
        self.model: dict[str, str] = {}
        self.commits: dict[str, int] = {}

    async def _sink(self, session_id: str, event: Any) -> None:
        for update in session_updates(event):
            mode = getattr(update, "current_mode_id", None)
            if mode is None:
                mode = update.config_options[0].current_value
            self.sent.append((session_id, update.session_update, mode))

    @precondition(lambda self: self.engine is None)
    @rule(index=st.integers(0, len(SPECS) - 1))
    def start(self, index: int) -> None:
        self.spec = SPECS[index]
        self.engine = ModeEngine(self.spec, store=LogStore(self.log), sink=self._sink)
        for sid in SESSIONS:
            self.engine.new_session(sid)
            self.model[sid] = self.spec.initial
            self.commits[sid] = 0

    def _expect_commit(self, sid: str, dest: str) -> None:
        if dest != self.model[sid]:
            self.model[sid] = dest
            self.commits[sid] += 1

    @precondition(lambda self: self.engine is not None)
    @rule(sid=st.sampled_from(SESSIONS), pick=st.integers(0, 10), via_option=st.booleans())
    def client_change(self, sid: str, pick: int, via_option: bool) -> None:
        assert self.engine is not None
        ids = [*self.spec.mode_ids, "nope"]
        dest = ids[pick % len(ids)]
        current = self.model[sid]
        legal = dest == current or dest in self.spec.client_targets(current)
        try:
            if via_option:
                self.loop.run_until_complete(self.engine.set_config_option(sid, "mode", dest))
            else:
                self.loop.run_until_complete(self.engine.set_mode(sid, dest))
        except ModefsmError:
            assert not legal
            return
        assert legal
        self._expect_commit(sid, dest)

    @precondition(lambda self: self.engine is not None)
    @rule(sid=st.sampled_from(SESSIONS), pick=st.integers(0, 10))
    def switch(self, sid: str, pick: int) -> None:
        assert self.engine is not None
        current = self.model[sid]
        switch = self.spec.switch_from(current)
        if switch is None:
            return
        option = switch.options[pick % len(switch.options)]
        offer = self.loop.run_until_complete(self.engine.offer_switch(sid, tool_call_id="t"))
        dest = offer.targets.get(option.option_id)  # None: a reject option, or not offered
        result = self.loop.run_until_complete(self.engine.settle_switch(offer, option.option_id))
        if dest is None:
            assert (result.change, result.reason is None) == (None, False)
            return
        assert result.reason is None
        self.loop.run_until_complete(self.engine.flush())
        self._expect_commit(sid, dest)

    @precondition(lambda self: self.engine is not None)
    @rule(sid=st.sampled_from(SESSIONS))
    def restart_and_restore(self, sid: str) -> None:
        """A fresh engine (a restarted process) restores the session from the log."""
        assert self.engine is not None
        point = last_points([self.path])[sid]
        fresh = ModeEngine(self.spec, store=LogStore(self.log), sink=self._sink)
        for other in SESSIONS:
            if other != sid:
                fresh._sessions[other] = self.engine._sessions[other]
        session = fresh.restore_session(sid, point.mode, point.seq)
        self.loop.run_until_complete(fresh.flush())
        self._expect_commit(sid, self.spec.restore_target(point.mode))
        assert session.state == self.model[sid]
        self.engine = fresh

    @invariant()
    def state_matches_model_log_and_notifications(self) -> None:
        if self.engine is None:
            return
        points = last_points([self.path])
        for sid in SESSIONS:
            session = self.engine.get(sid)
            assert session.state == self.model[sid]
            assert points[sid].mode == session.state
            assert points[sid].seq == session.seq == 1 + self.commits[sid]
            mine = [(kind, mode) for s, kind, mode in self.sent if s == sid]
            assert len(mine) == 2 * self.commits[sid]
            assert mine[0::2] == [("current_mode_update", m) for _, m in mine[0::2]]
            assert [m for _, m in mine[0::2]] == [m for _, m in mine[1::2]]
        records = [r for r in read_log(self.path) if r["event"] == "modefsm.mode_changed"]
        for sid in SESSIONS:
            seqs = [r["seq"] for r in records if r["session_id"] == sid]
            assert seqs == list(range(2, 2 + self.commits[sid]))
            modes = [r["to_mode"] for r in records if r["session_id"] == sid]
            assert modes == [m for s, k, m in self.sent if s == sid and k == "current_mode_update"]

    def teardown(self) -> None:
        self.log.close()
        self.loop.close()


EngineMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestEngineMachine = EngineMachine.TestCase
