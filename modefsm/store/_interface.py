"""The session store: one mode history per session, shared by every process of an agent.

A store sequences the committed records (``session_created``, ``mode_changed``) of each
session across processes: an append names the head it builds on, and the store refuses it
with :class:`SessionMoved` when another process got there first, writing nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from modefsm.errors import LogError, ModefsmError
from modefsm.log import TransitionRecord
from modefsm.restore import RestorePoint

__all__ = ["SessionMoved", "SessionStore", "StoreBusy", "open_store"]


class SessionMoved(ModefsmError):  # noqa: N818 - the interface's name
    """Another process changed the session first; nothing was written.

    Attributes:
        current: where the session stands now (``None``: it has no committed record).
        seq: the ``seq`` the refused append asked for.
    """

    def __init__(self, current: RestorePoint | None, session_id: str, seq: int) -> None:
        """Build the error from the session's current point and the refused ``seq``."""
        self.current = current
        self.seq = seq
        at = current.seq if current is not None else 0
        super().__init__(
            f"sessionId {session_id}: seq {seq} is taken or out of order "
            f"(the session is at seq {at} in the store)"
        )


class StoreBusy(LogError):  # noqa: N818 - the interface's name
    """A bounded wait for the store (a lock, a statement) ran out; nothing was written."""


class SessionStore(Protocol):
    """What the engine needs from a store (see the README's store section)."""

    def append(self, event: str, fields: dict[str, Any], head: RestorePoint | None) -> str:
        """Write one committed record ahead of the change; return its ``digest``.

        ``fields["seq"]`` must be ``head.seq + 1`` (1 when *head* is ``None``). The store
        adds ``prev``, ``session_prev`` and ``digest``.

        Raises:
            SessionMoved: *head* is not the session's head in the store; nothing written.
            StoreBusy: a bounded wait ran out; nothing written.
            LogError: the write failed; nothing committed.
        """
        ...  # pragma: no cover

    def note(self, event: str, fields: dict[str, Any]) -> None:
        """Write a rejection or a diagnostic (not sequenced)."""
        ...  # pragma: no cover

    def restore_point(self, session_id: str) -> RestorePoint | None:
        """The session's last committed point, never stale; ``None`` if it has none."""
        ...  # pragma: no cover

    def history(self, session_id: str) -> Iterator[TransitionRecord]:
        """The session's committed records, ``seq`` 1 to n."""
        ...  # pragma: no cover

    def close(self) -> None:
        """Release the store's files or connections."""
        ...  # pragma: no cover


def open_store(
    target: str | Path, *, fsync: bool = False, lock_timeout: float = 1.0
) -> SessionStore:
    """Open the store at *target*: a ``postgresql://`` URL opens a :class:`PgStore`.

    Raises:
        LogError: the store cannot be opened (the message says why).
    """
    text = str(target)
    if text.startswith(("postgresql://", "postgres://")):
        from modefsm.store._postgres import PgStore  # noqa: PLC0415 - psycopg is optional

        del fsync  # the server's settings decide durability
        return PgStore(text, lock_timeout=lock_timeout)
    msg = f"not a store URL: {text!r} (expected postgresql://...)"
    raise LogError(msg)
