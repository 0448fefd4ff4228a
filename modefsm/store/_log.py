"""A transition log as the engine's store: every line written to it, nothing read back.

For an engine whose records go to a stream (``modefsm serve`` without ``--log`` writes
them to stderr), a file nothing restores from, or a host's own structlog logger: the
lines are exactly what :class:`~modefsm.log.TransitionLog` writes (chained by ``prev``
and ``digest``; no ``session_prev``, which only the shared stores keep). Sessions are
sequenced and guarded as :class:`~modefsm.store.MemoryStore` does, from points kept in
this process's memory for the live sessions only; nothing is restorable from this store
after the process ends, and a closed session is forgotten (``session/load`` of it is
refused as unknown). A :class:`~modefsm.store.FileStore` is the store that restores.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from modefsm.log import RECORD_EVENTS, TransitionLog
from modefsm.store._memory import MemoryStore

if TYPE_CHECKING:
    from modefsm.log import DecisionRecord, TransitionRecord
    from modefsm.spec import ModeSpec

__all__ = ["LogStore"]


class LogStore(MemoryStore):
    """A :class:`~modefsm.store.SessionStore` that writes every line to a transition log.

    Memory holds one point per live session (dropped when the engine closes it), a
    16-byte digest of each ``toolCallId`` it decided (every one, whatever its length, for
    :meth:`note_once_async`: the log is not read back; forgotten with the session), and one
    ``session/list`` entry per live session created with a ``cwd``; :attr:`lines` stays
    empty (the lines are in the log). :meth:`append` checks the session's head, then hands
    the record's dict to the log's :meth:`~modefsm.log.TransitionLog.write_own`, which
    chains, renders and writes it: the dict becomes the line (``prev``, ``digest``,
    ``event`` and ``level`` added), not copied.

    Args:
        log: where every line goes, written before the change it describes takes effect
            (a :class:`~modefsm.log.TransitionLog` over a file, a stream or a host's
            logger); the caller keeps it and closes it.
        timeout: the store's :attr:`timeout` in seconds (the engine bounds by it how long
            one session's requests wait for each other); nothing here waits.

    Example:
        >>> import asyncio, io
        >>> from modefsm import LogStore, ModeEngine, TransitionLog, preset
        >>> buffer = io.BytesIO()
        >>> engine = ModeEngine(preset("seed"), store=LogStore(TransitionLog.to_stream(buffer)))
        >>> _ = engine.new_session("sess_1")
        >>> _ = asyncio.run(engine.set_mode("sess_1", "architect"))
        >>> lines = buffer.getvalue().splitlines()
        >>> len(lines), b'"event":"modefsm.spec"' in lines[0]
        (3, True)
        >>> b'"to_mode":"architect"' in lines[2]
        True
    """

    _session_prev = False  # the log's lines have none

    def __init__(self, log: TransitionLog, *, timeout: float = 1.0) -> None:
        """A store writing to *log*, holding no session yet."""
        super().__init__(timeout=timeout)
        self.log = log

    @property
    def log(self) -> TransitionLog:
        """The transition log every line goes to (settable: a new log takes the next line)."""
        return self._log

    @log.setter
    def log(self, log: TransitionLog) -> None:
        self._log = log
        self._chain = log.write_own  # append's guard, then one call: the log chains, writes

    def describe(self, spec: ModeSpec) -> None:
        """Name *spec* in the log: a header before its first record (see ``TransitionLog``)."""
        self.log.describe(spec)

    def _write(self, event: str, fields: dict[str, Any], exact: bool = False) -> str | None:  # noqa: FBT001, FBT002 - as MemoryStore's
        """Write one line to the log; a record's ``digest`` (the log chains it).

        Raises:
            LogError: the log could not write it (nothing was kept).
        """
        digest = self.log.write_own(event, {**fields}, exact)
        return digest if event in RECORD_EVENTS else None

    def history(self, session_id: str) -> Iterator[TransitionRecord]:
        """Nothing: the records are in the log, which this store does not read."""
        del session_id
        return iter(())

    def decisions(self, session_id: str) -> Iterator[DecisionRecord]:
        """Nothing: the decisions are in the log, which this store does not read."""
        del session_id
        return iter(())

    async def reopen_async(self) -> None:
        """Reopen the log's file after a rotation, when it is a file (else nothing).

        Raises:
            LogError: the new file cannot be opened (the old one is still used).
        """
        if self.log.reopenable:
            self.log.reopen()

    def release(self, session_id: str) -> None:
        """Forget the closed session *session_id* (the engine calls it on close)."""
        self._forget(session_id)
