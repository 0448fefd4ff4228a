"""The implementations the benchmarks compare, behind one small interface.

Each handler keeps every session's mode under one spec and offers what the benchmarks
drive: ``new_session(session_id)``, ``await set_mode(session_id, mode_id)`` and
``close(session_id)``. Every one of them does the same work per change: validate the
request (unknown session, unknown mode, not allowed by the spec's client policy), write
the same JSON log line through ``orjson`` with one ``write`` on an unbuffered append-only
file *before* the mode changes, then send ``current_mode_update`` and
``config_option_update`` through the same async sink. Only the way the mode is held and
moved differs:

- :class:`ModefsmHandler`: :class:`modefsm.ModeEngine` (one shared ``transitions`` machine,
  sessions as unbound models);
- :class:`DictHandler`: the baseline, a dict of modes and hand-written checks;
- :class:`MachinePerSession`: one ``transitions.Machine`` per session;
- :class:`StatechartPerSession`: one ``python-statemachine`` machine per session.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any, Protocol

import orjson
from transitions import Machine, MachineError

from modefsm import LogStore, ModeEngine, ModeSpec, TransitionLog
from modefsm.engine import ModeChanged, build_views
from modefsm.log._records import EVENT_CHANGED, EVENT_CREATED, record_digest, utc_timestamp
from modefsm.protocol.v1 import session_updates

__all__ = [
    "HANDLERS",
    "DictHandler",
    "Handler",
    "MachinePerSession",
    "ModefsmHandler",
    "Sink",
    "StatechartPerSession",
    "statechart_available",
    "v1_updates",
]

Sink = Callable[[str, Any], Awaitable[None]]


async def discard(session_id: str, update: Any) -> None:
    """A sink that drops every notification."""
    del session_id, update


class Handler(Protocol):
    """What a benchmark drives."""

    name: str

    def new_session(self, session_id: str) -> None:
        """Start *session_id* in the spec's initial mode (logged)."""

    async def set_mode(self, session_id: str, mode_id: str) -> None:
        """``session/set_mode``: validate, log, change, notify."""

    def close(self, session_id: str) -> None:
        """Forget *session_id*."""

    def mode(self, session_id: str) -> str:
        """The session's current mode."""

    def shutdown(self) -> None:
        """Close the log file."""


def _open_log(path: Path | None) -> IO[bytes] | None:
    if path is None:
        return None
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    return os.fdopen(fd, "ab", buffering=0)


def v1_updates(spec: ModeSpec) -> dict[str, tuple[Any, ...]]:
    """The ACP v1 notifications of a change to each mode, as modefsm's v1 adapter sends them."""
    views = build_views(spec)
    return {
        m: tuple(session_updates(ModeChanged("", m, 0, (v.mode_option,)))) for m, v in views.items()
    }


async def _announce(sink: Any, updates: tuple[Any, Any], session_id: str) -> None:
    """Send a change's two notifications (``current_mode_update``, ``config_option_update``)."""
    if sink is not None:
        for update in updates:
            await sink(session_id, update)


class _Lines:
    """The log line every hand-written handler writes: the same fields as modefsm's,
    chained the same way (``prev``, ``digest``: SHA-256 of the canonical record)."""

    def __init__(self, spec: ModeSpec, path: Path | None) -> None:
        self._file = _open_log(path)
        self._spec = spec.name
        self._hash = spec.content_hash
        self._head: str | None = None

    def write(self, event: str, session_id: str, seq: int, move: tuple[str | None, str]) -> None:
        if self._file is None:
            return
        record = {
            "timestamp": utc_timestamp(),
            "session_id": session_id,
            "seq": seq,
            "from_mode": move[0],
            "to_mode": move[1],
            "origin": "new" if event == EVENT_CREATED else "set_mode",
            "spec": self._spec,
            "spec_hash": self._hash,
            "event": event,
            "prev": self._head,
        }
        self._head = record["digest"] = record_digest(record)
        record["level"] = "info"
        self._file.write(orjson.dumps(record) + b"\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _v1(sink: Sink) -> Sink:
    """*sink* behind the engine: each event sent as its ACP v1 updates (as the v1 adapter does)."""

    async def send(session_id: str, event: Any) -> None:
        for update in session_updates(event):
            await sink(session_id, update)

    return send


class ModefsmHandler:
    """modefsm's :class:`~modefsm.ModeEngine` with a :class:`~modefsm.TransitionLog` file."""

    name = "modefsm"

    def __init__(self, spec: ModeSpec, log_path: Path | None, sink: Sink | None) -> None:
        """Build the engine; no log when *log_path* is ``None``, no notification without *sink*."""
        self.log = None if log_path is None else TransitionLog.to_file(log_path)
        self.engine = ModeEngine(
            spec,
            store=None if self.log is None else LogStore(self.log),
            sink=None if sink is None else _v1(sink),
        )
        self.new_session = self.engine.new_session
        self.set_mode = self.engine.set_mode

    def close(self, session_id: str) -> None:
        """``session/close``."""
        self.engine.close_session(session_id)

    def mode(self, session_id: str) -> str:
        """The current mode."""
        return self.engine.get(session_id).state

    def shutdown(self) -> None:
        """Close the log."""
        if self.log is not None:
            self.log.close()


class DictHandler:
    """The baseline: a dict of modes, the spec's checks written out, no state machine."""

    name = "baseline: dict + checks"

    def __init__(self, spec: ModeSpec, log_path: Path | None, sink: Sink | None) -> None:
        """Prepare the checks and the notifications of every mode."""
        self.modes: dict[str, str] = {}
        self.seqs: dict[str, int] = {}
        self._initial = spec.initial
        self._valid = frozenset(spec.mode_ids)
        self._allowed = {m: frozenset(spec.client_targets(m)) for m in spec.mode_ids}
        self._updates = v1_updates(spec)
        self._lines = _Lines(spec, log_path)
        self._sink = sink

    def new_session(self, session_id: str) -> None:
        """Start a session (logged)."""
        if session_id in self.modes:
            raise KeyError(session_id)
        self._lines.write(EVENT_CREATED, session_id, 1, (None, self._initial))
        self.modes[session_id] = self._initial
        self.seqs[session_id] = 1

    async def set_mode(self, session_id: str, mode_id: str) -> None:
        """Validate, log, change, notify."""
        current = self.modes.get(session_id)
        if current is None:
            raise KeyError(session_id)
        if mode_id not in self._valid:
            raise ValueError(mode_id)
        if mode_id == current:
            return
        if mode_id not in self._allowed[current]:
            raise ValueError(mode_id)
        seq = self.seqs[session_id] + 1
        self._lines.write(EVENT_CHANGED, session_id, seq, (current, mode_id))
        self.modes[session_id] = mode_id
        self.seqs[session_id] = seq
        await _announce(self._sink, self._updates[mode_id], session_id)

    def close(self, session_id: str) -> None:
        """Forget a session."""
        del self.modes[session_id]
        del self.seqs[session_id]

    def mode(self, session_id: str) -> str:
        """The current mode."""
        return self.modes[session_id]

    def shutdown(self) -> None:
        """Close the log."""
        self._lines.close()


class _Model:
    """A session for the per-session machines (which add their triggers to it)."""

    __slots__ = ("__dict__", "seq", "session_id", "state")
    state: str

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.seq = 1


class MachinePerSession:
    """One ``transitions.Machine`` per session, bound to its model (the textbook way)."""

    name = "alt: transitions Machine per session"

    def __init__(self, spec: ModeSpec, log_path: Path | None, sink: Sink | None) -> None:
        """Prepare the transitions every session's machine gets."""
        self._spec = spec
        self._states = list(spec.mode_ids)
        self._transitions = [
            {
                "trigger": f"set_{dest}",
                "source": [s for s in spec.mode_ids if dest in spec.client_targets(s)],
                "dest": dest,
            }
            for dest in spec.mode_ids
        ]
        self._valid = frozenset(spec.mode_ids)
        self.models: dict[str, _Model] = {}
        self._updates = v1_updates(spec)
        self._lines = _Lines(spec, log_path)
        self._sink = sink

    def new_session(self, session_id: str) -> None:
        """Build the session's machine (logged)."""
        if session_id in self.models:
            raise KeyError(session_id)
        model = _Model(session_id)
        Machine(
            model=model,
            states=self._states,
            transitions=self._transitions,
            initial=self._spec.initial,
            auto_transitions=False,
            send_event=True,
            before_state_change=[self._write_ahead],
            after_state_change=[self._commit],
        )
        self._lines.write(EVENT_CREATED, session_id, 1, (None, model.state))
        self.models[session_id] = model

    def _write_ahead(self, event: Any) -> None:
        model = event.model
        transition = event.transition
        self._lines.write(
            EVENT_CHANGED, model.session_id, model.seq + 1, (transition.source, transition.dest)
        )

    def _commit(self, event: Any) -> None:
        event.model.seq += 1

    async def set_mode(self, session_id: str, mode_id: str) -> None:
        """Validate, fire the session's machine (which logs), notify."""
        model: Any = self.models[session_id]
        if mode_id not in self._valid:
            raise ValueError(mode_id)
        if mode_id == model.state:
            return
        try:
            model.trigger(f"set_{mode_id}")
        except MachineError:
            raise ValueError(mode_id) from None
        await _announce(self._sink, self._updates[mode_id], session_id)

    def close(self, session_id: str) -> None:
        """Drop the session and its machine."""
        del self.models[session_id]

    def mode(self, session_id: str) -> str:
        """The current mode."""
        return str(self.models[session_id].state)

    def shutdown(self) -> None:
        """Close the log."""
        self._lines.close()


def statechart_available() -> bool:
    """Whether python-statemachine is installed (``pip install -e '.[bench]'``)."""
    try:
        import statemachine  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


class StatechartPerSession:
    """One ``python-statemachine`` machine per session (the class is built from the spec)."""

    name = "alt: python-statemachine per session"

    def __init__(self, spec: ModeSpec, log_path: Path | None, sink: Sink | None) -> None:
        """Build the ``StateMachine`` subclass of *spec* (needs python-statemachine)."""
        from statemachine import State, StateMachine  # noqa: PLC0415 - optional

        lines = _Lines(spec, log_path)
        self._lines = lines
        index = {mode: i for i, mode in enumerate(spec.mode_ids)}
        states = {m: State(m, value=m, initial=m == spec.initial) for m in spec.mode_ids}
        attrs: dict[str, Any] = {f"s{index[m]}": state for m, state in states.items()}
        self._events: dict[str, str] = {}
        for dest in spec.mode_ids:
            sources = [s for s in spec.mode_ids if dest in spec.client_targets(s)]
            if not sources:
                continue
            transitions = states[sources[0]].to(states[dest])
            for source in sources[1:]:
                transitions |= states[source].to(states[dest])
            attrs[f"set_{index[dest]}"] = transitions
            self._events[dest] = f"set_{index[dest]}"

        def before_transition(self: Any, source: Any, target: Any) -> None:
            model = self.model
            lines.write(
                EVENT_CHANGED, model.session_id, model.seq + 1, (source.value, target.value)
            )

        def after_transition(self: Any) -> None:
            self.model.seq += 1

        attrs["before_transition"] = before_transition
        attrs["after_transition"] = after_transition
        self._chart = type("SpecChart", (StateMachine,), attrs)
        self._valid = frozenset(spec.mode_ids)
        self.machines: dict[str, Any] = {}
        self._updates = v1_updates(spec)
        self._sink = sink

    def new_session(self, session_id: str) -> None:
        """Build the session's machine (logged)."""
        if session_id in self.machines:
            raise KeyError(session_id)
        machine = self._chart(model=_Model(session_id))
        self._lines.write(EVENT_CREATED, session_id, 1, (None, machine.model.state))
        self.machines[session_id] = machine

    async def set_mode(self, session_id: str, mode_id: str) -> None:
        """Validate, send the event (the machine's callbacks log), notify."""
        machine = self.machines[session_id]
        if mode_id not in self._valid:
            raise ValueError(mode_id)
        if mode_id == machine.model.state:
            return
        try:
            machine.send(self._events[mode_id])
        except machine.TransitionNotAllowed:
            raise ValueError(mode_id) from None
        await _announce(self._sink, self._updates[mode_id], session_id)

    def close(self, session_id: str) -> None:
        """Drop the session and its machine."""
        del self.machines[session_id]

    def mode(self, session_id: str) -> str:
        """The current mode."""
        return str(self.machines[session_id].model.state)

    def shutdown(self) -> None:
        """Close the log."""
        self._lines.close()


HANDLERS: dict[str, type[Any]] = {
    "modefsm": ModefsmHandler,
    "baseline": DictHandler,
    "machine_per_session": MachinePerSession,
    "statechart_per_session": StatechartPerSession,
}
"""Every handler, by the key the command line and the child processes use."""
