"""The ``transitions`` state machine of a spec; the only module that imports ``transitions``.

One synchronous :class:`transitions.Machine` is built per engine, with ``model=None``:
the model of a firing is a small object that is never added to the machine and is fired
through ``machine.events[trigger].trigger(model, ...)`` (the engine makes one per change,
from the session's row). The machine keeps its state in the model's
:data:`MODEL_ATTRIBUTE`, under a name derived from the mode id
(:func:`state_name`): transitions gives ``*`` and ``=`` special meanings, so a mode id is
never used as a state name as it is. This is the
"static machine, unbound models" pattern: a session is cheap to start, O(1) to drop and
has no reference cycles, where a ``Machine`` per session costs far more time and memory
and stalls the garbage collector at 100k sessions (the documentation's Performance page
measures both).

Triggers, one per origin kind and destination (``auto_transitions`` is off, so no
``to_<state>`` trigger can bypass the policy):

``client_change>DEST``
    ``session/set_mode`` and ``session/set_config_option``: from every mode whose
    ``client_changes`` allow DEST.
``switch_mode>DEST``
    an approved ``switch_mode``: from every mode that has a switch option reaching DEST, and
    from every mode a client change could reach DEST from (an approval is at least a
    client's explicit choice, which matters when the client changed the mode while the
    permission request was pending).
``restore>DEST``
    ``session/load``/``session/resume`` of a session last seen in a non-restorable mode:
    from that mode to its fallback.

The spec's :class:`~modefsm.spec.TransitionTable` says which transitions exist
(:meth:`ModeMachine.allows` asks it in constant time); the ``transitions`` machine is
given each transition the first time a session takes it, and keeps at most
:data:`MATERIALIZED_MAX` of them (the oldest made is dropped first, and made again when
taken again). A spec whose ``client_changes`` allow
"any to any" has n² transitions, and building them all would cost minutes and gigabytes
for thousands of modes; this way building a machine takes time linear in the spec's
size and its memory stays bounded whatever the sessions do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from transitions import Machine, MachineError, State

from modefsm.spec import TransitionTable, TriggerKind

if TYPE_CHECKING:
    from modefsm.spec import ModeSpec

__all__ = [
    "MATERIALIZED_MAX",
    "MODEL_ATTRIBUTE",
    "ModeMachine",
    "mode_of",
    "state_name",
]

MODEL_ATTRIBUTE = "fsm_state"
"""The session attribute the machine reads and writes."""

MATERIALIZED_MAX = 10_000
"""The most transitions one machine's ``transitions.Machine`` holds at once."""

_PREFIX = "m:"


_STATE_NAMES: dict[str, str] = {}
_MODE_IDS: dict[str, str] = {}


def state_name(mode_id: str) -> str:
    """The machine's name for the state of mode *mode_id* (``m:`` + the id).

    Names are made once per mode id and shared: every session in a mode holds the same
    string, and naming costs a dictionary look-up.
    """
    name = _STATE_NAMES.get(mode_id)
    if name is None:
        name = _STATE_NAMES[mode_id] = _PREFIX + mode_id
        _MODE_IDS[name] = mode_id
    return name


def mode_of(state: str) -> str:
    """The mode id of the machine state named *state* (the inverse of :func:`state_name`)."""
    return _MODE_IDS[state]


Callback = Callable[[Any, str, str, Any], None]
"""``callback(session, source, dest, context)``."""


class _State(State):
    """A ``transitions`` state whose entry and exit are free when it has no callbacks.

    ``State.enter``/``exit`` walk their callback lists and emit a DEBUG and an INFO log
    record each time, even when the lists are empty, as modefsm's always are (its
    callbacks are the machine's ``before_state_change``/``after_state_change``). Skipping
    that work is a measurable part of a change's cost (docs/performance.md); a state given
    ``on_enter``/``on_exit`` callbacks runs them exactly as ``State`` does.
    """

    def enter(self, event_data: Any) -> None:
        if self.on_enter:
            super().enter(event_data)

    def exit(self, event_data: Any) -> None:
        if self.on_exit:
            super().exit(event_data)


class _Machine(Machine):
    """``transitions.Machine`` with :class:`_State` states (its ``state_cls`` extension point)."""

    state_cls = _State


class ModeMachine:
    """A spec compiled into a ``transitions.Machine``.

    Args:
        spec: the spec.
        before: called once the transition is chosen and before the state is set, with
            ``(session, source, dest, context)`` (mode ids); if it raises, the state is
            unchanged.
        after: called once the state is set, with the same arguments.
    """

    def __init__(self, spec: ModeSpec, *, before: Callback, after: Callback) -> None:
        """Build the machine: one state per mode; transitions come as sessions take them."""
        self.spec = spec
        self.table: TransitionTable = spec.table
        self._before = before
        self._after = after
        self._machine = _Machine(
            model=None,
            states=[state_name(m) for m in spec.mode_ids],
            initial=state_name(spec.initial),
            model_attribute=MODEL_ATTRIBUTE,
            auto_transitions=False,
            send_event=True,
            before_state_change=[self._on_before],
            after_state_change=[self._on_after],
        )
        # (kind, source, dest) -> its trigger's Event, oldest first
        self._made: dict[tuple[str, str, str], Any] = {}

    def edges(self) -> list[tuple[TriggerKind, str, str]]:
        """Every transition (:meth:`TransitionTable.edges <modefsm.spec.TransitionTable.edges>`)."""
        return self.table.edges()

    def sources(self, kind: TriggerKind, dest: str) -> tuple[str, ...]:
        """The modes from which trigger *kind* may reach *dest*, in spec order."""
        return self.table.sources(kind, dest)

    def targets(self, kind: TriggerKind, source: str) -> tuple[str, ...]:
        """The modes trigger *kind* may reach from *source*, in spec order."""
        return self.table.targets(kind, source)

    def allows(self, kind: TriggerKind, source: str, dest: str) -> bool:
        """Whether trigger *kind* has a transition from *source* to *dest* (constant time)."""
        return self.table.allows(kind, source, dest)

    def fire(self, session: Any, kind: TriggerKind, dest: str, context: Any) -> bool:
        """Fire trigger *kind* towards *dest* on *session* (which has :data:`MODEL_ATTRIBUTE`).

        Returns:
            ``True`` when the transition ran; ``False`` when no transition exists from the
            session's state (the state is untouched).

        Raises:
            Exception: whatever the ``before`` callback raised (the state is untouched).
        """
        source = _MODE_IDS.get(session.fsm_state)
        if source is None:
            return False
        event = self._made.get((kind, source, dest))
        if event is None:
            if not self.table.allows(kind, source, dest):
                return False
            event = self._make(kind, source, dest)
        try:
            return bool(event.trigger(session, context=context))
        except MachineError:  # pragma: no cover - guarded above; kept as a safety net
            return False

    def _make(self, kind: TriggerKind, source: str, dest: str) -> Any:
        """Give the ``transitions`` machine this transition; drop the oldest beyond the cap."""
        trigger = f"{kind}>{dest}"
        self._machine.add_transition(trigger, state_name(source), state_name(dest))
        event = self._made[kind, source, dest] = self._machine.events[trigger]
        if len(self._made) > MATERIALIZED_MAX:
            old_kind, old_source, old_dest = next(iter(self._made))
            del self._made[old_kind, old_source, old_dest]
            self._machine.remove_transition(
                f"{old_kind}>{old_dest}", state_name(old_source), state_name(old_dest)
            )
        return event

    def _on_before(self, event: Any) -> None:
        transition = event.transition
        self._before(
            event.model,
            mode_of(transition.source),
            mode_of(transition.dest),
            event.kwargs["context"],
        )

    def _on_after(self, event: Any) -> None:
        transition = event.transition
        self._after(
            event.model,
            mode_of(transition.source),
            mode_of(transition.dest),
            event.kwargs["context"],
        )
