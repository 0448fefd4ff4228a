"""The conversation journal: the ``session/update`` items a session's ``session/load`` replays.

ACP v1 says an agent that advertises ``loadSession`` MUST replay the entire conversation
on ``session/load`` (user message chunks, agent message chunks, tool calls and their
updates) before it answers. A :class:`ConversationStore` keeps those items per session,
in the order they were sent, as the ACP v1 ``update`` objects (wire names, e.g.
``{"sessionUpdate": "tool_call", "toolCallId": ...}``).

With a file (:meth:`ConversationStore.to_file`; ``modefsm serve --log LOG`` keeps it at
``LOG.conversation``), every item is one JSON line written with a single ``write`` on an
``O_APPEND`` file *before* it is sent (write-ahead, like the transition log's records)::

    {"session_id":"sess_1","part":"mode","update":{...},"event":"modefsm.conversation"}

``part`` is ``"mode"`` for the ``switch_mode`` tool calls modefsm itself sends and
``"host"`` for everything else (the agent's prompts and messages). The transition log is
not touched: its records, digests and replay reports stay as they are.

A ``tool_call`` item's line also names the process that sent it, ``"owner": [PID, START]``
(*START*: the process's start time in clock ticks since boot, from ``/proc``; ``null`` where
there is none), so that a later process can tell whether a tool call left open is still the
sender's own (:func:`owner_alive`) or was abandoned by a process that ended; and, for a tool
call the session's mode decides (a ``switch_mode`` switch, a host's ``run_tool``: one that
may have been asked), ``"gated": true``.

Bounds: a session keeps at most :data:`CONVERSATION_MAX_ENTRIES` items and
:data:`CONVERSATION_MAX_BYTES` bytes of them (the oldest are dropped first, from memory and
from what a later load reads back), and at most :data:`CONVERSATION_SESSIONS_CACHED`
sessions are held in memory (others are read back from the file when loaded).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any, Literal

import orjson

from modefsm.errors import LogError
from modefsm.log._files import open_private

__all__ = [
    "CONVERSATION_MAX_BYTES",
    "CONVERSATION_MAX_ENTRIES",
    "CONVERSATION_SESSIONS_CACHED",
    "EVENT_CONVERSATION",
    "JOURNAL_SUFFIX",
    "ConversationItem",
    "ConversationStore",
    "Owner",
    "Part",
    "journal_path",
    "owner_alive",
]

EVENT_CONVERSATION = "modefsm.conversation"
CONVERSATION_MAX_ENTRIES = 1000
"""Items a session keeps for replay; older ones are dropped first."""
CONVERSATION_MAX_BYTES = 1 << 20
"""Bytes (of the items as compact JSON) a session keeps for replay; older items go first."""
CONVERSATION_SESSIONS_CACHED = 256
"""Sessions whose conversation is held in memory; the least recently used is read back from
the file when it is needed again (without a file, it is forgotten)."""

JOURNAL_SUFFIX = ".conversation"
"""What ``modefsm serve --log LOG`` appends to the log's name for its journal."""


def journal_path(log_path: Path) -> Path:
    """The journal ``serve`` keeps beside the log *log_path*: its name + ``.conversation``."""
    return log_path.with_name(log_path.name + JOURNAL_SUFFIX)


Part = Literal["mode", "host"]
"""Who sent an item: ``mode`` (modefsm's ``switch_mode`` tool calls) or ``host``."""


Owner = tuple[int, int | None]
"""The process that sent a ``tool_call``: ``(pid, start)``, *start* its start time in clock
ticks since boot (``None`` where ``/proc`` does not tell)."""


def _proc_stat(pid: int) -> tuple[bytes, int | None] | None:
    """Process *pid*'s state and start time from ``/proc/PID/stat`` (fields 3 and 22).

    The state is one letter (``R``, ``S``, ``Z``...); the start time is in clock ticks
    since boot (``None`` if the line does not hold one). ``None``: no such process, or
    no ``/proc``.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:  # noqa: PTH123 - one small read
            stat_line = file.read()
    except OSError:
        return None
    fields = stat_line[stat_line.rfind(b")") + 2 :].split()
    if not fields:
        return None
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return fields[0], None


def _start_ticks(pid: int) -> int | None:
    """Process *pid*'s start time in clock ticks since boot (``/proc/PID/stat`` field 22)."""
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


_ENDED_STATES = (b"Z", b"X")
"""``/proc`` states of a process that has ended: a zombie (not reaped yet), or dead."""


_owner: Owner | None = None


def this_owner() -> Owner:
    """This process, as a ``tool_call`` line names its sender (:data:`Owner`)."""
    global _owner  # noqa: PLW0603 - computed once per process (a fork computes its own)
    pid = os.getpid()
    if _owner is None or _owner[0] != pid:
        _owner = (pid, _start_ticks(pid))
    return _owner


def owner_alive(owner: Owner | None) -> bool:
    """Whether the process *owner* names still runs (``False`` for ``None``: not named).

    With a start time, a process with the same pid that started at another time is another
    process (the pid was reused): not alive. Without one, the pid alone decides. A process
    that ended and was not reaped yet (a zombie: state ``Z`` or ``X`` in ``/proc``) is
    not alive.
    """
    if owner is None:
        return False
    pid, start = owner
    stat = _proc_stat(pid)
    if stat is not None and stat[0] in _ENDED_STATES:
        return False
    if start is not None:
        return stat is not None and stat[1] == start
    try:
        os.kill(pid, 0)
    except PermissionError:  # it runs, as another user
        return True
    except OSError:
        return False
    return True


def _owner_of(value: object) -> Owner | None:
    """The :data:`Owner` a journal line's ``owner`` holds, or ``None`` if it holds none."""
    if isinstance(value, list) and len(value) == 2:  # noqa: PLR2004 - [pid, start]
        pid, start = value
        if type(pid) is int and (start is None or type(start) is int):
            return pid, start
    return None


class ConversationItem(tuple[Part, dict[str, Any], Owner | None, bool]):
    """One kept item: ``(part, update, owner, gated)``.

    *update* is an ACP v1 ``session/update`` update; *owner* the process that sent a
    ``tool_call`` item (``None`` for other items, and in journals written without it);
    *gated* whether the ``tool_call`` is one the session's mode decides, and may ask the
    client about (a ``switch_mode`` switch, or a host's ``run_tool``), rather than one a
    host only reported.
    """

    __slots__ = ()

    @property
    def gated(self) -> bool:
        """Whether this ``tool_call`` item is decided by the mode (it may have been asked)."""
        return self[3]

    @property
    def owner(self) -> Owner | None:
        """The process that sent this ``tool_call`` item (see :func:`owner_alive`)."""
        return self[2]

    @property
    def part(self) -> Part:
        """``mode`` or ``host`` (see :data:`Part`)."""
        return self[0]

    @property
    def update(self) -> dict[str, Any]:
        """The ``update`` object (wire names)."""
        return self[1]


class _Session:
    __slots__ = ("items", "size")

    def __init__(self) -> None:
        self.items: deque[tuple[ConversationItem, int]] = deque()
        self.size = 0

    def add(self, item: ConversationItem, size: int, max_entries: int, max_bytes: int) -> None:
        self.items.append((item, size))
        self.size += size
        while len(self.items) > max_entries or (self.size > max_bytes and len(self.items) > 1):
            _old, old_size = self.items.popleft()
            self.size -= old_size


class ConversationStore:
    """Per-session conversation items, kept in memory and (optionally) in a journal file.

    Args:
        path: the journal file (JSON lines, see the module docstring), or ``None`` to keep
            the items in memory only (lost with the process).
        fsync: sync each line to disk before it takes effect.
        max_entries: :data:`CONVERSATION_MAX_ENTRIES` by default.
        max_bytes: :data:`CONVERSATION_MAX_BYTES` by default.

    Raises:
        LogError: *path* is not a regular file, cannot be opened, or holds something other
            than a conversation journal.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        fsync: bool = False,
        max_entries: int = CONVERSATION_MAX_ENTRIES,
        max_bytes: int = CONVERSATION_MAX_BYTES,
    ) -> None:
        """Open (or create) the journal at *path*; see the class docstring."""
        self.path = Path(path) if path is not None else None
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._fsync = fsync
        self._fd: int | None = None
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._writes: dict[str, int] = {}
        if self.path is not None:
            self._fd = _open(self.path)

    def append(
        self, session_id: str, update: dict[str, Any], part: Part = "host", *, gated: bool = False
    ) -> None:
        """Keep *update* as the session's next item; written to the file before it returns.

        Args:
            session_id: ACP ``sessionId``.
            update: an ACP v1 ``session/update`` update (its JSON object).
            part: who sent it (:data:`Part`).
            gated: a ``tool_call`` the session's mode decides (see
                :attr:`ConversationItem.gated`); the line says ``"gated": true``.

        Raises:
            LogError: the line could not be written (nothing is kept; do not send it).
        """
        line: dict[str, Any] = {"session_id": session_id, "part": part, "update": update}
        owner = this_owner() if update.get("sessionUpdate") == "tool_call" else None
        if owner is not None:
            line["owner"] = owner
        gated = gated and owner is not None
        if gated:
            line["gated"] = True
        data = orjson.dumps({**line, "event": EVENT_CONVERSATION}) + b"\n"
        if self._fd is not None:
            _write(self._fd, data, self.path, fsync=self._fsync)
        self._writes[session_id] = self._writes.get(session_id, 0) + 1
        session = self._sessions.get(session_id)
        if session is None:
            if self._fd is not None:
                return  # not cached: a later history() reads it back from the file
            session = self._cache(session_id, _Session())
        else:
            self._sessions.move_to_end(session_id)
        item = ConversationItem((part, update, owner, gated))
        session.add(item, len(data), self.max_entries, self.max_bytes)

    def start(self, session_id: str) -> None:
        """Note a new session: its (empty) conversation need never be read from the file."""
        self._cache(session_id, _Session())

    def forget(self, session_id: str) -> None:
        """Drop the session from memory (the file keeps its items)."""
        self._sessions.pop(session_id, None)

    async def history(self, session_id: str) -> list[ConversationItem]:
        """The session's kept items, oldest first (``[]`` for a session never seen).

        A session not in memory is read back from the file in a worker thread (the whole
        journal is scanned, so the event loop never waits on it).
        """
        session = self._sessions.get(session_id)
        if session is None and self.path is not None:
            writes = self._writes.get(session_id, 0)
            items = await asyncio.to_thread(
                _read, self.path, session_id, self.max_entries, self.max_bytes
            )
            session = self._sessions.get(session_id)
            if session is None:
                session = _Session()
                for item, size in items:
                    session.add(item, size, self.max_entries, self.max_bytes)
                if self._writes.get(session_id, 0) == writes:  # nothing appended meanwhile
                    self._cache(session_id, session)
        if session is None:
            return []
        self._sessions.move_to_end(session_id)
        return [item for item, _size in session.items]

    def _cache(self, session_id: str, session: _Session) -> _Session:
        self._sessions[session_id] = session
        self._sessions.move_to_end(session_id)
        while len(self._sessions) > CONVERSATION_SESSIONS_CACHED:
            self._sessions.popitem(last=False)
        return session

    def close(self) -> None:
        """Close the journal file (a no-op in memory)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _open(path: Path) -> int:
    try:
        fd = open_private(path, os.O_RDWR | os.O_APPEND, "the conversation journal")
    except OSError as exc:
        msg = f"cannot open the conversation journal: {exc.strerror}"
        raise LogError(msg, str(path)) from None
    try:
        _check_journal(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_journal(fd: int, path: Path) -> None:
    """Refuse anything but a regular file holding a journal; end a torn last line."""
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        msg = "not a regular file: the conversation journal must be one"
        raise LogError(msg, str(path))
    if status.st_size:
        head = os.pread(fd, 64, 0)
        if not head.startswith(b'{"session_id":'):
            msg = "exists and is not a conversation journal: not appended to"
            raise LogError(msg, str(path))
        if os.pread(fd, 1, status.st_size - 1) != b"\n":  # a line torn by a crash
            os.write(fd, b"\n")


def _write(fd: int, data: bytes, path: Path | None, *, fsync: bool) -> None:
    start = os.lseek(fd, 0, os.SEEK_END)
    try:
        written = os.write(fd, data)
        while written < len(data):
            written += os.write(fd, data[written:])
        if fsync:
            os.fsync(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)  # a line is written whole or not at all
        msg = f"cannot write the conversation journal: {exc.strerror}; the item was not kept"
        raise LogError(msg, str(path)) from None


def _read(
    path: Path, session_id: str, max_entries: int, max_bytes: int
) -> list[tuple[ConversationItem, int]]:
    """The session's items in *path*, oldest first, within the bounds (a torn line skipped)."""
    needle = b'{"session_id":' + orjson.dumps(session_id) + b","
    session = _Session()
    try:
        with path.open("rb") as file:
            for line in file:
                if not line.startswith(needle):
                    continue
                try:
                    data = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                part, update = data.get("part"), data.get("update")
                if part in ("mode", "host") and isinstance(update, dict):
                    owner = _owner_of(data.get("owner"))
                    item = ConversationItem((part, update, owner, data.get("gated") is True))
                    session.add(item, len(line), max_entries, max_bytes)
    except OSError as exc:
        msg = f"cannot read the conversation journal: {exc.strerror}"
        raise LogError(msg, str(path)) from None
    return list(session.items)
