"""Property: over random specs, no run lands in a mode the policy forbids or the user was not shown.

Random specs (non-restorable modes, restricted client changes, switches whose options
target a mode or ``$previous``), random runs of client changes, proposed switches answered
later (the client may change the mode while a request is open), and restarts that restore
sessions from the log. After every step:

- a session in a non-restorable mode got there by a client request or by a switch option
  that named that mode (never by a restore, a ``$previous`` carried across a restart, or a
  stale approval);
- every approved switch landed on the target its option showed, and an option that
  resolved ``$previous`` named that mode;
- replaying the log agrees with the engine (no violation).
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, reject, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from modefsm import LogStore, ModeChange, ModeEngine, ModefsmError, ModeSpec, TransitionLog
from modefsm.engine import SwitchOffer
from modefsm.errors import SpecError
from modefsm.replay import replay
from modefsm.spec import PREVIOUS
from modefsm.store._restore import LogRestore
from tests.conftest import offer_now, settle_now

SESSIONS = st.sampled_from(["s0", "s1", "s2"])


@st.composite
def specs(draw: st.DrawFn) -> ModeSpec:
    count = draw(st.integers(2, 5))
    ids = [f"m{i}" for i in range(count)]
    restorable = [True] + [draw(st.booleans()) for _ in ids[1:]]
    keep = [m for m, r in zip(ids, restorable, strict=True) if r]
    modes = [
        {
            "id": m,
            "name": f"Mode {m.upper()}",
            "restorable": r,
            **({} if r else {"fallback": draw(st.sampled_from([None, *keep]))}),
        }
        for m, r in zip(ids, restorable, strict=True)
    ]
    client_changes = {
        m: draw(st.lists(st.sampled_from(ids), unique=True, max_size=count))
        for m in ids
        if draw(st.integers(0, 2)) == 0
    }
    switches = []
    for m in ids:
        if not draw(st.booleans()):
            continue
        targets = draw(
            st.lists(
                st.sampled_from([PREVIOUS, *[t for t in ids if t != m]]), min_size=1, max_size=3
            )
        )
        options: list[dict[str, Any]] = [
            {
                "option_id": f"{m}_o{j}",
                "name": draw(st.sampled_from(["Go", "Go to {mode}", "Back"])),
                "kind": draw(st.sampled_from(["allow_once", "allow_always"])),
                "target": target,
            }
            for j, target in enumerate(targets)
        ]
        options.append({"option_id": f"{m}_no", "name": "No", "kind": "reject_once"})
        switches.append({"source": [m], "title": f"Leave {m}", "options": options})
    try:
        return ModeSpec(
            name="random",
            initial="m0",
            modes=modes,
            client_changes=client_changes,
            switches=switches,
        )
    except SpecError:
        reject()
        raise  # pragma: no cover - reject() raises


class PolicyRuns(RuleBasedStateMachine):
    """Random runs; the invariants are the module's three properties."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp())
        self.path = self.folder / "modes.jsonl"
        self.engine: ModeEngine | None = None
        self.log: TransitionLog | None = None
        self.created: set[str] = set()
        self.last: dict[str, ModeChange] = {}  # the last committed change of each session
        self.pending: list[SwitchOffer] = []
        self.named: set[tuple[str, int]] = set()  # (session, seq) of switches that named dest
        self.calls = 0

    @initialize(spec=specs())
    def start(self, spec: ModeSpec) -> None:
        self.log = TransitionLog.to_file(self.path)
        self.engine = ModeEngine(spec, store=LogStore(self.log), after_change=[self._changed])

    def _changed(self, change: ModeChange) -> None:
        self.last[change.session_id] = change

    @property
    def live(self) -> ModeEngine:
        assert self.engine is not None
        return self.engine

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close()
        for file in self.folder.iterdir():
            file.unlink()
        self.folder.rmdir()

    @rule(session_id=SESSIONS)
    def new_session(self, session_id: str) -> None:
        if session_id not in self.created:
            self.live.new_session(session_id)
            self.created.add(session_id)

    @precondition(lambda self: self.created)
    @rule(data=st.data())
    def client_change(self, data: st.DataObject) -> None:
        session_id = data.draw(st.sampled_from(sorted(self.created)))
        mode = data.draw(st.sampled_from(self.live.spec.mode_ids))
        with contextlib.suppress(ModefsmError):
            self.live.change(session_id, mode, "set_mode")

    @precondition(lambda self: self.created)
    @rule(data=st.data())
    def propose(self, data: st.DataObject) -> None:
        session_id = data.draw(st.sampled_from(sorted(self.created)))
        if session_id not in self.live or not self.live.spec.switch_from(
            self.live.get(session_id).state
        ):
            return
        self.calls += 1
        offer = offer_now(self.live, session_id, f"t{self.calls}")
        assert _previous_is_unique(self.live.spec, offer)
        self.pending.append(offer)

    @precondition(lambda self: self.created)
    @rule(data=st.data())
    def stale_answer(self, data: st.DataObject) -> None:
        """Propose, let the client change the mode while the request is open, then answer."""
        self.propose(data)
        if self.pending:
            offer = self.pending[-1]
            mode = data.draw(st.sampled_from(self.live.spec.mode_ids))
            with contextlib.suppress(ModefsmError):
                self.live.change(offer.session_id, mode, "set_mode")
            self.answer(data, len(self.pending) - 1)

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def answer(self, data: st.DataObject, at: int | None = None) -> None:
        if at is None:
            at = data.draw(st.integers(0, len(self.pending) - 1))
        offer = self.pending.pop(at)
        switch = self.live.spec.switch_from(offer.proposed_in)
        assert switch is not None
        allow = [o.option_id for o in offer.options if o.target is not None]
        every = [o.option_id for o in switch.options]
        choices = st.sampled_from(every)
        option_id = data.draw(st.sampled_from(allow) | choices if allow else choices)
        shown = offer.get(option_id)
        result = settle_now(self.live, offer, option_id)
        if shown is None:
            assert result.reason == "option_not_offered"
        elif shown.target is None:
            assert result.reason == "option_rejected"
        if result.reason is not None:
            assert result.change is None
            return
        assert shown is not None
        assert shown.target is not None  # only an allow option that was offered applies
        change = result.change
        if change is None:
            assert self.live.get(offer.session_id).state == shown.target
            return
        assert change.to_mode == shown.target  # lands on the target shown
        option = next(o for o in switch.options if o.option_id == option_id)
        mode_name = self.live.spec.mode(shown.target).name
        if option.target == PREVIOUS:
            assert mode_name in shown.name  # a resolved "$previous" names its mode
        if change.proposed_in is not None:  # a stale approval
            assert self.live.spec.mode(change.to_mode).restorable
        self.named.add((change.session_id, change.seq))

    @precondition(lambda self: self.created)
    @rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        """Forget a session and restore it from the log, as ``session/load`` after a restart."""
        session_id = data.draw(st.sampled_from(sorted(self.created)))
        if session_id not in self.live:
            return
        self.live.close_session(session_id)
        self.pending = [o for o in self.pending if o.session_id != session_id]
        point = LogRestore(self.path).restore_point(session_id)
        assert point is not None
        self.live.restore_session(session_id, point.mode, point.seq, previous=point.previous)
        previous = self.live.get(session_id).previous
        assert previous is None or self.live.spec.mode(previous).restorable

    @invariant()
    def non_restorable_only_by_a_named_step(self) -> None:
        if self.engine is None:
            return
        for session_id in self.created & set(self.live._sessions):
            session = self.live.get(session_id)
            if self.live.spec.mode(session.state).restorable:
                continue
            last = self.last[session_id]
            assert last.to_mode == session.state
            assert last.origin in ("set_mode", "set_config_option") or (
                last.origin == "switch_mode" and (session_id, last.seq) in self.named
            )

    @invariant()
    def the_mode_option_offers_exactly_what_can_be_selected(self) -> None:
        if self.engine is None:
            return
        for session_id in self.created & set(self.live._sessions):
            current = self.live.get(session_id).state
            option = self.live.view(session_id).mode_option
            offered = [choice.value for choice in option.options]
            selectable = [
                m.id
                for m in self.live.spec.modes
                if m.id == current or self.live.machine.allows("client_change", current, m.id)
            ]
            assert (option.current_value, offered) == (current, selectable)

    @invariant()
    def replay_agrees(self) -> None:
        if self.engine is None:
            return
        report = replay([self.path], [self.live.spec], verify=True, keep_timeline=False)
        assert report.violations == ()
        for session_id in self.created & set(self.live._sessions):
            assert report.session(session_id).mode == self.live.get(session_id).state


def _previous_is_unique(spec: ModeSpec, offer: SwitchOffer) -> bool:
    """Whether each resolved ``$previous`` option of *offer* leads where no other option does,
    and never to the mode the switch is proposed in."""
    switch = spec.switch_from(offer.proposed_in)
    assert switch is not None
    by_id = {o.option_id: o for o in switch.options}
    previous = [o for o in offer.options if by_id[o.option_id].target == PREVIOUS]
    explicit = {o.target for o in offer.options if by_id[o.option_id].target != PREVIOUS}
    return all(o.target not in {*explicit, offer.proposed_in} for o in previous)


PolicyRuns.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestPolicyRuns = PolicyRuns.TestCase
