"""A live session as the engine keeps it: one exact tuple of plain values, its row.

The engine holds each live session as a row, ``sessionId -> (mode, seq, previous, digest,
cwd, config, doubt, serial)``: strings, ints, ``None``, a bool and, for the host's config
values, a tuple of ``(configId, value)`` pairs. An exact tuple of such values is left
untracked by CPython's garbage collector after the first collection that sees it, so
live sessions add nothing to what later collections walk, however many there are. A
change replaces the session's row with a new one.

:class:`Session` is the public face of a row: a view built on demand by the engine
(:meth:`ModeEngine.new_session <modefsm.engine.ModeEngine.new_session>`,
:meth:`~modefsm.engine.ModeEngine.get`, ...), which reads the session's current row each
time an attribute is read.
"""

from __future__ import annotations

from typing import Final

from modefsm.engine._machine import state_name

__all__ = ["Session"]  # the row layout and its helpers are the engine's own

Config = tuple[tuple[str, str | bool], ...]
"""A session's host config values, ``((configId, value), ...)`` in the order set."""

Row = tuple[str, int, str | None, str | None, str | None, Config | None, bool, int]
"""``(mode, seq, previous, digest, cwd, config, doubt, serial)``: see :class:`Session`;
*serial* tells apart two lives of one ``sessionId`` in an engine (closed, then created
again)."""

MODE: Final = 0
SEQ: Final = 1
PREVIOUS: Final = 2
DIGEST: Final = 3
CWD: Final = 4
CONFIG: Final = 5
DOUBT: Final = 6
SERIAL: Final = 7


def config_dict(config: Config | None) -> dict[str, str | bool] | None:
    """A row's config values as ``{configId: value}`` (a new dict), or ``None``."""
    return None if config is None else dict(config)


def config_pairs(values: dict[str, str | bool] | None) -> Config | None:
    """``{configId: value}`` as a row keeps it, or ``None``."""
    return None if values is None else tuple(values.items())


def row_of(session: Session) -> Row:
    """The current row of *session* (its last one once closed): for the engine's code."""
    return session._now()  # noqa: SLF001 - the view's own module


def put_row(session: Session, row: Row) -> None:
    """Make *row* the row of *session*, in its engine too while it is live."""
    session._put(row)  # noqa: SLF001 - the view's own module


def is_live(session: Session) -> bool:
    """Whether *session* is live in its engine (not closed, not being restored)."""
    return session._live()  # noqa: SLF001 - the view's own module


def commit_row(
    session: Session, mode: str, seq: int, previous: str | None, digest: str | None
) -> Row:
    """Give *session* the row of a committed change; return the row it replaces.

    *previous* ``None`` keeps the row's previous mode. Its ``cwd``, config values, doubt
    flag and serial are kept.
    """
    rows = session._rows  # noqa: SLF001 - the view's own module
    session_id = session.session_id
    old = session._row  # noqa: SLF001
    live = rows.get(session_id)
    attached = live is not None and live[SERIAL] == old[SERIAL]
    if attached:
        old = live  # type: ignore[assignment]  # not None: checked just above
    row: Row = (mode, seq, old[PREVIOUS] if previous is None else previous, digest, *old[CWD:])
    if attached:
        rows[session_id] = row
    session._row = row  # noqa: SLF001
    return old


def with_doubt(session: Session, *, doubt: bool) -> None:
    """Set the ``doubt`` flag of *session*'s row (nothing is made when it is already so)."""
    row = session._now()  # noqa: SLF001 - the view's own module
    if row[DOUBT] is not doubt:
        session._put((*row[:DOUBT], doubt, row[SERIAL]))  # noqa: SLF001


class Session:
    """One live session of an engine: a view of the engine's row for it.

    Built by the engine on demand (it keeps no ``Session`` object per session). Each
    attribute is read from the session's current row, so a view held across changes shows
    the session as committed now. Once the session is closed, the view keeps showing the
    values it last read (a later session created with the same ``sessionId`` is another
    session, which this view does not show).

    Attributes:
        session_id: ACP ``sessionId``.
        state: the current mode id (ACP ``currentModeId``).
        fsm_state: the machine's state (:func:`~modefsm.engine.state_name` of the mode).
        seq: the sequence number of the session's last record (1 after creation).
        previous: the mode before the last client or switch change (the target of
            ``$previous``), or ``None``.
        digest: the ``digest`` of the session's last record when written through a
            :class:`~modefsm.store.SessionStore` (the next record's ``session_prev``).
        cwd: the ACP ``cwd`` given to ``session/new`` in this process, or ``None``.
        doubt: a record of this session was sent to the store and its commit not answered
            (:class:`~modefsm.store.StoreInDoubt`): its next use reads its point back first.
        config: the values of the host's config options set in the session, by
            ``configId`` (a new dict at each read; ``None``: none set, the others are at
            their defaults).
    """

    __slots__ = ("_row", "_rows", "session_id")

    def __init__(self, session_id: str, rows: dict[str, Row], row: Row) -> None:
        """The view of *session_id*, whose row is *row*, in the engine's *rows*."""
        self.session_id = session_id
        self._rows = rows
        self._row = row

    def _now(self) -> Row:
        """The session's current row (its last one once it is closed)."""
        row = self._rows.get(self.session_id)
        if row is not None and row[SERIAL] == self._row[SERIAL]:
            self._row = row
            return row
        return self._row

    def _live(self) -> bool:
        """Whether this session is live (not closed, not yet restored)."""
        row = self._rows.get(self.session_id)
        return row is not None and row[SERIAL] == self._row[SERIAL]

    def _put(self, row: Row) -> None:
        """Make *row* the session's row (in the engine too while it is live)."""
        if self._live():
            self._rows[self.session_id] = row
        self._row = row

    @property
    def state(self) -> str:
        """The current mode id (ACP ``currentModeId``)."""
        return self._now()[MODE]

    @property
    def fsm_state(self) -> str:
        """The machine's state: :func:`~modefsm.engine.state_name` of :attr:`state`."""
        return state_name(self._now()[MODE])

    @property
    def seq(self) -> int:
        """The sequence number of the session's last record."""
        return self._now()[SEQ]

    @property
    def previous(self) -> str | None:
        """The mode before the last client or switch change, or ``None``."""
        return self._now()[PREVIOUS]

    @property
    def digest(self) -> str | None:
        """The ``digest`` of the session's last record written through a store."""
        return self._now()[DIGEST]

    @property
    def cwd(self) -> str | None:
        """The ACP ``cwd`` given to ``session/new`` in this process, or ``None``."""
        return self._now()[CWD]

    @property
    def doubt(self) -> bool:
        """Whether a record's commit went unanswered (read back at the next use)."""
        return self._now()[DOUBT]

    @property
    def config(self) -> dict[str, str | bool] | None:
        """The host config values set in the session (a new dict), or ``None``."""
        return config_dict(self._now()[CONFIG])

    def __eq__(self, other: object) -> bool:
        """Whether *other* is a view of the same session (the same life of it, same engine)."""
        if not isinstance(other, Session):
            return NotImplemented
        return (
            self.session_id == other.session_id
            and self._rows is other._rows
            and self._row[SERIAL] == other._row[SERIAL]
        )

    def __hash__(self) -> int:
        """The hash of the ``sessionId`` (views of one session are equal)."""
        return hash(self.session_id)

    def __repr__(self) -> str:
        """Return ``Session('sess_1', state='ask', seq=1)``."""
        row = self._now()
        return f"Session({self.session_id!r}, state={row[MODE]!r}, seq={row[SEQ]})"
