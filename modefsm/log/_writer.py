"""The transition log writer: one JSON line per record, as structlog writes it.

:class:`TransitionLog` writes :class:`~modefsm.log.TransitionRecord` lines, each chained
to the one before by ``prev`` and ``digest`` (:func:`~modefsm.log.record_digest`),
write-ahead: a record is in the file before the change it describes becomes visible. It
builds its own logger over a file or binary stream, or wraps a logger the host passes in.

modefsm never calls ``structlog.configure()``: unconfigured structlog prints to stdout,
which would corrupt an ACP stdio stream.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, overload

import orjson

from modefsm.errors import LogError
from modefsm.log._files import open_private
from modefsm.log._records import (
    CHAINED_EVENTS,
    EVENT_CHANGED,
    EVENT_CONFIG,
    EVENT_CREATED,
    EVENT_DECIDED,
    EVENT_REJECTED,
    EVENT_REPAIRED,
    EVENT_SPEC,
    MAX_LINE,
    MAX_SPEC_TEXT,
    exact_digest,
    previous_of,
    record_digest,
    utc_timestamp,
)

if TYPE_CHECKING:
    from modefsm.spec import ModeSpec

__all__ = ["LogIndex", "TransitionLog", "ignore_file_size_signal", "spec_header"]


def ignore_file_size_signal() -> None:
    """Make a write past the file size limit (``RLIMIT_FSIZE``) fail instead of killing.

    By default ``SIGXFSZ`` ends the process when a write reaches the limit; ignored, the
    write fails with ``EFBIG``, which :class:`TransitionLog` turns into a :class:`LogError`
    (the change is not made). A no-op where the signal does not exist, or outside the main
    thread (where handlers cannot be set).
    """
    if hasattr(signal, "SIGXFSZ"):
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


class LogIndex(Protocol):
    """What a :class:`TransitionLog` keeps current as it writes: a restore index.

    :class:`~modefsm.store._restore.RestoreIndex` is the one modefsm ships; the log only calls
    these members (the index module reads the log, the log does not import it).
    """

    head: str | None
    """The ``digest`` of the last record indexed."""
    report: Callable[[str, dict[str, Any]], object] | None
    """Where the index reports a row that disagrees with the log (the log's ``write``)."""

    def catch_up(self, log: str | Path) -> int:
        """Apply the records of *log* not indexed yet; return how many."""
        ...  # pragma: no cover

    def update(  # noqa: PLR0917 - a record's fields, in order
        self,
        session_id: str,
        mode: str,
        seq: int,
        offset: int | None,
        head: str | None,
        previous: tuple[str | None, bool] = (None, False),
        *,
        cwd: str | None = None,
        timestamp: str | None = None,
        config: dict[str, str | bool] | None = None,
        follows: bool = True,
    ) -> None:
        """Note a committed record (after its line is written); never raises."""
        ...  # pragma: no cover

    def advance(self, offset: int | None, head: str | None) -> None:
        """Note a record that moves no session (a rejection)."""
        ...  # pragma: no cover

    def restore_point(self, session_id: str) -> Any:
        """The session's last committed point (a :class:`~modefsm.store._restore.RestorePoint`)."""
        ...  # pragma: no cover

    def commit(self) -> None:
        """Write what is noted so far."""
        ...  # pragma: no cover

    def close(self) -> None:
        """Commit and close."""
        ...  # pragma: no cover


class _Logger(Protocol):
    def info(self, event: str, **kw: Any) -> Any: ...  # pragma: no cover
    def warning(self, event: str, **kw: Any) -> Any: ...  # pragma: no cover


class _AppendFile:
    """A raw append-only file that takes a record whole or not at all.

    :meth:`write` writes every byte (looping on a short ``write``), with ``fsync=True``
    syncs them, and on any error (``ENOSPC``, ``EFBIG``, ``EIO``, a failed ``fsync``)
    truncates the file back to where the record began before raising, so a record that
    failed leaves no bytes behind and the next one starts on a line of its own. When that
    truncation fails too, the file keeps a torn line: every later :meth:`write` is refused
    (the process must restart, and opening the log then ends the torn line with a
    ``modefsm.log_repaired`` line).
    """

    def __init__(self, fd: int, *, fsync: bool) -> None:
        self._fd = fd
        self._fsync = fsync
        self.torn: str | None = None
        """Why a failed record could not be removed (every write is then refused)."""
        self.direct: int | None = None if fsync else fd
        """The descriptor a line may be given to with a bare ``os.write`` (its bytes then
        handed to :meth:`complete`), or ``None``: :meth:`write` only (``fsync``, or torn)."""

    def write(self, data: bytes) -> int:
        """Append all of *data* or nothing; return its length.

        Raises:
            OSError: nothing of *data* stays in the file, or (:attr:`torn` set) the file
                could not be cut back and keeps a torn line.
        """
        if self.torn is not None:
            raise OSError(errno.EIO, f"{self.torn}; restart to repair the log")
        written = os.write(self._fd, data)  # raising, it wrote nothing
        if written < len(data) or self._fsync:
            self.complete(data, written)
        return len(data)

    def complete(self, data: bytes, written: int) -> None:
        """Finish a :meth:`write` of *data* whose first ``os.write`` took *written* bytes.

        Raises:
            OSError: as :meth:`write`.
        """
        fd = self._fd
        try:
            while written < len(data):  # a short write: the disk or the size limit is full
                step = os.write(fd, memoryview(data)[written:])
                if step <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # noqa: TRY301
                written += step
            if self._fsync:
                os.fsync(fd)
        except OSError:
            if written:
                self._undo(written)
            raise

    def _undo(self, written: int) -> None:
        """Cut the *written* bytes of a failed record off the end of the file."""
        fd = self._fd
        try:
            end = os.lseek(fd, 0, os.SEEK_CUR)  # O_APPEND: just past our last byte
            if os.fstat(fd).st_size != end:  # another writer appended after our bytes
                self.torn = "a failed record could not be removed: another writer followed it"
                self.direct = None
                return
            os.ftruncate(fd, end - written)
            if self._fsync:
                os.fsync(fd)
        except OSError as exc:
            self.torn = f"a failed record could not be removed: {exc.strerror}"
            self.direct = None

    def flush(self) -> None:
        """Nothing to flush: :meth:`write` wrote through."""

    def close(self) -> None:
        os.close(self._fd)


def _processors() -> list[Callable[..., Any]]:
    import structlog  # noqa: PLC0415 - on the first line written, not at start-up

    return [structlog.processors.JSONRenderer(serializer=orjson.dumps)]


class _JSONLines:
    """structlog's renderer writing one JSON line per record to a binary stream.

    A record is its fields, then ``event``, then ``level`` (the method name, as structlog's
    ``add_log_level`` sets it), as structlog's ``JSONRenderer`` with ``orjson`` renders
    them (:func:`_processors`): the same bytes as a ``structlog.BytesLogger`` behind a
    bound logger with ``add_log_level`` and that renderer. Each line is written with a
    single ``write``, then ``flush``. It leaves out the bound logger's per-call work
    (keyword packing, context copy, method dispatch, the ``BytesLogger`` lock) and the
    ``add_log_level`` call (the level is one key); :meth:`TransitionLog.write_own` hands it
    the record's dict directly. The renderer calls ``orjson.dumps(fields, default=...)``,
    and orjson calls ``default`` only for a value it cannot serialize itself: a line orjson
    serializes without it is rendered by ``orjson.dumps`` directly (the same bytes); any
    other goes through the renderer (loaded then, with structlog).
    """

    def __init__(self, stream: BinaryIO) -> None:
        self._processors: tuple[Callable[..., Any], ...] = ()  # loaded when first needed
        self._write = stream.write
        # an _AppendFile writes through: nothing to flush
        self._file = stream if isinstance(stream, _AppendFile) else None
        self._flush = None if self._file is not None else stream.flush

    def write(self, method: str, event: str, fields: dict[str, Any]) -> int:
        """Render ``fields``, ``event`` and ``level`` through the processors; write one line.

        Returns:
            The line's length in bytes, its newline included.
        """
        return self.write_own(method, event, {**fields})

    def write_own(self, method: str, event: str, fields: dict[str, Any]) -> int:
        """:meth:`write` of a dict the caller gives up: ``event`` and ``level`` are added to it."""
        fields["event"] = event
        fields["level"] = method
        try:
            line = orjson.dumps(fields, option=orjson.OPT_APPEND_NEWLINE)
        except TypeError:  # orjson.JSONEncodeError: a value only the renderer's default takes
            line = self._render(method, fields) + b"\n"
        file = self._file
        if file is None:
            self._write(line)
            if self._flush is not None:
                self._flush()
        elif file.direct is None:
            file.write(line)
        else:  # the append-only file's write, without its call
            written = os.write(file.direct, line)  # raising, it wrote nothing
            if written < len(line):
                file.complete(line, written)
        return len(line)

    def _render(self, method: str, fields: dict[str, Any]) -> bytes:
        """*fields* through the processors (structlog's renderer), as bytes."""
        rendered: Any = fields
        for processor in self._processors or self._load():
            rendered = processor(self, method, rendered)
        return bytes(rendered)

    def _load(self) -> tuple[Callable[..., Any], ...]:
        self._processors = tuple(_processors())
        return self._processors

    def info(self, event: str, **kw: Any) -> None:
        """The structlog logger method, for callers that hold the logger."""
        self.write("info", event, kw)

    def warning(self, event: str, **kw: Any) -> None:
        """The structlog logger method, for callers that hold the logger."""
        self.write("warning", event, kw)


_TAIL_CHUNK = 64 * 1024
_SCAN_CHUNK = 1 << 20


def _last_record(fd: int, size: int) -> tuple[bool, str | None]:
    """Whether the file behind *fd* holds a record, and the ``digest`` of its last one.

    Reads backwards from the end in chunks, so a restart costs a read of the tail, not of
    the whole file; host lines after the last record are skipped. Time is linear in the
    bytes read and memory bounded, whatever the length of the lines (a line longer than
    :data:`MAX_LINE` is skipped unread, as readers skip it).
    """
    pos = size
    pieces: list[bytes] = []  # the line that ends where the last chunk began, in reverse
    length = 0  # its length so far; past MAX_LINE its pieces are dropped
    step = _TAIL_CHUNK
    while pos > 0:
        step = min(step, pos)
        pos -= step
        chunk = os.pread(fd, step, pos)
        step = _SCAN_CHUNK
        end = len(chunk)
        while (newline := chunk.rfind(b"\n", 0, end)) >= 0:
            found = _record_head(chunk[newline + 1 : end], pieces, length)
            if found is not None:
                return True, found[0]
            pieces, length, end = [], 0, newline
        length += end
        pieces = [*pieces, chunk[:end]] if length <= MAX_LINE else []
    found = _record_head(b"", pieces, length)
    return (True, found[0]) if found is not None else (False, None)


def _record_head(start: bytes, pieces: list[bytes], length: int) -> tuple[str | None] | None:
    """``(digest,)`` if *start* + the reversed *pieces* is a record line, else ``None``."""
    if length + len(start) > MAX_LINE:
        return None
    data = _record_line(start + b"".join(reversed(pieces)) if pieces else start)
    if data is None:
        return None
    digest = data.get("digest")
    return (digest if isinstance(digest, str) else None,)


def _index_record(
    index: LogIndex,
    event: str,
    fields: dict[str, Any],
    digest: str,
    offset: int | None,
    *,
    follows: bool = True,
) -> None:
    """Tell *index* of a record (*fields* of *event*, *digest*) whose line ends at *offset*.

    *follows*: the index was told of every line before it (see ``RestoreIndex.update``).
    """
    if event in _UNMOVED:
        if follows:
            index.advance(offset, digest)
        return
    index.update(
        fields["session_id"],
        fields["to_mode"],
        fields["seq"],
        offset,
        digest,
        previous_of(fields["origin"], fields["from_mode"], event),
        cwd=fields.get("cwd"),
        timestamp=fields.get("timestamp"),
        config=fields.get("config"),
        follows=follows,
    )


_UNMOVED = frozenset({EVENT_REJECTED, EVENT_DECIDED, EVENT_SPEC})
"""The chained events that move no session: they move the chain only."""
_INFO_EVENTS = frozenset({EVENT_CHANGED, EVENT_CONFIG, EVENT_CREATED, EVENT_DECIDED, EVENT_SPEC})
"""The events written at level ``info`` (the others at ``warning``)."""
_HEADERS_READ = 4 << 20
"""How far into a file, from each end, a writer looks for headers (see :func:`_file_specs`)."""
_SPEC_MARK = f'"{EVENT_SPEC}"'.encode()


def _file_specs(fd: int, size: int) -> set[str]:
    """The ``spec_hash`` of the headers among a file's first and last :data:`_HEADERS_READ` bytes.

    A writer writes a header before its first record of a spec, so a file started by
    modefsm has its headers at its start, and a spec that came later has its own where it
    came (found while it is among the last bytes): a header further into a long file is
    not looked for, and a writer needing it writes it again (the same spec: replay takes
    it as the one before). Memory and time are bounded by the bytes read.
    """
    found: set[str] = set()
    spans = [(0, min(size, _HEADERS_READ))]
    if size > _HEADERS_READ:
        spans.append((max(_HEADERS_READ, size - _HEADERS_READ), size))
    for start, end in spans:
        data = os.pread(fd, end - start, start)
        at = data.find(_SPEC_MARK)
        while at >= 0:
            begin, stop = data.rfind(b"\n", 0, at) + 1, data.find(b"\n", at)
            if stop < 0:
                break  # the line goes on past the span
            if begin or not start:  # a line that begins inside the span
                record = _record_line(data[begin:stop]) or {}
                spec_hash = record.get("spec_hash")
                if record.get("event") == EVENT_SPEC and isinstance(spec_hash, str):
                    found.add(spec_hash)
            at = data.find(_SPEC_MARK, stop)
    return found


def spec_header(spec: ModeSpec) -> dict[str, Any]:
    """The fields of *spec*'s header (:class:`~modefsm.log.SpecRecord`), but its timestamp.

    Its ``definition`` is ``None`` when longer than :data:`~modefsm.log.MAX_SPEC_TEXT`.
    """
    definition: dict[str, Any] | None = spec.definition
    if len(orjson.dumps(definition)) > MAX_SPEC_TEXT:
        definition = None
    return {"spec": spec.name, "spec_hash": spec.content_hash, "definition": definition}


def _record_line(line: bytes) -> dict[str, Any] | None:
    """The chained line *line* (a record or a decision, parsed), else ``None``."""
    if b'"modefsm.' not in line:
        return None
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if isinstance(data, dict) and data.get("event") in CHAINED_EVENTS:
        return data
    return None


@overload
def _line_start(fd: int, end: int) -> int: ...
@overload
def _line_start(fd: int, end: int, *, limit: int) -> int | None: ...
def _line_start(fd: int, end: int, *, limit: int | None = None) -> int | None:
    """Where the line that runs up to offset *end* begins, in the file behind *fd*.

    That is just past the last newline among the bytes before *end* (0 if there is none;
    *end* itself if the byte before it is a newline). Reads backwards in chunks; with
    *limit*, at most about *limit* bytes before *end*: ``None`` if the line begins further
    back than *limit* bytes. A line of up to 64 KiB costs one ``pread``.
    """
    start, step = end, _TAIL_CHUNK
    while start > 0:
        if limit is not None and end - start > limit:
            return None
        step = min(step, start)
        chunk = os.pread(fd, step, start - step)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            start = start - len(chunk) + newline + 1
            break
        start -= len(chunk)
        step = _SCAN_CHUNK
    return None if limit is not None and end - start > limit else start


def _line_ending_at(fd: int, end: int) -> bytes | None:
    """The line of the file behind *fd* whose newline is the byte before offset *end*.

    Returns its bytes without the newline; ``None`` when that byte is not a newline (or
    does not exist), or when the line is longer than :data:`~modefsm.log.MAX_LINE`.
    """
    if end <= 0 or os.pread(fd, 1, end - 1) != b"\n":
        return None
    start = _line_start(fd, end - 1, limit=MAX_LINE)
    return None if start is None else os.pread(fd, end - 1 - start, start)


def _end_torn_line(fd: int, size: int) -> int:
    """End a torn last line (a write cut short by a crash) and say so; return bytes written.

    One ``write`` appends a newline, so the torn bytes stay alone on their line (readers
    report that line and skip it), and a ``modefsm.log_repaired`` line giving its length
    (``torn_bytes``), so a line torn by a crash can be told from a damaged log. Nothing is
    truncated: another writer's record is never cut.
    """
    repair = {
        "timestamp": utc_timestamp(),
        "event": EVENT_REPAIRED,
        "torn_bytes": size - _line_start(fd, size),
        "level": "warning",
    }
    return _AppendFile(fd, fsync=False).write(b"\n" + orjson.dumps(repair) + b"\n")


_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_regular(mode: int, path: Path) -> None:
    """Refuse anything but a regular file: appends, offsets and truncation need one."""
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
    msg = f"{kind}, not a regular file: the transition log must be a regular file"
    raise LogError(msg, str(path))


class _LogFile:
    """An append-only log file: its descriptor, its writer, and the chain head it ends with."""

    def __init__(self, path: Path, *, fsync: bool) -> None:
        try:
            _check_regular(path.stat().st_mode, path)  # before opening: a FIFO would block
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise LogError(f"cannot open the transition log: {exc.strerror}", str(path)) from None
        try:
            fd = open_private(path, os.O_RDWR | os.O_APPEND | os.O_NONBLOCK, "the transition log")
        except OSError as exc:
            raise LogError(f"cannot open the transition log: {exc.strerror}", str(path)) from None
        try:
            stat = os.fstat(fd)
            _check_regular(stat.st_mode, path)
            size = stat.st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                size += _end_torn_line(fd, size)
            self.has_records, self.head = _last_record(fd, size) if size else (False, None)
            self.specs = _file_specs(fd, size) if self.has_records else set()
            self.size = size
        except OSError as exc:
            os.close(fd)
            raise LogError(f"cannot read the transition log: {exc.strerror}", str(path)) from None
        except LogError:
            os.close(fd)
            raise
        self.fd = fd
        self.path = path
        self.file = _AppendFile(fd, fsync=fsync)


class TransitionLog:
    """Where the engine writes its records.

    Build one with :meth:`to_file` or :meth:`to_stream`, or pass a host's structlog
    logger to the constructor. Writes are synchronous: a record is in the file (flushed to
    the operating system, or synced to disk with ``fsync=True``) before the change it
    describes becomes visible, so no acknowledged change can be lost with the process.

    Each record gets ``prev`` and ``digest`` (see the module docstring). Through a host
    logger, records verify only if the host's processors leave modefsm's keys as they are
    (a ``TimeStamper`` writing ``timestamp`` would change them: give it another key).

    Args:
        logger: any object with structlog's ``info(event, **kw)`` and ``warning(...)``.
        path: the file behind the logger, if any, for messages.
        head: the ``digest`` of the last record already in the log this one continues
            (``None``: a fresh chain).

    Attributes:
        index: the :class:`LogIndex` (a :class:`~modefsm.store._restore.RestoreIndex`) kept
            current by :meth:`write`,
            if the log was opened with one.
    """

    def __init__(self, logger: Any, path: str | None = None, *, head: str | None = None) -> None:
        """Wrap *logger* (a structlog bound logger or anything with ``info``/``warning``).

        Raises:
            LogError: *logger* drops ``info`` events (a structlog filtering logger set
                above INFO): committed changes would silently go unrecorded.
        """
        enabled = getattr(logger, "is_enabled_for", None)
        if enabled is not None and not enabled(logging.INFO):
            msg = "the host logger drops INFO events; modefsm's change records would be lost"
            raise LogError(msg, path)
        self._logger: _Logger = logger
        self._lines = logger if isinstance(logger, _JSONLines) else None
        self.path = path
        self.index: LogIndex | None = None
        self._head = head
        self._file: _LogFile | None = None
        self._end = 0  # where this writer's last line ended in its file (with an index)
        self._fsync = False
        self._owns_index = False
        self._headers: dict[str, dict[str, Any]] = {}  # spec_hash: its header's fields
        self._named: set[str] = set()  # the spec_hash of every header the file has
        self._unnamed = False  # whether a header described is not in the file yet

    def describe(self, spec: ModeSpec) -> None:
        """Name *spec* in the log: a header before the first record written with it.

        The header (a ``modefsm.spec`` :class:`~modefsm.log.SpecRecord`, chained like a
        record) is written before this log's first record whose ``spec_hash`` is *spec*'s,
        in each file it writes to (a file opened again, a rotated file), unless the file
        has one for that hash already: among its first or last 4 MiB when it was opened, or
        written or seen (:meth:`named`) since. :class:`~modefsm.engine.ModeEngine`
        calls it with its spec.
        """
        self._headers.setdefault(spec.content_hash, spec_header(spec))
        self._recount()

    def named(self, spec_hash: str) -> None:
        """Note that the file has a header for *spec_hash* (another writer appended it)."""
        self._named.add(spec_hash)
        self._recount()

    def unnamed(self) -> None:
        """Forget the headers noted: the file is read again from its start (cut, refilled)."""
        self._named = set()
        self._recount()

    def _recount(self) -> None:
        """Note whether a header described is not in the file yet (after a change to either)."""
        self._unnamed = not self._headers.keys() <= self._named

    @property
    def head(self) -> str | None:
        """The ``digest`` of the last record written (or found when the file was opened)."""
        return self._head

    @property
    def reopenable(self) -> bool:
        """Whether :meth:`reopen` can follow a rotation: the log was opened with :meth:`to_file`."""
        return self._file is not None

    def follow(self, head: str | None) -> None:
        """Continue the chain from *head*: the ``digest`` of a record another writer appended.

        For writers that share one file under a lock (:class:`~modefsm.store.FileStore`):
        the next record's ``prev`` is *head*, so the file stays one chain.
        """
        self._head = head

    @classmethod
    def to_file(
        cls,
        path: str | Path,
        *,
        fsync: bool = False,
        index: LogIndex | None = None,
        close_index: bool = False,
    ) -> TransitionLog:
        """Append JSON lines to *path*, one unbuffered ``write`` per record.

        Each record is written with a single ``write`` on a file opened with ``O_APPEND``,
        so lines from several writers never interleave within a line. An existing file is
        continued: a torn last line (a crash mid-write) is ended with a newline, and the
        chain continues from the file's last record (read backwards from the end; with an
        *index* and a file holding no record yet, from the head the index kept, which is
        how a rotated log continues its predecessor's chain).

        Args:
            path: the log file; created if missing, never truncated.
            fsync: also ``fsync`` after each record (survives power loss; costs a disk flush).
            index: a :class:`LogIndex` (a :class:`~modefsm.store._restore.RestoreIndex`; open
                both from paths with :meth:`RestoreIndex.open_log
                <modefsm.store._restore.RestoreIndex.open_log>`) to keep current as records are
                written. It is first caught up with the records the log holds beyond what
                it indexed (a crash between the log write and the index commit loses
                nothing).
            close_index: :meth:`close` closes *index* too.

        Raises:
            LogError: the file cannot be opened or read, is not a regular file (a FIFO, a
                directory, a device: refused before it is opened), or the index cannot be
                opened.
        """
        path = Path(path)
        log = cls(None, path=str(path))
        log._fsync = fsync
        if index is not None:
            log._owns_index = close_index
            log.index = index
            index.report = log.write  # a row that disagrees with the log is logged
        log._open()
        return log

    def _open(self) -> None:
        """Open the file at :attr:`path` and write to it from now on (the index follows it)."""
        assert self.path is not None  # noqa: S101 - only file logs open
        path = Path(self.path)
        log_file = _LogFile(path, fsync=self._fsync)
        if self.index is not None:
            try:
                self.index.catch_up(path)
            except BaseException:
                log_file.file.close()
                raise
        self._file = log_file
        self._logger = self._lines = _bind(log_file.file)
        self._named = log_file.specs
        self._recount()
        self._head = log_file.head
        self._end = log_file.size
        if self.index is not None and not log_file.has_records:
            self._head = self.index.head

    @classmethod
    def to_stream(
        cls, stream: BinaryIO, *, path: str | None = None, head: str | None = None
    ) -> TransitionLog:
        """Write JSON lines to the binary *stream* (flushed after each record).

        Args:
            stream: where the lines go.
            path: its name, for messages.
            head: the ``digest`` of the last record of the log this stream continues.
        """
        return cls(_bind(stream), path=path, head=head)

    def write(self, event: str, fields: dict[str, Any]) -> str | None:
        """Write one record.

        Records and decisions (:data:`CHAINED_EVENTS`) get ``prev`` and ``digest``; other
        ``modefsm.*`` events (diagnostics) are written as given. The index, if any, learns
        the new mode of the session after the line is written; an index failure never fails
        the write (the index keeps the update in memory and commits it later, or catches up
        from the log: see :meth:`~modefsm.store._restore.RestoreIndex.update`).

        A record is written whole or not at all: a short write (a full disk, the file size
        limit) is completed or, failing that, cut off again, so a failed record leaves no
        bytes behind and the next starts on a line of its own.

        Args:
            event: one of the ``modefsm.*`` event names.
            fields: the record's other fields (see :class:`TransitionRecord`).

        Returns:
            The line's ``digest``: the new :attr:`head` for a chained line, else ``None``.

        Raises:
            LogError: the write failed (``ENOSPC``, ``EFBIG``, ``EIO``, a failed ``fsync``,
                or an earlier failed record that could not be cut off: every record is then
                refused until the log is reopened); the caller must not commit the change.
        """
        return self.write_own(event, {**fields})

    def write_own(self, event: str, fields: dict[str, Any], exact: bool = False) -> str | None:  # noqa: FBT001, FBT002 - positional: the hot path's call
        """:meth:`write` of a dict the caller gives up: it becomes the line written.

        A chained line's *fields* get ``prev`` and ``digest``, and from modefsm's own
        writer (:meth:`to_file`, :meth:`to_stream`) ``event`` and ``level``; the line's
        bytes are :meth:`write`'s. For a writer that builds each record's dict for this
        call alone (:class:`~modefsm.store.LogStore`): it saves :meth:`write`'s copy.

        Args:
            event: as :meth:`write`.
            fields: as :meth:`write`.
            exact: the caller's word that *fields* hold only keys a record's digest
                covers (no host context): the digest is then taken of them all
                (:func:`~modefsm.log.exact_digest`) without looking for keys to
                leave out. The same digest and bytes as with ``False``.

        Raises:
            LogError: as :meth:`write` (*fields* may then hold the keys added).
        """
        digest = None
        if event in CHAINED_EVENTS:
            if self._unnamed and fields.get("spec_hash") not in self._named:
                self.prepare(fields)
            fields["prev"] = self._head
            fields["event"] = event  # covered by the digest, written after it
            digest = exact_digest(fields) if exact else record_digest(fields)
            del fields["event"]
            fields["digest"] = digest
        length = 0
        try:
            if self._lines is not None:  # modefsm's own writer takes the dict as it is
                method = "info" if event in _INFO_EVENTS else "warning"
                length = self._lines.write_own(method, event, fields)
            elif event not in _INFO_EVENTS:
                self._logger.warning(event, **fields)
            else:
                self._logger.info(event, **fields)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            msg = f"cannot write the transition log: {reason}; the record was not written"
            raise LogError(msg, self.path) from None
        if digest is not None:
            self._head = digest
        if self.index is not None:
            self._index_line(event, fields, digest, length)
        return digest

    def prepare(self, fields: dict[str, Any]) -> None:
        """Write the header a record of *fields* needs before it, if it needs one.

        :meth:`write` does it; a writer that chains a record before writing it (a
        PostgreSQL store computes its digest for the database first) calls it before
        reading :attr:`head`.

        Raises:
            LogError: the header cannot be written (nor then the record).
        """
        spec_hash = fields.get("spec_hash")
        if spec_hash not in self._named and spec_hash in self._headers:
            self._name_spec(spec_hash, fields.get("timestamp"))

    def _name_spec(self, spec_hash: str, timestamp: object) -> None:
        """Write the header of *spec_hash* before a record (stamped *timestamp*) needing it."""
        stamp = timestamp if isinstance(timestamp, str) else utc_timestamp()
        header = {"timestamp": stamp, **self._headers[spec_hash]}
        self._named.add(spec_hash)  # before: write() does not come back here for it
        try:
            self.write(EVENT_SPEC, header)
        except LogError:
            self._named.discard(spec_hash)
            raise
        finally:
            self._recount()

    def _index_line(
        self, event: str, fields: dict[str, Any], digest: str | None, length: int
    ) -> None:
        """Tell the index of the line just written (*length* bytes; a record if *digest*)."""
        index = self.index
        assert index is not None  # noqa: S101 - called with an index only
        offset = None
        if self._file is not None:
            offset = os.lseek(self._file.fd, 0, os.SEEK_CUR)
            end, self._end = self._end, offset
            if offset < end + length:  # the file was cut shorter (copied, then truncated)
                with contextlib.suppress(LogError):  # written: the index catches up later
                    index.catch_up(self._file.path)  # follows it anew, this line included
                return
        if digest is not None:
            _index_record(index, event, fields, digest, offset)

    def reopen(self) -> None:
        """Reopen the file at :attr:`path` after it was rotated, continuing the chain.

        A rotation tool renames the file and the process reopens its path: the new file
        is created if missing, and its first record's ``prev`` is the digest of the last
        record written to the old one, so the two files verify as one stream (give them
        to ``modefsm replay`` oldest first). The new file is opened before the old one is
        closed: if it cannot be, the log goes on writing to the old one. Its index (if
        any) follows the new file and keeps answering for the sessions last written in
        the old one. A file copied and then truncated in place needs no call: the next
        record notices it.

        Raises:
            LogError: this log was not opened with :meth:`to_file`, or the file cannot be
                opened (nothing changed).
        """
        old = self._file
        if old is None:
            raise LogError("only a log opened with to_file can be reopened", self.path)
        head = self._head
        if self.index is not None:
            self.index.commit()
        self._open()
        old.file.close()
        if not self._file.has_records:  # type: ignore[union-attr]  # _open set it
            self._head = head
            if self.index is not None:
                self.index.advance(None, head)

    def close(self) -> None:
        """Close the file this log opened and commit its index (a no-op for streams).

        The index is closed too when :meth:`to_file` was given ``close_index=True``.
        """
        if self.index is not None:
            self.index.commit()
            if self._owns_index:
                self.index.close()
                self.index = None
        if self._file is not None:
            self._file.file.close()
            self._file = None


def _bind(stream: Any) -> _JSONLines:
    return _JSONLines(stream)
