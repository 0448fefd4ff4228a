"""The transition log: one JSON line per fact, written through a private structlog logger.

The same :class:`TransitionRecord` model describes what the engine writes and what
:mod:`modefsm.replay` parses. Three events exist:

``modefsm.session_created``
    a session began (``seq`` 1, ``origin`` ``new``, ``from_mode`` null).
``modefsm.mode_changed``
    a committed change (``seq`` 2, 3, ... without gaps, per session).
``modefsm.change_rejected``
    an attempt that changed nothing (``seq`` null, ``reason`` says why).

A line looks like::

    {"session_id":"sess_1","seq":2,"from_mode":"ask","to_mode":"architect",
     "origin":"set_mode","request_id":3,"spec":"seed","spec_hash":"sha256:e9ad63e2f0c19cf3",
     "timestamp":"2026-11-30T13:45:01.123456Z","event":"modefsm.mode_changed","level":"info"}

modefsm never calls ``structlog.configure()``: unconfigured structlog prints to stdout,
which would corrupt an ACP stdio stream. :class:`TransitionLog` builds its own logger
over a file or binary stream, or wraps a logger the host passes in.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Literal, Protocol

import orjson
import structlog
from pydantic import BaseModel, ConfigDict

from modefsm.errors import LogError

__all__ = [
    "EVENT_CHANGED",
    "EVENT_CREATED",
    "EVENT_REJECTED",
    "Origin",
    "TransitionLog",
    "TransitionRecord",
    "utc_timestamp",
]

EVENT_CREATED = "modefsm.session_created"
EVENT_CHANGED = "modefsm.mode_changed"
EVENT_REJECTED = "modefsm.change_rejected"

Origin = Literal["new", "set_mode", "set_config_option", "switch_mode", "restore"]
"""Who caused a record: ``new`` (session creation), a client request, an approved switch,
or a restore on ``session/load``/``session/resume``."""

RejectReason = Literal[
    "unknown_mode",
    "unknown_config_option",
    "invalid_value",
    "not_allowed",
    "hook_failed",
    "option_rejected",
    "cancelled",
    "option_not_offered",
    "unknown_tool_call",
    "session_closed",
    "no_previous_mode",
]
"""Why a ``modefsm.change_rejected`` record changed nothing."""


class TransitionRecord(BaseModel):
    """One line of the transition log.

    Attributes:
        event: ``modefsm.session_created``, ``modefsm.mode_changed`` or
            ``modefsm.change_rejected``.
        timestamp: UTC, ISO 8601 with a ``Z`` suffix.
        session_id: ACP ``sessionId``.
        seq: the session's sequence number, 1 for its creation, then +1 per committed
            change; ``None`` on rejections.
        from_mode: the mode before (``None`` on creation).
        to_mode: the mode after (on a rejection: the mode asked for, if any).
        origin: see :data:`Origin`.
        request_id: the JSON-RPC id of the request that caused it, if known.
        tool_call_id: ACP ``toolCallId`` of a ``switch_mode`` tool call.
        option_id: ACP ``optionId`` the user selected.
        proposed_in: for an approved switch, the mode it was proposed in when the client
            changed the mode while the permission request was pending.
        reason: why a rejection changed nothing.
        spec: the spec's name.
        spec_hash: the spec's :attr:`~modefsm.spec.ModeSpec.content_hash`.
        level: the log level (``info``, ``warning`` for rejections).
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    event: Literal["modefsm.session_created", "modefsm.mode_changed", "modefsm.change_rejected"]
    timestamp: str
    session_id: str
    seq: int | None
    from_mode: str | None
    to_mode: str | None
    origin: Origin
    request_id: str | int | None = None
    tool_call_id: str | None = None
    option_id: str | None = None
    proposed_in: str | None = None
    reason: RejectReason | None = None
    spec: str
    spec_hash: str
    level: str = "info"


def utc_timestamp() -> str:
    """Now, in UTC, as ISO 8601 with microseconds and a ``Z`` suffix.

    The same text as ``datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")`` at a quarter
    of its cost: the date and time up to the second are formatted once per second.

    Example:
        >>> from datetime import datetime
        >>> stamp = utc_timestamp()
        >>> datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").year >= 2024
        True
    """
    second, nanoseconds = divmod(time.time_ns(), 1_000_000_000)
    return f"{_utc_second(second)}.{nanoseconds // 1000:06d}Z"


@functools.lru_cache(maxsize=4)
def _utc_second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


class _Logger(Protocol):
    def info(self, event: str, **kw: Any) -> Any: ...  # pragma: no cover
    def warning(self, event: str, **kw: Any) -> Any: ...  # pragma: no cover


class _SyncedFile:
    """An append-only file whose every write reaches the disk (``os.fsync``) before returning."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, data: bytes) -> int:
        written = os.write(self._fd, data)
        os.fsync(self._fd)
        return written

    def flush(self) -> None:
        """Nothing to flush: :meth:`write` already synced."""


def _processors() -> list[Callable[..., Any]]:
    return [structlog.processors.JSONRenderer(serializer=orjson.dumps)]


class _JSONLines:
    """structlog's renderer writing one JSON line per record to a binary stream.

    A record is its fields, then ``event``, then ``level`` (the method name, as structlog's
    ``add_log_level`` sets it), rendered by structlog's ``JSONRenderer`` with ``orjson``
    (:func:`_processors`): the same bytes as a ``structlog.BytesLogger`` behind a bound
    logger with ``add_log_level`` and that renderer. Each line is written with a single
    ``write``, then ``flush``. It leaves out the bound logger's per-call work (keyword
    packing, context copy, method dispatch, the ``BytesLogger`` lock), which cost more
    than rendering and writing the line together, and the ``add_log_level`` call (the
    level is one key); :meth:`TransitionLog.write` hands it the record's dict directly.
    """

    def __init__(self, stream: IO[bytes]) -> None:
        self._processors = tuple(_processors())
        self._write = stream.write
        self._flush = stream.flush

    def write(self, method: str, event: str, fields: dict[str, Any]) -> None:
        """Render ``fields``, ``event`` and ``level`` through the processors; write one line."""
        rendered: Any = {**fields, "event": event, "level": method}
        for processor in self._processors:
            rendered = processor(self, method, rendered)
        self._write(rendered + b"\n")
        self._flush()

    def info(self, event: str, **kw: Any) -> None:
        """The structlog logger method, for callers that hold the logger."""
        self.write("info", event, kw)

    def warning(self, event: str, **kw: Any) -> None:
        """The structlog logger method, for callers that hold the logger."""
        self.write("warning", event, kw)


class TransitionLog:
    """Where the engine writes its records.

    Build one with :meth:`to_file` or :meth:`to_stream`, or pass a host's structlog
    logger to the constructor. Writes are synchronous: a record is in the file (flushed to
    the operating system, or synced to disk with ``fsync=True``) before the change it
    describes becomes visible, so no acknowledged change can be lost with the process.

    Args:
        logger: any object with structlog's ``info(event, **kw)`` and ``warning(...)``.
        path: the file behind the logger, if any, for messages.
    """

    def __init__(self, logger: Any, path: str | None = None) -> None:
        """Wrap *logger* (a structlog bound logger or anything with ``info``/``warning``)."""
        self._logger: _Logger = logger
        self._lines = logger if isinstance(logger, _JSONLines) else None
        self.path = path
        self._close: Callable[[], None] | None = None

    @classmethod
    def to_file(cls, path: str | Path, *, fsync: bool = False) -> TransitionLog:
        """Append JSON lines to *path*, one unbuffered ``write`` per record.

        Each record is written with a single ``write`` on a file opened with ``O_APPEND``,
        so lines from several writers never interleave within a line.

        Args:
            path: the log file; created if missing, never truncated.
            fsync: also ``fsync`` after each record (survives power loss; costs a disk flush).

        Raises:
            LogError: the file cannot be opened.
        """
        path = Path(path)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LogError(f"cannot open the transition log: {exc.strerror}", str(path)) from None
        file: Any = _SyncedFile(fd) if fsync else os.fdopen(fd, "ab", buffering=0)
        log = cls.to_stream(file, path=str(path))
        log._close = (lambda: os.close(fd)) if fsync else file.close  # noqa: SLF001 - own class
        return log

    @classmethod
    def to_stream(cls, stream: IO[bytes], *, path: str | None = None) -> TransitionLog:
        """Write JSON lines to the binary *stream* (flushed after each record)."""
        return cls(_JSONLines(stream), path=path)

    def write(self, event: str, fields: dict[str, Any]) -> None:
        """Write one record.

        Args:
            event: one of the ``modefsm.*`` event names.
            fields: the record's other fields (see :class:`TransitionRecord`).

        Raises:
            LogError: the write failed; the caller must not commit the change.
        """
        try:
            if self._lines is not None:  # modefsm's own writer takes the dict as it is
                info = event in (EVENT_CHANGED, EVENT_CREATED)
                self._lines.write("info" if info else "warning", event, fields)
            elif event not in (EVENT_CHANGED, EVENT_CREATED):
                self._logger.warning(event, **fields)
            else:
                self._logger.info(event, **fields)
        except OSError as exc:
            raise LogError(f"cannot write the transition log: {exc}", self.path) from None

    def close(self) -> None:
        """Close the file this log opened (a no-op for streams and host loggers)."""
        if self._close is not None:
            self._close()
            self._close = None
