"""Reading logs: how often one spec's sessions took each transition, what each mode decided."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import get_args

from modefsm.diagram._model import ToolCount, Traffic, TransitionKey
from modefsm.errors import DiagramError, LogError
from modefsm.log import (
    EVENT_CHANGED,
    EVENT_CREATED,
    EVENT_REJECTED,
    DecisionRecord,
    Outcome,
    TransitionRecord,
)
from modefsm.replay import iter_records
from modefsm.spec import TOOL_KINDS, ModeSpec, TriggerKind

__all__ = ["read_traffic"]


def read_traffic(
    spec: ModeSpec, paths: Iterable[str | Path], *, session_id: str | None = None
) -> Traffic:
    """Count what the sessions of *spec* did, from transition logs.

    Only the records of *spec* (the same ``spec`` name) are read. A session creation, a
    committed change (``modefsm.mode_changed``) and a rejected switch option
    (``modefsm.change_rejected`` with reason ``option_rejected``) are each counted on the
    transition taken; other rejections changed nothing and are not counted. Each tool
    call decision (``modefsm.tool_decided``, read with ``read_log(decisions=True)``) is
    counted on its mode and kind, by decision and, for an ``ask``, by its outcome.

    Args:
        spec: the spec the picture shows.
        paths: JSON-lines transition logs, read in order.
        session_id: a session whose path and current mode to highlight (ACP ``sessionId``).

    Returns:
        The counts (of every session), and the path of *session_id*.

    Raises:
        LogError: a log cannot be read.
        DiagramError: the logs hold records of other specs only, or *session_id* is not
            in them.
    """
    counts: Counter[TransitionKey] = Counter()
    entered: Counter[str] = Counter()
    sessions: set[str] = set()
    other_specs: set[str] = set()
    records = unmatched = 0
    path: list[TransitionKey] = []
    current: str | None = None
    seen = False
    decided: Counter[tuple[str, str, str, Outcome | None]] = Counter()
    for record in _records(paths):
        if isinstance(record, DecisionRecord):
            _count_decision(spec, record, decided, other_specs)
            continue
        if record.spec != spec.name:
            other_specs.add(record.spec)
            continue
        if not _counted(record):
            continue
        records += 1
        sessions.add(record.session_id)
        key = _transition_of(spec, record)
        if key is None:
            unmatched += 1
        else:
            counts[key] += 1
        committed = record.event != EVENT_REJECTED
        if committed and spec.has_mode(record.to_mode):
            entered[record.to_mode or ""] += 1
        if record.session_id == session_id:
            seen = True
            path += [key] if key is not None else []
            current = record.to_mode if committed else current
    if not records and not decided and other_specs:
        found = ", ".join(sorted(repr(s) for s in other_specs))
        msg = f"the log has no records of spec {spec.name!r}, only of {found}"
        raise DiagramError(msg)
    if session_id is not None and not seen:
        msg = f"session {session_id!r} is not in the log of spec {spec.name!r}"
        raise DiagramError(msg)
    return Traffic(
        counts=dict(sorted(counts.items())),
        entered={m: entered[m] for m in spec.mode_ids},
        sessions=len(sessions),
        records=records,
        unmatched=unmatched,
        tools=_tool_counts(spec, decided),
        decisions=decided.total(),
        unmatched_decisions=sum(n for k, n in decided.items() if not spec.has_mode(k[0])),
        session_id=session_id,
        path=tuple(path),
        current=current if spec.has_mode(current) else None,
    )


def _records(paths: Iterable[str | Path]) -> Iterator[TransitionRecord | DecisionRecord]:
    for path in paths:
        try:
            yield from iter_records([path], decisions=True)
        except OSError as exc:
            msg = f"cannot read the transition log: {exc.strerror or exc}"
            raise LogError(msg, str(path)) from None


def _count_decision(
    spec: ModeSpec,
    record: DecisionRecord,
    decided: Counter[tuple[str, str, str, Outcome | None]],
    other_specs: set[str],
) -> None:
    """Count *record* in *decided* if it is of *spec*, else note its spec in *other_specs*."""
    if record.spec != spec.name:
        other_specs.add(record.spec)
        return
    outcome = record.outcome if record.decision == "ask" else None
    decided[record.mode, record.kind, record.decision, outcome] += 1


_OUTCOMES: tuple[Outcome | None, ...] = (*get_args(Outcome), None)


def _tool_counts(
    spec: ModeSpec, decided: Counter[tuple[str, str, str, Outcome | None]]
) -> tuple[ToolCount, ...]:
    """One :class:`ToolCount` per mode and kind in *decided*, in spec and ``ToolKind`` order.

    *decided* counts ``(mode, kind, decision, outcome)``; the outcome of an ``allow`` or a
    ``deny`` is ``None`` there.
    """
    counts = []
    for mode in spec.mode_ids:
        for kind in TOOL_KINDS:
            asked = tuple(
                (o, n) for o in _OUTCOMES if (n := decided.get((mode, kind, "ask", o), 0))
            )
            allow = decided.get((mode, kind, "allow", None), 0)
            deny = decided.get((mode, kind, "deny", None), 0)
            if allow or asked or deny:
                counts.append(ToolCount(mode=mode, kind=kind, allow=allow, asked=asked, deny=deny))
    return tuple(counts)


def _counted(record: TransitionRecord) -> bool:
    if record.event in {EVENT_CREATED, EVENT_CHANGED}:
        return True
    return (
        record.event == EVENT_REJECTED
        and record.origin == "switch_mode"
        and record.reason == "option_rejected"
    )


def _transition_of(spec: ModeSpec, record: TransitionRecord) -> TransitionKey | None:
    source, dest = record.from_mode, record.to_mode
    if record.event == EVENT_CREATED:
        return ("start", "", spec.initial) if dest == spec.initial else None
    if record.origin == "switch_mode":
        return _switch_key(spec, record)
    if source is None or dest is None or not spec.has_mode(source):
        return None
    kind: TriggerKind = "restore" if record.origin == "restore" else "client_change"
    return (kind, source, dest) if spec.table.allows(kind, source, dest) else None


def _switch_key(spec: ModeSpec, record: TransitionRecord) -> TransitionKey | None:
    source = record.proposed_in or record.from_mode
    switch = spec.switch_from(source) if source is not None else None
    if source is None or switch is None:
        return None
    for option in switch.options:
        if option.option_id == record.option_id and option.allows == (
            record.event == EVENT_CHANGED
        ):
            return ("switch_mode", source, option.option_id)
    return None
