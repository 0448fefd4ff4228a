"""Reading transition logs back: records, the last mode of each session, restore.

This is the read side of :mod:`modefsm.records`: the same :class:`TransitionRecord`
model parses what the engine wrote. Lines that are not modefsm records (a host's own
log lines) are skipped; a torn last line (a crash mid-write) is skipped too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import orjson
from pydantic import ValidationError

from modefsm.records import EVENT_CHANGED, EVENT_CREATED, TransitionRecord

__all__ = ["LogRestore", "RestorePoint", "iter_records", "last_points"]


class RestorePoint(NamedTuple):
    """Where a session stood at its last committed record.

    Attributes:
        session_id: ACP ``sessionId``.
        mode: the ``to_mode`` of its last ``session_created``/``mode_changed`` record.
        seq: that record's ``seq``.
        previous: the ``from_mode`` of the session's last client or switch change, which
            ``$previous`` switch options return to (``None`` if there was none).
    """

    session_id: str
    mode: str
    seq: int
    previous: str | None = None


def iter_records(paths: Iterable[str | Path]) -> Iterator[TransitionRecord]:
    """Yield the modefsm records of the JSON-lines files *paths*, in order.

    Lines that are not JSON objects with a ``modefsm.`` event, or that do not parse as a
    :class:`TransitionRecord`, are skipped.
    """
    for path in paths:
        with Path(path).open("rb") as file:
            for line in file:
                try:
                    data = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if not isinstance(data, dict) or data.get("event") not in _RECORD_EVENTS:
                    continue
                try:
                    yield TransitionRecord.model_validate(data)
                except ValidationError:
                    continue


_RECORD_EVENTS = frozenset(
    {EVENT_CREATED, EVENT_CHANGED, "modefsm.change_rejected"},
)


def last_points(paths: Iterable[str | Path]) -> dict[str, RestorePoint]:
    """The :class:`RestorePoint` of every session found in *paths*."""
    points: dict[str, RestorePoint] = {}
    for record in iter_records(paths):
        if record.event in (EVENT_CREATED, EVENT_CHANGED) and record.seq is not None:
            assert record.to_mode is not None  # noqa: S101 - committed records name a mode
            last = points.get(record.session_id)
            previous = last.previous if last else None
            if record.origin not in ("new", "restore"):
                previous = record.from_mode
            points[record.session_id] = RestorePoint(
                record.session_id, record.to_mode, record.seq, previous
            )
    return points


class LogRestore:
    """Find a session's last mode in a transition log file (a full scan per lookup).

    Args:
        path: the JSON-lines transition log.
    """

    def __init__(self, path: str | Path) -> None:
        """Read from *path* (which may not exist yet)."""
        self.path = Path(path)

    def restore_point(self, session_id: str) -> RestorePoint | None:
        """The last committed point of *session_id*, or ``None`` if the log never saw it."""
        if not self.path.exists():
            return None
        return last_points([self.path]).get(session_id)
