r"""Reading transition logs as a stream: several files in order, gzip, stdin, located problems.

:func:`read_log` yields one :class:`LogEntry` per modefsm record and one
:class:`LogProblem` per line it could not use, each with its file and line number. It
holds one line at a time (at most :data:`MAX_LINE` bytes), so its memory does not grow
with the log.

What it does with each line:

- a host's own JSON object (a structured event that is not a modefsm record) is skipped
  silently; so are modefsm's diagnostics (``modefsm.notify_failed``, ...), which are not
  records;
- a host's line that is not a JSON object (prose: it does not begin with ``{``) is skipped
  too, but a file with more such lines than modefsm records (a Markdown file quoting a
  record, a host's text log) is not a transition log: ``not_a_log``, reported after its
  last line;
- a torn line (a crash mid-write: the last line without its newline, or a record cut
  short) is a ``torn`` problem: reported, skipped, never fatal. A record cut short with
  more of the log after it (:attr:`LogProblem.inside`; also a torn last line of a file
  that another file follows) is reported when the next record is read, saying what the
  digest chain proves: the next record's ``prev`` is the digest of the record before the
  torn one (its writer never counted it: its change was never acknowledged), or the
  digest the torn bytes still hold (its writer counted it: its change may have been
  acknowledged and its record is lost), or neither (unknown);
- a line that looks like a modefsm record (a JSON object naming a record event) but is
  not valid JSON (``not_json``) or does not fit :class:`~modefsm.log.TransitionRecord`
  (``not_a_record``) is reported with what is wrong;
- a file that cannot be read, or whose first line is binary, is ``unreadable`` or
  ``not_text``: with ``not_a_log``, the :attr:`LogProblem.fatal` kinds.

Example:
    >>> import io
    >>> lines = [b'{"event": "request", "path": "/"}',
    ...          b'{"event":"modefsm.mode_changed","seq":"two"}']
    >>> stdin = io.BufferedReader(io.BytesIO(b"\n".join(lines) + b"\n"))
    >>> [(str(p.location), p.kind) for p in read_log(["-"], stdin=stdin)]
    [('-:2', 'not_a_record')]
"""

from __future__ import annotations

import contextlib
import gzip
import io
import itertools
import re
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Generic, Literal, TypeVar, overload

import orjson
from pydantic import ValidationError

from modefsm.log._models import DecisionRecord, SpecRecord, TransitionRecord
from modefsm.log._records import (
    CHAINED_EVENTS,
    EVENT_DECIDED,
    EVENT_REPAIRED,
    EVENT_SPEC,
    MAX_LINE,
    RECORD_EVENTS,
    record_digest,
)

__all__ = [
    "MAX_LINE",
    "RECORD_MARK",
    "DecisionEntry",
    "Location",
    "LogEntry",
    "LogProblem",
    "ProblemKind",
    "SpecEntry",
    "Take",
    "read_log",
]


ProblemKind = Literal[
    "torn", "not_json", "not_a_record", "binary", "too_long", "empty", "no_records",
    "unreadable", "not_text", "not_a_log",
]  # fmt: skip
"""What is wrong with a line or a file (see :class:`LogProblem`)."""

Take = Callable[[str, int, list[bytes], int, int], int]
"""A fast path for a reader's consumer: ``take(path, line, lines, start, offset) -> stop``.

Offered ``lines[start:]``: complete lines of a file without their newline, past the
file's first line, none longer than :data:`MAX_LINE` (and, after a torn record, only
once the record after it has settled it); ``lines[start]`` is line number *line* and
begins at byte *offset* of the (decompressed) file (each line is followed by its
newline). The consumer handles ``lines[start:stop]`` in full and returns ``stop``
(``start``: none): the reader yields nothing for those lines and builds no model. It may
take only lines that the reader would read as a record, each unchanged by the model: a
line that starts with ``{``, contains :data:`RECORD_MARK`, parses as a JSON object naming
a record event (one of ``RECORD_EVENTS``: a ``modefsm.tool_decided`` line is left to the
reader) and fits :class:`~modefsm.log.TransitionRecord` as it is. It must not change
anything for the line at ``stop``, which the reader then reads as usual.
"""

RECORD_MARK = b'"modefsm.'
"""What a line holds for the reader to parse it: other lines are a host's, skipped unread."""

_FATAL: frozenset[ProblemKind] = frozenset({"unreadable", "not_text", "not_a_log"})
_BAD_RECORD: frozenset[ProblemKind] = frozenset({"not_json", "not_a_record"})
_MARKS = tuple(f'"{event}"'.encode() for event in sorted(CHAINED_EVENTS))
_BRACE = ord("{")
_BLOCK = 1 << 16
"""Bytes read at a time (at most MAX_LINE: only a block's first line, which goes on from
the block before, can be longer; small enough for the allocator to reuse its memory)."""
_NEVER = 1 << 62
_PROGRESS_STEP = 1 << 20


@dataclass(frozen=True, slots=True)
class Location:
    """A place in the input.

    Attributes:
        path: the file as given (``-`` for standard input).
        line: the line number, from 1; 0 for the file as a whole.
    """

    path: str
    line: int

    def __str__(self) -> str:
        """Return ``path:line`` (``path`` alone for the file as a whole)."""
        return f"{self.path}:{self.line}" if self.line else self.path


_R = TypeVar("_R", TransitionRecord, DecisionRecord, SpecRecord)


@dataclass(frozen=True, slots=True)
class _Entry(Generic[_R]):
    """One parsed modefsm line and where it was read.

    Attributes:
        location: its file and line.
        record: the parsed line.
        end: the byte offset just past its line, in the (decompressed) file.
        intact: whether its ``digest`` matches its content; ``None`` when digests were not
            checked or the line has none.
    """

    location: Location
    record: _R
    end: int
    intact: bool | None = None


@dataclass(frozen=True, slots=True)
class LogEntry(_Entry[TransitionRecord]):
    """One modefsm record and where it was read (``location``, ``record``, ``end``, ``intact``).

    Attributes:
        gseq: the ``gseq`` a PostgreSQL worker's line carries (the database's commit
            number, not covered by the digest), when it is an integer.
    """

    gseq: int | None = None


@dataclass(frozen=True, slots=True)
class DecisionEntry(_Entry[DecisionRecord]):
    """One ``modefsm.tool_decided`` line and where it was read (``read_log(decisions=True)``).

    Attributes:
        gseq: the ``gseq`` a PostgreSQL worker's decision line carries (the database's
            number of it), or ``None``.
        at_gseq: the ``gseq`` of the record it was decided against (its place: right after
            that record, before the session's next), or ``None``.
    """

    gseq: int | None = None
    at_gseq: int | None = None


@dataclass(frozen=True, slots=True)
class SpecEntry(_Entry[SpecRecord]):
    """One ``modefsm.spec`` line, a file's header, and where it was read (``headers=True``)."""


@dataclass(frozen=True, slots=True)
class LogProblem:
    """A line or file that could not be used.

    Attributes:
        location: the line (or the file, line 0).
        kind: ``torn`` (a crash mid-write), ``not_json`` and ``not_a_record`` (a modefsm
            record that does not parse), ``binary`` (a line of binary data among text),
            ``too_long`` (over :data:`MAX_LINE`), ``empty`` (an empty file),
            ``no_records`` (a file without modefsm records), ``unreadable``,
            ``not_text`` and ``not_a_log`` (more lines that are not JSON objects than
            records: the file is unusable).
        message: what is wrong, for people.
        session_id: the record's ``session_id``, when the line got far enough to say.
        seq: the record's ``seq``, likewise.
        inside: a ``torn`` record with a newline after it, or at the end of a file that
            another file follows: more of the log follows it, so it is not what a crash
            leaves at the end (see :func:`read_log` for what its
            message can prove).
    """

    location: Location
    kind: ProblemKind
    message: str
    session_id: str | None = None
    seq: int | None = None
    inside: bool = False

    @property
    def fatal(self) -> bool:
        """Whether the file is unusable (``unreadable``, ``not_text`` or ``not_a_log``)."""
        return self.kind in _FATAL

    @property
    def bad_record(self) -> bool:
        """Whether a modefsm record was lost to it (``not_json`` or ``not_a_record``)."""
        return self.kind in _BAD_RECORD

    def __str__(self) -> str:
        """Return ``path:line: kind: message``."""
        return f"{self.location}: {self.kind}: {self.message}"


@overload
def read_log(
    paths: Iterable[str | Path],
    *,
    check_digests: bool = ...,
    start: int = ...,
    progress: Callable[[int], None] | None = ...,
    stdin: BinaryIO | None = ...,
    take: Take | None = ...,
    decisions: Literal[False] = ...,
    headers: Literal[False] = ...,
) -> Iterator[LogEntry | LogProblem]: ...
@overload
def read_log(
    paths: Iterable[str | Path],
    *,
    check_digests: bool = ...,
    start: int = ...,
    progress: Callable[[int], None] | None = ...,
    stdin: BinaryIO | None = ...,
    take: Take | None = ...,
    decisions: Literal[True],
    headers: Literal[False] = ...,
) -> Iterator[LogEntry | DecisionEntry | LogProblem]: ...
@overload
def read_log(
    paths: Iterable[str | Path],
    *,
    check_digests: bool = ...,
    start: int = ...,
    progress: Callable[[int], None] | None = ...,
    stdin: BinaryIO | None = ...,
    take: Take | None = ...,
    decisions: bool = ...,
    headers: Literal[True],
) -> Iterator[LogEntry | DecisionEntry | SpecEntry | LogProblem]: ...
def read_log(
    paths: Iterable[str | Path],
    *,
    check_digests: bool = False,
    start: int = 0,
    progress: Callable[[int], None] | None = None,
    stdin: BinaryIO | None = None,
    take: Take | None = None,
    decisions: bool = False,
    headers: bool = False,
) -> Iterator[LogEntry | DecisionEntry | SpecEntry | LogProblem]:
    """Yield the records of the JSON-lines logs *paths*, in order, and every problem met.

    Args:
        paths: log files, read one after the other; gzip files are recognised by their
            first bytes; ``-`` is standard input.
        check_digests: recompute each record's digest (sets :attr:`LogEntry.intact`).
        start: a byte offset to start every plain file at (a line boundary; line numbers
            then count from there).
        progress: called now and then with the number of bytes read so far, over all
            files (compressed bytes for gzip files).
        stdin: what ``-`` reads (default: ``sys.stdin.buffer``).
        take: a consumer's fast path (see :data:`Take`): offered, before any model is
            built, the complete lines past a file's first, a run at a time; nothing is
            yielded for the lines it takes.
        decisions: also yield a :class:`DecisionEntry` for each ``modefsm.tool_decided``
            line (else skipped, as diagnostics are).
        headers: also yield a :class:`SpecEntry` for each ``modefsm.spec`` line (a file's
            header; else skipped).

    Yields:
        :class:`LogEntry` and :class:`LogProblem` items, in input order.
    """
    done = 0
    files = list(paths)
    carry: _Torn | None = None  # a torn record at the end of a file, before the next file
    for number, path in enumerate(files, 1):
        reader = _FileReader(str(path), check_digests=check_digests, stdin=stdin, take=take)
        reader.decisions, reader.headers = decisions, headers
        reader.carry, reader.more = carry, number < len(files)
        report = None if progress is None else (lambda n, base=done: progress(base + n))
        yield from reader.items(start, report)
        done += reader.consumed
        carry = reader.carry
    if carry is not None:
        yield carry.resolve(None, None)


class _FileReader:
    def __init__(
        self, name: str, *, check_digests: bool, stdin: BinaryIO | None, take: Take | None
    ) -> None:
        self.name = name
        self.check_digests = check_digests
        self.stdin = stdin
        self.take = take
        self.consumed = 0
        self.carry: _Torn | None = None  # in: from the file before; out: to the next
        self.more = False  # whether another file follows this one
        self.decisions = False  # whether decision lines are yielded
        self.headers = False  # whether header lines are yielded

    def items(
        self, start: int, progress: Callable[[int], None] | None
    ) -> Iterator[LogEntry | DecisionEntry | SpecEntry | LogProblem]:
        try:
            raw: Any = (
                (self.stdin or sys.stdin.buffer) if self.name == "-" else open(self.name, "rb")  # noqa: SIM115, PTH123 - closed by the stack below
            )
        except OSError as exc:
            yield LogProblem(Location(self.name, 0), "unreadable", f"cannot read: {exc.strerror}")
            return
        with contextlib.ExitStack() as stack:
            if self.name != "-":
                stack.enter_context(raw)
            yield from self._lines(raw, start, progress)

    def _lines(  # noqa: C901, PLR0912, PLR0915 - the hot loop: no call per line it can spare
        self, raw: Any, start: int, progress: Callable[[int], None] | None
    ) -> Iterator[LogEntry | DecisionEntry | SpecEntry | LogProblem]:
        name = self.name
        if not hasattr(raw, "peek"):
            raw = io.BufferedReader(raw)
        try:
            compressed = raw.peek(2)[:2] == b"\x1f\x8b"
        except OSError as exc:
            yield LogProblem(Location(name, 0), "unreadable", f"cannot read: {exc.strerror}")
            return
        stream: Any = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
        if start:
            stream.seek(start)
        offset, lineno, records, content_lines, text_lines = start, 0, 0, 0, 0
        next_report = _PROGRESS_STEP if progress is not None else _NEVER
        take, read = self.take, stream.read1
        last = b""  # the last line taken or read as a record: the chain before a torn one
        torn, self.carry = self.carry, None  # a torn record inside, reported at the next one
        prior = b""  # the line before: a torn line that a later modefsm.log_repaired names
        rest = b""  # the start of a line that the next block goes on with
        skipping = False  # in a line longer than MAX_LINE, up to its newline
        terminated = True
        while terminated:
            try:
                block = read(_BLOCK)
            except (EOFError, OSError, zlib.error) as exc:
                yield _read_problem(name, lineno, exc)
                break
            if skipping:  # the rest of a line too long, skipped
                cut = block.find(b"\n")
                if cut < 0 and block:
                    offset += len(block)
                    continue
                skipping = False
                offset += cut + 1 if block else 0
                block = block[cut + 1 :] if block else b""
                if not block:
                    continue
            if block:
                lines = (rest + block if rest else block).split(b"\n")
                rest = lines.pop()  # no newline after it yet
            elif rest:  # the end: a last line without its newline
                lines, rest, terminated = [rest], b"", False
            else:
                break
            index, count = 0, len(lines)
            while index < count:
                if (
                    take is not None
                    and terminated
                    and torn is None
                    and content_lines
                    and (index or len(lines[0]) <= MAX_LINE)
                ):
                    stop = take(name, lineno + 1, lines, index, offset)
                    if stop > index:
                        taken = stop - index
                        lineno += taken
                        records += taken
                        content_lines += taken
                        offset += sum(map(len, itertools.islice(lines, index, stop))) + taken
                        last = prior = lines[stop - 1]
                        index = stop
                        if index == count:
                            break
                line = lines[index]
                index += 1
                lineno += 1
                offset += len(line) + terminated
                location = Location(name, lineno)
                if len(line) > MAX_LINE:  # only a block's first line can be
                    prior = b""
                    yield LogProblem(
                        location, "too_long", f"a line longer than {MAX_LINE} bytes, skipped"
                    )
                    continue
                line_before, prior = prior, line
                content = line.rstrip(b"\r")
                if not content.strip():
                    continue
                content_lines += 1
                if content_lines == 1 and _is_binary(content):
                    records = -1  # the file is reported as unusable, not as holding no record
                    yield LogProblem(
                        location, "not_text", "binary data, not a JSON-lines log: file skipped"
                    )
                    break
                if content[0] != _BRACE and not content.lstrip().startswith(b"{"):
                    text_lines += 1  # prose, Markdown, a traceback: a host's or not a log
                if _REPAIRED in content and (
                    torn is None or torn.problem.location.line < lineno - 1
                ):
                    repaired = _repaired_tear(content, line_before, Location(name, lineno - 1))
                    if repaired is not None:
                        if torn is not None:
                            yield torn.resolve(None, None)
                        torn = _Torn(repaired, line_before.rstrip(b"\r"), last)
                        continue
                item = self._parse(content, location, terminated=terminated, end=offset)
                if item is None:
                    continue
                problem = item if isinstance(item, LogProblem) else None
                if torn is not None and (problem is None or problem.bad_record):
                    chained = item.record if problem is None else None  # type: ignore[union-attr]
                    yield torn.resolve(chained and chained.prev, chained and chained.digest)
                    torn = None
                if problem is None:
                    last = line
                elif problem.kind == "torn" and (terminated or self.more):
                    if torn is not None:
                        yield torn.resolve(None, None)
                    torn = _Torn(problem, content, last)
                    continue
                records += problem is None or problem.bad_record
                yield item
            if records < 0:  # a binary file: nothing more of it is read
                break
            if len(rest) > MAX_LINE:  # a line too long: reported now, its end skipped
                lineno += 1
                offset += len(rest)
                rest, prior, skipping = b"", b"", True
                yield LogProblem(
                    Location(name, lineno),
                    "too_long",
                    f"a line longer than {MAX_LINE} bytes, skipped",
                )
            if offset >= next_report and progress is not None:
                progress(_tell(raw, offset) if compressed else offset)
                next_report = offset + _PROGRESS_STEP
        if torn is not None and self.more:
            self.carry = torn
        elif torn is not None:
            yield torn.resolve(None, None)
        self.consumed = _tell(raw, offset) if compressed else offset
        if not start and records >= 0 and text_lines > records:
            yield _not_a_log(name, content_lines, text_lines, records)
        elif not start and records == 0:
            yield _no_records(name, lineno)

    def _parse(  # noqa: C901, PLR0911 - one return per kind of line
        self, content: bytes, location: Location, *, terminated: bool, end: int
    ) -> LogEntry | DecisionEntry | SpecEntry | LogProblem | None:
        if not (content.startswith(b"{") and RECORD_MARK in content) and terminated:
            if b"\x00" in content:
                return LogProblem(location, "binary", "a line of binary data, skipped")
            if content.startswith(_RECORD_START) and _cut_record(content):
                return LogProblem(location, "torn", "a record cut short, skipped")
            return None
        try:
            data = orjson.loads(content)
        except orjson.JSONDecodeError as exc:
            if not terminated:
                return LogProblem(
                    location, "torn", "the last line is cut short (a crash mid-write), skipped"
                )
            if not any(m in content for m in _MARKS):
                return None  # a host's line that mentions modefsm, not a broken record
            if exc.pos >= len(content) - 1:
                return LogProblem(
                    location,
                    "torn",
                    "a record cut short (a crash mid-write: its change was never made), skipped",
                )
            return LogProblem(location, "not_json", f"a modefsm record that is not JSON: {exc}")
        event = data.get("event") if isinstance(data, dict) else None
        if type(event) is not str or event not in RECORD_EVENTS:
            if (event == EVENT_DECIDED and self.decisions) or (
                event == EVENT_SPEC and self.headers
            ):
                return self._chained(data, location, end)
            return None
        try:
            record = TransitionRecord.model_validate(data)
        except ValidationError as exc:
            session_id = data.get("session_id")
            seq = data.get("seq")
            return LogProblem(
                location,
                "not_a_record",
                f"a {data['event']} record that does not fit the record model: " + _describe(exc),
                session_id if isinstance(session_id, str) else None,
                seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
            )
        intact = None
        if self.check_digests and record.digest is not None:
            intact = record_digest(data) == record.digest
        gseq = data.get("gseq")
        return LogEntry(location, record, end, intact, gseq if type(gseq) is int else None)

    def _chained(
        self, data: dict[str, Any], location: Location, end: int
    ) -> DecisionEntry | SpecEntry | LogProblem:
        """A decision or header line as its entry (or why it does not fit its model)."""
        model, entry, noun = _CHAINED_LINES[data["event"]]
        try:
            record = model.model_validate(data)
        except ValidationError as exc:
            session_id = data.get("session_id")
            return LogProblem(
                location,
                "not_a_record",
                f"a {data['event']} {noun} that does not fit the {noun} model: " + _describe(exc),
                session_id if isinstance(session_id, str) else None,
            )
        intact = None
        if self.check_digests and record.digest is not None:
            intact = record_digest(data) == record.digest
        if entry is DecisionEntry:
            gseq, at_gseq = data.get("gseq"), data.get("at_gseq")
            return DecisionEntry(
                location, record, end, intact,
                gseq if type(gseq) is int else None, at_gseq if type(at_gseq) is int else None,
            )  # fmt: skip
        made: SpecEntry = entry(location, record, end, intact)
        return made


_CHAINED_LINES: dict[str, tuple[Any, Any, str]] = {
    EVENT_DECIDED: (DecisionRecord, DecisionEntry, "record"),
    EVENT_SPEC: (SpecRecord, SpecEntry, "header"),
}
"""The chained lines that are not transition records: their model, entry, and noun."""


_REPAIRED = f'"{EVENT_REPAIRED}"'.encode()
_RECORD_START = b'{"timestamp":"'
_DIGEST_FIELD = re.compile(rb'"digest":"([0-9a-f]{64})"')
_SESSION_FIELD = re.compile(rb'"session_id":"((?:[^"\\]|\\.)*)","seq":(\d{1,18})[,}]')


class _Torn:
    """A record cut short inside a file, held until the record after it says what it was."""

    def __init__(self, problem: LogProblem, content: bytes, before: bytes) -> None:
        self.problem = problem
        found = _DIGEST_FIELD.search(content)
        self.digest = found.group(1).decode() if found else None
        self.before = _digest_of(before)
        ids = _SESSION_FIELD.search(content)
        self.session_id = self.seq = None
        if ids is not None:
            with contextlib.suppress(orjson.JSONDecodeError):
                self.session_id = orjson.loads(b'"' + ids.group(1) + b'"')
            self.seq = int(ids.group(2))

    def resolve(self, prev: object, digest: object) -> LogProblem:
        """The problem, its message saying what the next record's ``prev`` proves."""
        known = True
        if digest is None:
            why, known = "no chained record follows it", False
        elif prev == self.before:
            why = (
                "the next record continues the digest chain from the record before it: its "
                "writer never counted it, so its change was never acknowledged"
            )
        elif self.digest is not None and prev == self.digest:
            why = (
                "the next record continues the digest chain from it: its writer counted it "
                "as written, so its change may have been acknowledged, and its record is lost"
            )
        else:
            why, known = "the next record continues neither it nor the record before it", False
        if not known:
            why += "; the log cannot tell whether its change was acknowledged"
        return LogProblem(
            self.problem.location,
            "torn",
            f"a record cut short inside the log ({why}), skipped",
            self.session_id,
            self.seq,
            inside=True,
        )


def _repaired_tear(content: bytes, prior: bytes, location: Location) -> LogProblem | None:
    """The torn line *prior* that the ``modefsm.log_repaired`` line *content* ended, if so.

    A writer that opens a log whose last line is torn ends it with a newline and a
    ``modefsm.log_repaired`` line giving its length; a line of that length that is not a
    JSON object is the torn start of a record (a whole record that only lost its newline
    is not).
    """
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or data.get("event") != EVENT_REPAIRED:
        return None
    torn = prior.rstrip(b"\r\n")
    if data.get("torn_bytes") != len(torn) or not torn:
        return None
    try:
        whole = isinstance(orjson.loads(torn), dict)
    except orjson.JSONDecodeError:
        whole = False
    if whole:
        return None
    return LogProblem(location, "torn", "a record cut short, ended at a restart", inside=True)


def _cut_record(content: bytes) -> bool:
    """Whether *content*, a line without a record event, is the start of a record cut short.

    modefsm writes ``timestamp``, ``session_id`` and ``seq`` first and the event last, so
    a record cut before its event is a line that begins like one and is not JSON.
    """
    if _SESSION_FIELD.search(content, 0, 512) is None:
        return False
    try:
        orjson.loads(content)
    except orjson.JSONDecodeError:
        return True
    return False


def _digest_of(line: bytes) -> str | None:
    """The ``digest`` of a record line (``None``: none, or not a record line)."""
    if not line:
        return None
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    digest = data.get("digest") if isinstance(data, dict) else None
    return digest if isinstance(digest, str) else None


def _read_problem(name: str, lineno: int, exc: Exception) -> LogProblem:
    """Why the file cannot be read on after line *lineno*."""
    if isinstance(exc, EOFError):
        message = f"the gzip data ends early, after line {lineno} (an unfinished archive)"
        return LogProblem(Location(name, 0), "torn", message)
    return LogProblem(Location(name, 0), "unreadable", f"corrupt after line {lineno}: {exc}")


def _not_a_log(name: str, lines: int, text: int, records: int) -> LogProblem:
    noun = "record" if records == 1 else "records"
    message = (
        f"{text} of its {lines} lines are not JSON objects, more than its {records} "
        f"modefsm {noun}: not a transition log"
    )
    return LogProblem(Location(name, 0), "not_a_log", message)


def _no_records(name: str, lines: int) -> LogProblem:
    if lines == 0:
        return LogProblem(Location(name, 0), "empty", "empty file")
    noun = "line" if lines == 1 else "lines"
    return LogProblem(Location(name, 0), "no_records", f"{lines} {noun}, none a modefsm record")


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"])
        got = "" if err["type"] == "missing" else f" (got {err['input']!r})"
        parts.append(f"{where}: {err['msg']}{got}")
    return "; ".join(parts)


def _is_binary(content: bytes) -> bool:
    if b"\x00" in content:
        return True
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _tell(raw: Any, default: int) -> int:
    try:
        return int(raw.tell())
    except OSError:
        return default
