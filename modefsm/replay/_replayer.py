"""Replay: every session's history rebuilt from the log, re-checked against its spec.

:func:`replay` reads logs with :func:`~modefsm.log.read_log` and feeds each record to a
:class:`Replayer`, which keeps a few fields per session (never the whole log, unless
asked for the timelines) and checks, for each committed record:

- its ``seq``: no gap, no repeat, never backwards (per session);
- its ``from_mode``: the ``to_mode`` of the session's previous record;
- its legality: the change from ``from_mode`` to ``to_mode`` by its ``origin`` is a
  transition of the :class:`~modefsm.spec.TransitionTable` of the spec the record
  was written with (matched by ``spec_hash``: a spec given, else one a file's header
  holds, or a preset); a creation is in the spec's initial mode;
  a restore goes where the spec's restore policy says;
- approved switches: a ``tool_call_id``, and an ``option_id`` that the spec offers in the
  mode the switch was proposed in (``proposed_in``, else ``from_mode``), that approves,
  and whose target is ``to_mode``;
- host config options: a ``config_changed`` record leaves the mode where it was and its
  ``config`` is the session's values before it with ``config_id`` set to ``value``; any
  other committed record carries the session's ``config`` unchanged.

and, for each tool call decision (``modefsm.tool_decided``), that it was decided in the
session's committed mode by the spec's rules (:mod:`modefsm.replay._tools`).

With ``verify=True`` it also follows the digest chain (see :mod:`modefsm.log`): an
edited record, a deleted, inserted or moved one, a chain that restarts or forks (two
processes writing one file) is a violation at the line where it shows.

Example:
    >>> import io
    >>> from modefsm import LogStore, ModeEngine, TransitionLog, preset
    >>> buffer = io.BytesIO()
    >>> engine = ModeEngine(preset("seed"), store=LogStore(TransitionLog.to_stream(buffer)))
    >>> _ = engine.new_session("sess_1")
    >>> _ = engine.change("sess_1", "architect", "set_mode")
    >>> stdin = io.BufferedReader(io.BytesIO(buffer.getvalue()))
    >>> report = replay(["-"], verify=True, stdin=stdin)
    >>> report.session("sess_1").mode, report.violations, report.exit_status
    ('architect', (), 0)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal, overload

import msgspec
import orjson

from modefsm.errors import LogError, SpecError
from modefsm.log import (
    EVENT_CHANGED,
    EVENT_CONFIG,
    EVENT_CREATED,
    EVENT_DECIDED,
    EVENT_REJECTED,
    MAX_SPEC_TEXT,
    RECORD_MARK,
    DecisionEntry,
    DecisionRecord,
    Location,
    LogEntry,
    LogProblem,
    SpecEntry,
    SpecRecord,
    Take,
    TransitionRecord,
    canonical_encoder,
    canonical_record,
    previous_of,
    read_log,
    record_checks,
    record_decoder,
)
from modefsm.replay._merge import file_kind, merge_by_gseq, merged_kinds
from modefsm.replay._tools import ToolLedger, ToolTally
from modefsm.spec import PREVIOUS, ModeSpec, TransitionTable, preset, preset_names
from modefsm.store import LogRestore, RestorePoint, last_points

__all__ = [
    "ChainSummary",
    "LogRestore",
    "Note",
    "ReplayReport",
    "Replayer",
    "RestorePoint",
    "SessionHistory",
    "Violation",
    "ViolationKind",
    "iter_records",
    "last_points",
    "replay",
]

ViolationKind = Literal[
    "bad_record", "gap", "repeat", "out_of_order", "from_mode", "creation", "illegal",
    "switch", "unknown_spec", "spec_changed", "tampered", "chain", "no_digest", "torn",
    "session_chain", "duplicate", "gseq", "tool_policy", "config", "spec_header",
    "spec_mismatch",
]  # fmt: skip
"""What a :class:`Violation` is about.

``bad_record``: a modefsm record that does not parse. ``gap``, ``repeat``,
``out_of_order``: its ``seq``. ``from_mode``: not where the previous record left the
session. ``creation``: a ``session_created`` that is not ``seq`` 1 in the initial mode.
``illegal``: the spec does not allow the change by its origin. ``switch``: an approved
switch without its tool call, or with an option not offered. ``unknown_spec``,
``spec_changed``: no spec given has the records' ``spec_hash`` (so their legality is
unchecked). ``spec_header``: a file's header (``modefsm.spec``) whose definition is not a
valid spec, or not the spec its name and ``spec_hash`` say (changed after it was written).
``spec_mismatch``: a header names a spec that is not among the specs given (``--spec``):
its records are not checked. ``tampered``: the digest does not match the record.
``chain``: the record does not continue the chain. ``no_digest``: records that cannot be
verified. ``torn``: a record cut short with more of the log after it (a torn *last* line
is a note, what a crash leaves); its message says whether the next record proves its
change was never acknowledged, or may have been.

Only when the files of several PostgreSQL workers are read together (merged by ``gseq``):
``session_chain``: the record's ``session_prev`` is not the digest of its session's
previous record (that record was replaced, or two writers forked the session).
``duplicate``: a ``gseq`` read before (a record copied into a second file, or an edited
``gseq``). ``gseq``: a committed record without ``gseq``, or one whose ``gseq`` is not
above the one before it in its file (a record moved within the file, or its ``gseq``
edited).

``config``: a ``config_changed`` record that moves the mode or whose ``config`` is not the
session's values with its ``config_id`` set to its ``value``, or another committed record
whose ``config`` differs from the session's values before it.

``tool_policy``: a tool call decision (``modefsm.tool_decided``) made in a mode other than
the session's committed one, or against a stale record of it, or that the spec's rules do
not give, or an ask without its outcome, or a ``granted`` run that no earlier
``allow_always`` covers."""


@dataclass(frozen=True, slots=True)
class Violation:
    """Something in the log that should not be there.

    Attributes:
        location: where it shows (file and line).
        kind: see :data:`ViolationKind`.
        message: what is wrong, for people.
        session_id: the session, when it concerns one.
        seq: the record's ``seq``, when it has one.
    """

    location: Location
    kind: ViolationKind
    message: str
    session_id: str | None = None
    seq: int | None = None

    def __str__(self) -> str:
        """Return ``path:line: session 'id' seq N: kind: message`` (what is known of it)."""
        parts = [str(self.location)]
        if self.session_id is not None:
            parts.append(
                f"session {self.session_id!r}" + ("" if self.seq is None else f" seq {self.seq}")
            )
        return ": ".join([*parts, self.kind, self.message])


@dataclass(frozen=True, slots=True)
class Note:
    """Something worth knowing that is not a violation (a torn last line, a partial history).

    Attributes:
        location: where (line 0: the file as a whole).
        kind: a :data:`~modefsm.log.ProblemKind` of the reader, or ``partial`` (a session
            whose earlier records are in a log not given); in
            :attr:`ReplayReport.errors` also ``no_records`` (the input holds none) and
            ``no_session`` (the session asked for is not in it).
        message: what, for people.
    """

    location: Location
    kind: str
    message: str

    def __str__(self) -> str:
        """Return ``path:line: kind: message`` (``kind: message`` for the whole input)."""
        where = f"{self.location}: " if self.location.path else ""
        return f"{where}{self.kind}: {self.message}"


_INPUT = Location("", 0)
"""The input as a whole, for notes about no file in particular."""


@dataclass(frozen=True, slots=True)
class SessionHistory:
    """One session as the log tells it.

    Attributes:
        session_id: ACP ``sessionId``.
        mode: its mode after its last committed record (``None``: only rejections seen).
        seq: the ``seq`` of that record (0 when none).
        spec: the spec name of its last record.
        spec_hash: that record's ``spec_hash``.
        changes: its committed records (creation, changes, restores) in order, when the
            timelines were kept; records that repeat or go back are not in it.
        records: the number of committed records applied.
        rejections: the number of ``change_rejected`` records.
        first: where it first appears.
        last: where its last record is.
        tools: its tool call decisions, counted by mode and kind (empty: none logged).
        config: its host config options' values after its last committed record, by
            ``configId`` (empty: none set).
        config_changes: the number of ``config_changed`` records applied.
    """

    session_id: str
    mode: str | None
    seq: int
    spec: str
    spec_hash: str
    changes: tuple[TransitionRecord, ...]
    records: int
    rejections: int
    first: Location
    last: Location
    tools: tuple[ToolTally, ...] = ()
    config: dict[str, str | bool] = field(default_factory=dict)
    config_changes: int = 0


@dataclass(frozen=True, slots=True)
class ChainSummary:
    """What ``verify`` saw of the digest chain.

    Attributes:
        verified: records whose digest matched and that continued the chain.
        unverifiable: records without a digest.
        head: the ``digest`` of the last record read (keep it elsewhere to detect a cut tail).
        heads: with several workers' files merged by ``gseq``: each file and the digest of
            its last record (``None`` for a database export, whose records chain by
            session only); ``head`` is then ``None``.
    """

    verified: int
    unverifiable: int
    head: str | None
    heads: tuple[tuple[str, str | None], ...] = ()


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """The result of a replay.

    Attributes:
        sessions: every session seen (the ``--session`` one only, if given), in order of
            first appearance.
        violations: in input order (spec and digest summaries at the end).
        notes: torn lines, partial histories and other facts that are not violations.
        errors: why some input was unusable (unreadable, binary, no records at all).
        records: the number of modefsm records read (all sessions).
        chain: the digest chain summary, with ``verify``; else ``None``.
    """

    sessions: tuple[SessionHistory, ...]
    violations: tuple[Violation, ...]
    notes: tuple[Note, ...]
    errors: tuple[Note, ...]
    records: int
    chain: ChainSummary | None

    def session(self, session_id: str) -> SessionHistory | None:
        """The history of *session_id*, if the log has it."""
        return next((s for s in self.sessions if s.session_id == session_id), None)

    @property
    def exit_status(self) -> int:
        """What ``modefsm replay`` exits with.

        ``2`` if some input was unusable; else ``1`` if there is a violation other than
        ``unknown_spec``, ``spec_changed`` and ``spec_mismatch``; else ``3`` if there are
        only those (records whose spec was not given, or a header naming another spec than
        the one given: unchecked, so neither clean nor shown to be wrong); else ``0``.
        """
        if self.errors:
            return 2
        if any(v.kind not in _SPEC_KINDS for v in self.violations):
            return 1
        return 3 if self.violations else 0


_SPEC_KINDS = frozenset({"unknown_spec", "spec_changed", "spec_mismatch"})
_At = tuple[str, int]
"""A place as ``(path, line)``: what the replayer keeps; a :class:`Location` for reports."""


def _where(at: _At) -> str:
    return str(Location(*at))


@dataclass(slots=True)
class _Track:
    first: _At
    last: _At  # the session's last record
    at: _At  # its last committed record (the one that set mode and seq)
    spec: str
    spec_hash: str
    mode: str | None = None
    seq: int = 0
    previous: str | None = None
    records: int = 0
    rejections: int = 0
    changes: list[TransitionRecord] = field(default_factory=list)
    digest: str | None = None  # of its last committed record (merged replays only)
    config: dict[str, str | bool] | None = None  # its host option values (None: none set)
    config_changes: int = 0

    def commit(  # noqa: PLR0917 - a record's fields, without building the record
        self,
        at: _At,
        seq: int,
        origin: str,
        source: str | None,
        dest: str,
        spec: str,
        spec_hash: str,
    ) -> None:
        """Move the session on by a committed record read at *at* (not a config record)."""
        previous, keep = previous_of(origin, source)
        if not keep:
            self.previous = previous
        self.mode, self.seq, self.last, self.at = dest, seq, at, at
        self.spec, self.spec_hash = spec, spec_hash
        self.records += 1


_TAMPERED = "the record was changed after it was written: its digest does not match"
_FORK = "(two processes writing one file, or an inserted or moved record)"
_RESTART = (
    "a new chain starts in the middle of the file: another process began a fresh log "
    "here, or the records before it were replaced"
)
_NOT_CONTINUED = (
    "its first record continues no record read before it (a file missing between them, "
    "or files out of order)"
)
_BROKEN = (
    "the chain breaks here: this record continues no record read before it (a record "
    "before it was deleted or moved)"
)
_OUT_OF_ORDER = (
    "{} continues this record, but was read before it: the files are out of order "
    "(give them oldest first)"
)
_MAX_HEADS = 16
_MAX_RECENT = 4096


class _Chain:
    """Follows the digest chain with bounded memory: a few chain heads, recent digests.

    Places are kept as ``(path, line)`` pairs (:data:`_At`) and made :class:`Location`
    objects only for a message.
    """

    def __init__(self) -> None:
        self.heads: dict[str, _At] = {}  # digests no record continues yet, oldest first
        # The last _MAX_RECENT distinct digests: where each was (last) read, and the record
        # continuing it; a digest read again keeps its age, as in an insertion-ordered dict
        self.recent: dict[str, list[_At | None]] = {}
        self.ring: list[str | None] = [None] * _MAX_RECENT  # recent's keys, oldest first
        self.slot = 0
        # The prev of the record that anchored the chain, until a later record has it as
        # its digest (files given out of order): the anchor's place
        self.awaited: str | None = None
        self.anchor: _At | None = None
        self.path: str | None = None
        self.seen = 0
        self.verified = 0
        self.head: str | None = None
        self.undigested: dict[str, tuple[int, Location]] = {}

    def check(self, entry: LogEntry | DecisionEntry | SpecEntry) -> list[tuple[ViolationKind, str]]:
        record, location = entry.record, entry.location
        new_file = location.path != self.path
        previous_path, self.path = self.path, location.path
        if record.digest is None:
            count, first = self.undigested.get(location.path, (0, location))
            self.undigested[location.path] = (count + 1, first)
            return []
        found: list[tuple[ViolationKind, str]] = []
        if entry.intact is False:
            found.append(("tampered", _TAMPERED))
        broken = self._link(record.prev, new_file=new_file, previous_path=previous_path)
        if broken is not None:
            found.append(("chain", broken))
        if self.seen == 0:
            self.awaited, self.anchor = record.prev, (location.path, location.line)
        elif record.digest == self.awaited and self.anchor is not None:
            self.awaited = None
            if self.anchor[0] != location.path:  # in one file, a moved record shows above
                found.append(("chain", _OUT_OF_ORDER.format(_where(self.anchor))))
        self._advance((location.path, location.line), record.prev, record.digest)
        self.verified += not found and not isinstance(entry, SpecEntry)  # headers: uncounted
        return found

    def follow(self, at: _At, prev: str | None, digest: str) -> bool:
        """Take a record that continues the last one read, in the same file.

        The common case, without building a record; the caller has found its digest
        intact. Returns ``False`` (and changes nothing) for any other record, which
        :meth:`check` then takes.
        """
        if prev != self.head or prev is None or at[0] != self.path or digest == self.awaited:
            return False
        self._advance(at, prev, digest)
        self.verified += 1
        return True

    def _advance(self, at: _At, prev: str | None, digest: str) -> None:
        heads, recent = self.heads, self.recent
        if prev is not None:
            heads.pop(prev, None)
            seen = recent.get(prev)
            if seen is not None:
                seen[1] = at
        heads[digest] = at
        if len(heads) > _MAX_HEADS:
            del heads[next(iter(heads))]
        again = recent.get(digest)
        if again is not None:  # a duplicated record
            again[0], again[1] = at, None
        else:
            slot = self.slot
            old = self.ring[slot]
            if old is not None:
                del recent[old]
            self.ring[slot] = digest
            self.slot = (slot + 1) % _MAX_RECENT
            recent[digest] = [at, None]
        self.seen += 1
        self.head = digest

    def _link(self, prev: str | None, *, new_file: bool, previous_path: str | None) -> str | None:
        """Why a record with *prev* does not continue the chain, or ``None`` if it does."""
        if self.seen == 0 or prev in self.heads:
            return None  # the first record anchors the chain; the others continue a head
        if prev is not None and prev in self.recent:
            at, by = self.recent[prev]
            assert at is not None  # noqa: S101 - set when the digest was read
            by_text = f", which {_where(by)} already continues" if by is not None else ""
            return f"the chain forks here: this record continues {_where(at)}{by_text} " + _FORK
        if prev is None:
            return None if new_file else _RESTART
        if new_file:
            return f"this file does not continue {previous_path}: " + _NOT_CONTINUED
        return _BROKEN

    def violations(self) -> Iterator[Violation]:
        for path, (count, first) in self.undigested.items():
            noun = "record carries" if count == 1 else "records carry"
            yield Violation(
                first,
                "no_digest",
                f"{count} {noun} no digest in {path} (the first here): written before "
                "records were chained, or by another writer; they cannot be verified",
            )

    def summary(self) -> ChainSummary:
        unverifiable = sum(count for count, _ in self.undigested.values())
        return ChainSummary(self.verified, unverifiable, self.head)


class Replayer:
    """Replays records one at a time; :meth:`report` gives the result so far.

    A file's header (``modefsm.spec``, a :class:`~modefsm.log.SpecEntry`) is checked: its
    definition must be a valid spec whose name and content hash are the header's
    (``spec_header`` otherwise). Without *specs* its spec then checks the records after
    it; with *specs*, a header naming a spec not among them is a ``spec_mismatch``.

    Args:
        specs: the specs the records may have been written with; ``None``: the specs the
            logs' headers hold and the shipped presets. Records are matched to a spec by
            ``spec_hash``.
        verify: also follow the digest chain (entries must come from
            ``read_log(..., check_digests=True)``).
        session_id: replay only this session (the chain is still followed over all).
        keep_timeline: keep every session's committed records
            (:attr:`SessionHistory.changes`); memory then grows with the log.
        exports: with ``merged``, the files that are database exports (their records
            chain by session only: no file chain is followed in them).
        merged: the entries are the files of several PostgreSQL workers merged by
            ``gseq`` (:func:`merge_by_gseq`): each file's chain is followed on its own,
            each session's by ``session_prev``, and ``gseq`` is checked (see
            :data:`ViolationKind`). :meth:`take` is not used then.
    """

    def __init__(
        self,
        specs: Iterable[ModeSpec] | None = None,
        *,
        verify: bool = False,
        session_id: str | None = None,
        keep_timeline: bool = False,
        merged: bool = False,
        exports: Iterable[str] = (),
    ) -> None:
        """Prepare each spec's :class:`~modefsm.spec.TransitionTable`."""
        self.explicit_specs = specs is not None
        given = list(specs) if specs is not None else [preset(n) for n in preset_names()]
        self._specs: dict[str, _Rules] = {s.content_hash: (s, s.table) for s in given}
        # The transitions take() may apply; none when timelines are kept (records needed)
        self._edges = {} if keep_timeline else {h: _Edges(m) for h, (_, m) in self._specs.items()}
        self._initial = {h: s.initial for h, (s, _) in self._specs.items()}
        self._decode = record_decoder()  # take's first way to check a line
        self._verify = verify
        self._session_id = session_id
        self._keep = keep_timeline
        self._chain = _Chain() if verify else None
        self._tracks: dict[str, _Track] = {}
        self._unknown: dict[str, tuple[int, LogEntry]] = {}
        self._violations: list[Violation] = []
        self._notes: list[Note] = []
        self._errors: list[Note] = []
        self._records = 0
        self._merged = merged
        self._exports = frozenset(exports)
        self._chains: dict[str, _Chain] = {}  # merged: each file's own chain
        self._file_gseq: dict[str, tuple[int, _At]] = {}  # merged: each file's last gseq
        self._gseqs: dict[int, tuple[_At, str | None]] = {}  # merged: recent gseqs read
        self._intact = 0  # merged: export records whose digest matched
        self._ledger = ToolLedger()
        # the spec_hash of headers reported (a spec not given, or a bad definition): their
        # records are not reported again as of an unknown spec
        self._mismatched: set[str] = set()
        self._untexted: set[str] = set()  # headers' spec_hash without a definition

    def feed(self, item: LogEntry | DecisionEntry | SpecEntry | LogProblem) -> bool:
        """Take the next item of :func:`~modefsm.log.read_log`.

        Returns:
            Whether *item* is a record of the replayed session(s) (a decision is checked
            and counted, and not one of them).
        """
        if isinstance(item, LogProblem):
            self._problem(item)
            return False
        if isinstance(item, DecisionEntry):
            self._decided(item)
            return False
        if isinstance(item, SpecEntry):
            self._header(item)
            return False
        record = item.record
        self._follow_chain(item)
        if self._merged and record.event != EVENT_REJECTED and not self._placed(item):
            return False  # the same record again: applied once
        if self._session_id is not None and record.session_id != self._session_id:
            return False
        spec = self._spec(item)
        if record.event == EVENT_REJECTED:
            self._rejected(item)
        else:
            self._committed(item, spec)
        return True

    def _follow_chain(self, entry: LogEntry | DecisionEntry | SpecEntry) -> None:
        """Count a record read and follow the digest chain by it (with ``verify``)."""
        self._records += not isinstance(entry, SpecEntry)
        chain = self._chain if not self._merged else self._file_chain(entry)
        if chain is not None:
            for kind, message in chain.check(entry):
                self._violation(entry, kind, message)

    def _decided(self, entry: DecisionEntry) -> None:
        """Check a tool call decision against the session as its records left it."""
        record = entry.record
        self._follow_chain(entry)
        if self._session_id is not None and record.session_id != self._session_id:
            return
        track = self._tracks.get(record.session_id)
        committed = None if track is None else (track.mode, track.seq, track.spec_hash)
        found = self._specs.get(record.spec_hash)
        spec = found[0] if found is not None else None
        for message in self._ledger.check(record, committed, spec):
            self._violations.append(
                Violation(entry.location, "tool_policy", message, record.session_id)
            )
        if track is not None:
            track.last = (entry.location.path, entry.location.line)

    def _header(self, entry: SpecEntry) -> None:
        """Check a file's header; learn its spec (or, with specs given, check it is one)."""
        self._follow_chain(entry)
        record = entry.record
        spec_hash = record.spec_hash
        spec = None
        if record.definition is None:  # too long to be held: named only
            self._untexted.add(spec_hash)
        else:
            spec, problem = _header_spec(record)
            if problem is not None:
                self._violations.append(Violation(entry.location, "spec_header", problem))
                self._mismatched.add(spec_hash)  # its records: said here, not again
                return
        if not self.explicit_specs:
            if spec is not None and spec_hash not in self._specs:
                self._specs[spec_hash] = (spec, spec.table)
                self._initial[spec_hash] = spec.initial
                if not self._keep:
                    self._edges[spec_hash] = _Edges(spec.table)
            return
        if spec_hash in self._specs or spec_hash in self._mismatched:
            return  # the spec given (its records are checked against it), or said already
        self._mismatched.add(spec_hash)
        given = ", ".join(f"{s.name!r} {h}" for h, (s, _) in self._specs.items())
        message = (
            f"the log was written with spec {record.spec!r} {spec_hash} (its header), not "
            f"with the spec given ({given}); its records are not checked: replay without "
            "--spec or --preset to check them against the header's spec"
        )
        self._violations.append(Violation(entry.location, "spec_mismatch", message))

    def _file_chain(self, entry: LogEntry | DecisionEntry | SpecEntry) -> _Chain | None:
        """Merged: the chain of *entry*'s file (``None`` for an export, or without verify)."""
        if not self._verify:
            return None
        path = entry.location.path
        if path in self._exports:  # chained by session only; the digest is still checked
            if entry.intact is False:
                self._violation(entry, "tampered", _TAMPERED)
            else:
                self._intact += entry.intact is True and not isinstance(entry, SpecEntry)
            return None
        chain = self._chains.get(path)
        if chain is None:
            chain = self._chains[path] = _Chain()
        return chain

    def _placed(self, entry: LogEntry) -> bool:
        """Merged: check a committed record's ``gseq``; ``False`` for a repeated record."""
        gseq, location = entry.gseq, entry.location
        if gseq is None:
            self._violation(
                entry,
                "gseq",
                "a committed record without a gseq: its place among the other files is "
                "unknown (taken in its file's order)",
            )
            return True
        at, digest = (location.path, location.line), entry.record.digest
        seen = self._gseqs.get(gseq)
        if seen is not None:
            same = seen[1] == digest
            what = "the same record (ignored)" if same else "another record (its gseq edited)"
            message = f"gseq {gseq} again: {_where(seen[0])} has it already, {what}"
            self._violation(entry, "duplicate", message)
            if same:
                return False
        last = self._file_gseq.get(location.path)
        if last is not None and gseq <= last[0]:
            self._violation(
                entry,
                "gseq",
                f"gseq {gseq} comes after gseq {last[0]} ({_where(last[1])}) in the same "
                "file: a record was moved, or its gseq edited",
            )
        self._file_gseq[location.path] = (gseq, at)
        self._gseqs[gseq] = (at, digest)
        if len(self._gseqs) > _MAX_RECENT:
            del self._gseqs[next(iter(self._gseqs))]
        return True

    def take(
        self,
        path: str,
        line: int,
        lines: list[bytes],
        start: int,
        offset: int = 0,  # noqa: ARG002 - read_log's Take: replay needs no byte offsets
    ) -> int:
        """The fast path of :meth:`feed`, for :func:`~modefsm.log.read_log`'s ``take``.

        Takes records that only move their session on, without building their
        :class:`~modefsm.log.TransitionRecord`: creations, client changes, restores and
        rejections whose every field holds a value the model keeps as it is (see
        :func:`~modefsm.log.record_checks`), that continue their session (and, with
        ``verify``, the digest chain, their digest intact) and that their spec allows. It
        applies them exactly as :meth:`feed` would, from ``lines[start]`` on, and stops at
        the first line it cannot take (a switch, a violation, a note, a host's line, a
        kept timeline), having changed nothing for that line, which then comes back
        through :meth:`feed`.

        Args:
            path: the file, as :class:`~modefsm.log.Location` names it.
            line: the line number of ``lines[start]``, from 1.
            lines: complete lines of the file, without their newline.
            start: the first line offered.
            offset: where ``lines[start]`` begins in the file (not used here).

        Returns:
            The index of the first line not taken (``len(lines)``: all of them).
        """
        return self._take(path, line, lines, start, replayed=True)

    def take_others(
        self,
        path: str,
        line: int,
        lines: list[bytes],
        start: int,
        offset: int = 0,  # noqa: ARG002 - as for take
    ) -> int:
        """:meth:`take`, for the records of the sessions not replayed only.

        For a caller that needs each replayed record as a :class:`~modefsm.log.LogEntry`
        (:func:`replay`'s ``on_entry``).
        """
        return self._take(path, line, lines, start, replayed=self._session_id is None)

    def _take(  # noqa: C901, PLR0912, PLR0915 - the hot loop: no call per record it can spare
        self, path: str, line: int, lines: list[bytes], start: int, *, replayed: bool
    ) -> int:
        tracks, edges_of, initial_of = self._tracks, self._edges, self._initial
        only, chain = self._session_id, self._chain
        decode, not_a_record, unset = self._decode, msgspec.MsgspecError, msgspec.UNSET
        encode, sha256, mark = canonical_encoder(), hashlib.sha256, RECORD_MARK
        decided = _DECIDED
        line -= start
        index, count = start, len(lines)
        while index < count:
            raw = lines[index]
            if raw[:1] != b"{" or raw.rfind(mark) < 0:
                break  # read_log skips it, or reads it as a problem
            # Every field checked against the model: at once (a line of the model's keys
            # only), else one by one (a line with a host's keys too)
            canonical = None
            try:
                record = decode(raw)
            except not_a_record:
                if decided in raw:
                    break  # most likely a decision: feed's (the reader yields it)
                fields = _fields(raw, digests=chain is not None)
                if fields is None:
                    break
                event, session_id, seq, source, dest, origin, spec_name, spec_hash = fields[:8]
                prev, digest, canonical = fields[8:]
            else:
                event, session_id, seq = record.event, record.session_id, record.seq
                source, dest, origin = record.from_mode, record.to_mode, record.origin
                spec_name, spec_hash = record.spec, record.spec_hash
            track = None
            if only is not None and session_id != only:
                event = None  # not replayed: only counted, and its chain link followed
            elif not replayed:
                break
            else:
                edges = edges_of.get(spec_hash)
                if edges is None:
                    break
                track = tracks.get(session_id)
                if event == EVENT_CHANGED:
                    # a switch has no edge here: feed checks its option; nor has a
                    # session with host option values: feed checks they are carried
                    if (
                        track is None
                        or track.config is not None
                        or seq != track.seq + 1
                        or source != track.mode
                        or source is None
                        or dest is None
                        or not edges[origin, source, dest]
                    ):
                        break
                elif event == EVENT_CONFIG:
                    break  # feed checks it against the session's values
                elif event == EVENT_CREATED:
                    if (
                        track is not None
                        or seq != 1
                        or origin != "new"
                        or source is not None
                        or dest != initial_of[spec_hash]
                    ):
                        break
                elif (  # a rejection
                    track is not None
                    and track.mode is not None
                    and source is not None
                    and source != track.mode
                ):
                    break
            at = (path, line + index)
            if chain is not None:
                # With verify: the record continues the chain, its digest intact
                if canonical is None:  # decoded whole: the bytes its digest covers
                    prev, digest = record.prev, record.digest
                    record.level = record.digest = unset
                    canonical = encode(record)
                if (
                    type(digest) is not str
                    or sha256(canonical).hexdigest() != digest
                    or not chain.follow(at, prev, digest)
                ):
                    break
            index += 1
            if event is None:
                continue
            if track is None:
                tracks[session_id] = track = _Track(at, at, at, spec_name, spec_hash)
            if event == EVENT_REJECTED:
                track.rejections += 1
                track.last = at
            else:
                track.commit(at, seq, origin, source, dest, spec_name, spec_hash)
        self._records += index - start
        return index

    def report(self) -> ReplayReport:
        """The result for everything fed so far."""
        violations = list(self._violations)
        for spec_hash, (count, entry) in self._unknown.items():
            if spec_hash not in self._mismatched:  # said once, at the header
                violations.append(self._unknown_spec(spec_hash, count, entry))
        if self._chain is not None:
            violations.extend(self._chain.violations())
        for file_chain in self._chains.values():
            violations.extend(file_chain.violations())
        notes, errors = list(self._notes), list(self._errors)
        if self._records == 0 and not errors:
            errors.append(Note(_INPUT, "no_records", "the input holds no modefsm record"))
        elif self._session_id is not None and not self._tracks and not errors:
            message = f"the input holds no record of session {self._session_id!r}"
            errors.append(Note(_INPUT, "no_session", message))
        sessions = tuple(
            SessionHistory(
                session_id=sid,
                mode=t.mode,
                seq=t.seq,
                spec=t.spec,
                spec_hash=t.spec_hash,
                changes=tuple(t.changes),
                records=t.records,
                rejections=t.rejections,
                first=Location(*t.first),
                last=Location(*t.last),
                tools=self._ledger.tallies(sid),
                config=dict(t.config or {}),
                config_changes=t.config_changes,
            )
            for sid, t in self._tracks.items()
        )
        chain = self._chain.summary() if self._chain is not None else None
        if self._merged and self._verify:
            summaries = {path: c.summary() for path, c in self._chains.items()}
            heads = [(path, summaries[path].head) for path in self._chains]
            heads += [(path, None) for path in sorted(self._exports)]
            chain = ChainSummary(
                sum(c.verified for c in summaries.values()) + self._intact,
                sum(c.unverifiable for c in summaries.values()),
                None,
                tuple(heads),
            )
        return ReplayReport(
            sessions, tuple(violations), tuple(notes), tuple(errors), self._records, chain
        )

    # -- records ---------------------------------------------------------------------------

    def _problem(self, problem: LogProblem) -> None:
        if problem.inside:  # a torn record with more log after it: never a clean log
            if self._session_id is None or problem.session_id in (None, self._session_id):
                self._violations.append(
                    Violation(
                        problem.location, "torn", problem.message, problem.session_id, problem.seq
                    )
                )
        elif problem.fatal:
            self._errors.append(Note(problem.location, problem.kind, problem.message))
        elif problem.bad_record:
            if self._session_id is None or problem.session_id in (None, self._session_id):
                self._violations.append(
                    Violation(
                        problem.location,
                        "bad_record",
                        problem.message,
                        problem.session_id,
                        problem.seq,
                    )
                )
        else:
            self._notes.append(Note(problem.location, problem.kind, problem.message))

    def _track(self, entry: LogEntry) -> _Track:
        record = entry.record
        track = self._tracks.get(record.session_id)
        if track is None:
            at = (entry.location.path, entry.location.line)
            track = _Track(at, at, at, record.spec, record.spec_hash)
            self._tracks[record.session_id] = track
        return track

    def _rejected(self, entry: LogEntry) -> None:
        record = entry.record
        track = self._track(entry)
        track.rejections += 1
        track.last = (entry.location.path, entry.location.line)
        # merged: a worker rejects from its own view of the session, which may be stale
        stale = self._merged
        if not stale and track.mode is not None and record.from_mode not in (None, track.mode):
            self._violation(
                entry,
                "from_mode",
                f"rejected in mode {record.from_mode!r}, but seq {track.seq} "
                f"({_where(track.at)}) left the session in {track.mode!r}",
            )

    def _committed(self, entry: LogEntry, spec: _Rules | None) -> None:
        record = entry.record
        seq, to_mode = record.seq, record.to_mode
        if seq is None or to_mode is None:
            missing = "seq" if seq is None else "to_mode"
            self._violation(entry, "bad_record", f"a {record.event} record without {missing}")
            return
        track = self._track(entry)
        if not self._in_order(entry, track, seq):
            return
        previous = track.previous
        if record.event == EVENT_CREATED:
            self._check_creation(entry, spec)
        elif track.mode is None:
            if seq <= 1:
                self._violation(entry, "creation", "seq 1 is the creation, not a change")
            else:
                self._notes.append(
                    Note(
                        entry.location,
                        "partial",
                        f"session {record.session_id!r} starts at seq {seq} here: its "
                        "earlier records are in a log not given",
                    )
                )
        else:
            self._follows(entry, track, seq)
        self._check_change(entry, track, spec)
        at = (entry.location.path, entry.location.line)
        track.commit(
            at, seq, record.origin, record.from_mode, to_mode, record.spec, record.spec_hash
        )
        if record.event == EVENT_CONFIG:
            track.previous = previous  # the mode did not move
            track.config_changes += 1
        track.config = record.config or None
        track.digest = record.digest
        if self._keep:
            track.changes.append(record)

    def _check_change(self, entry: LogEntry, track: _Track, spec: _Rules | None) -> None:
        """Check a committed record's legality and its host option values."""
        record = entry.record
        if record.event == EVENT_CONFIG:
            self._check_config(entry, track)
            return
        self._check_carried(entry, track)
        if spec is not None and record.event != EVENT_CREATED:
            for kind, message in _legality(record, track, *spec):
                self._violation(entry, kind, message)

    def _check_carried(self, entry: LogEntry, track: _Track) -> None:
        """Check that a committed record other than a config one keeps the host values."""
        record = entry.record
        if track.mode is None and record.event != EVENT_CREATED:
            return  # a partial history: the values before it are not known
        carried = track.config if record.event != EVENT_CREATED else None
        if (record.config or None) != carried:
            self._violation(
                entry,
                "config",
                f"config {record.config!r}, but the session's host options were "
                f"{carried!r} before it: only a config_changed record changes them",
            )

    def _check_config(self, entry: LogEntry, track: _Track) -> None:
        """Check a ``config_changed`` record: the mode stays, one value is set."""
        record = entry.record
        problems = []
        if record.from_mode != record.to_mode:
            problems.append(
                f"a config_changed record moves the mode from {record.from_mode!r} to "
                f"{record.to_mode!r} (it leaves the mode as it is)"
            )
        if not isinstance(record.config_id, str) or record.value is None:
            problems.append("a config_changed record without its config_id and value")
        elif track.mode is not None:
            expected = {**(track.config or {}), record.config_id: record.value}
            if record.config != expected:
                problems.append(
                    f"config {record.config!r}, but setting {record.config_id!r} to "
                    f"{record.value!r} from the session's {track.config or {}!r} gives "
                    f"{expected!r}"
                )
        for message in problems:
            self._violation(entry, "config", message)

    def _follows(self, entry: LogEntry, track: _Track, seq: int) -> None:
        """Check a change against its session's last committed record."""
        record = entry.record
        if self._merged and seq == track.seq + 1 and record.session_prev != track.digest:
            self._violation(
                entry,
                "session_chain",
                f"its session_prev is not the digest of seq {track.seq} ({_where(track.at)}): "
                "that record was replaced, or two writers forked the session",
            )
        if record.from_mode != track.mode:
            self._violation(
                entry,
                "from_mode",
                f"from_mode {record.from_mode!r}, but seq {track.seq} ({_where(track.at)}) left "
                f"the session in {track.mode!r}",
            )

    def _in_order(self, entry: LogEntry, track: _Track, seq: int) -> bool:
        if track.mode is None or seq == track.seq + 1:
            return True
        if seq > track.seq:
            missing = seq - track.seq - 1
            noun = "record is" if missing == 1 else "records are"
            self._violation(
                entry,
                "gap",
                f"seq {seq} follows seq {track.seq} ({_where(track.at)}): {missing} {noun} missing",
            )
            return True
        if seq == track.seq:
            self._violation(
                entry, "repeat", f"seq {seq} again: {_where(track.at)} has it already (ignored)"
            )
        else:
            self._violation(
                entry,
                "out_of_order",
                f"seq {seq} comes after seq {track.seq} ({_where(track.at)}): records out of order "
                "(ignored)",
            )
        return False

    def _check_creation(self, entry: LogEntry, spec: _Rules | None) -> None:
        record = entry.record
        problems = []
        if record.seq != 1:
            problems.append(f"session_created with seq {record.seq} (a creation is seq 1)")
        if record.origin != "new" or record.from_mode is not None:
            problems.append(
                f"session_created with origin {record.origin!r} and from_mode "
                f"{record.from_mode!r} (a creation has origin 'new', no from_mode)"
            )
        if spec is not None and record.to_mode != spec[0].initial:
            problems.append(
                f"created in mode {record.to_mode!r}, but spec {spec[0].name!r} starts "
                f"sessions in {spec[0].initial!r}"
            )
        for message in problems:
            self._violation(entry, "creation", message)

    def _spec(self, entry: LogEntry) -> _Rules | None:
        spec_hash = entry.record.spec_hash
        found = self._specs.get(spec_hash)
        if found is None:
            count, first = self._unknown.get(spec_hash, (0, entry))
            self._unknown[spec_hash] = (count + 1, first)
        return found

    def _unknown_spec(self, spec_hash: str, count: int, entry: LogEntry) -> Violation:
        record = entry.record
        noun = "record" if count == 1 else "records"
        same_name = [s for s, _ in self._specs.values() if s.name == record.spec]
        unchecked = f"{count} {noun} (the first here) were not checked against a spec"
        if same_name:
            given = ", ".join(s.content_hash for s in same_name)
            return Violation(
                entry.location,
                "spec_changed",
                f"spec {record.spec!r} changed since these records were written: they have "
                f"{spec_hash}, the spec given has {given}; {unchecked}. Pass the version "
                "they were written with",
                record.session_id,
                record.seq,
            )
        given = ", ".join(f"{s.name} {h}" for h, (s, _) in self._specs.items()) or "none"
        source = "given" if self.explicit_specs else "shipped (presets) or named by a header"
        untexted = (
            f" (its header names it without its definition, longer than {MAX_SPEC_TEXT} bytes)"
            if spec_hash in self._untexted
            else ""
        )
        return Violation(
            entry.location,
            "unknown_spec",
            f"no spec {source} has {spec_hash} (spec {record.spec!r}{untexted}; known: "
            f"{given}); {unchecked}. Pass the spec they were written with",
            record.session_id,
            record.seq,
        )

    def _violation(
        self, entry: LogEntry | DecisionEntry | SpecEntry, kind: ViolationKind, message: str
    ) -> None:
        if isinstance(entry, SpecEntry):
            self._violations.append(Violation(entry.location, kind, message))
            return
        seq = entry.record.seq if isinstance(entry, LogEntry) else None
        self._violations.append(
            Violation(entry.location, kind, message, entry.record.session_id, seq)
        )


def _header_spec(record: SpecRecord) -> tuple[ModeSpec | None, str | None]:
    """The spec a header holds, or why it holds none that its name and hash describe.

    Returns ``(spec, None)``, or ``(None, why)``. A header holds its prompts inline: the
    definition is validated as it stands, and no file it names (``prompt_file``) is read.
    """
    try:
        spec = ModeSpec(**(record.definition or {}))
    except SpecError as exc:
        return None, f"the header's definition of spec {record.spec!r} is not a valid spec: {exc}"
    if spec.content_hash != record.spec_hash or spec.name != record.spec:
        return None, (
            f"the header names spec {record.spec!r} {record.spec_hash}, but its definition is "
            f"spec {spec.name!r} {spec.content_hash}: it was changed after it was written; "
            "the records written with it are not checked against it"
        )
    return spec, None


_ABSENT = object()
_DECIDED = f'"{EVENT_DECIDED}"'.encode()
"""What a decision line holds: take leaves such a line to feed."""
_Rules = tuple[ModeSpec, TransitionTable]
"""A spec and its transition table."""
_CHECKS = record_checks()


def _fields(raw: bytes, *, digests: bool) -> tuple[Any, ...] | None:
    """The fields :meth:`Replayer.take` needs of a line that has keys besides the model's.

    Returns ``None`` unless the line is a JSON object whose every model field holds a value
    the model keeps as it is (see :func:`~modefsm.log.record_checks`); else ``(event,
    session_id, seq, from_mode, to_mode, origin, spec, spec_hash, prev, digest,
    canonical)``, *canonical* being the bytes the digest covers (with *digests*).
    """
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(data) is not dict:
        return None
    get = data.get
    for check in _CHECKS.values():
        value = get(check.name, _ABSENT)
        if value is _ABSENT:
            if check.required:
                return None
        elif not check.accepts(value):
            return None
    canonical = canonical_record(data) if digests else None
    return (*(data[key] for key in _TAKEN), get("prev"), get("digest"), canonical)


_TAKEN = ("event", "session_id", "seq", "from_mode", "to_mode", "origin", "spec", "spec_hash")
"""The required fields :func:`_fields` gives, in order."""


class _Edges(dict[tuple[str, str, str], bool]):
    """Whether ``(origin, source, dest)`` is a client or restore transition, for take.

    Indexing asks the spec's table once per key and remembers the answer (a plain dictionary
    look-up after that); at most :data:`_EDGES_MAX` answers are kept.
    """

    def __init__(self, table: TransitionTable) -> None:
        super().__init__()
        self._table = table

    def __missing__(self, key: tuple[str, str, str]) -> bool:
        origin, source, dest = key
        kind = self._table.kind_of(origin)
        # a switch has no edge here: feed checks its option
        allowed = (
            kind is not None and kind != "switch_mode" and self._table.allows(kind, source, dest)
        )
        if len(self) >= _EDGES_MAX:
            self.clear()
        self[key] = allowed
        return allowed


_EDGES_MAX = 65_536


def _listed(mode_ids: Sequence[str], most: int = 20) -> str:
    """*mode_ids* joined with commas; past *most*, only how many more there are.

    >>> _listed(["a", "b", "c"], most=2)
    'a, b, ... (1 more)'
    """
    text = ", ".join(mode_ids[:most])
    return text + f", ... ({len(mode_ids) - most} more)" if len(mode_ids) > most else text


def _legality(  # noqa: C901
    record: TransitionRecord, track: _Track, spec: ModeSpec, table: TransitionTable
) -> Iterator[tuple[ViolationKind, str]]:
    source, dest, origin = record.from_mode or "", record.to_mode or "", record.origin
    name = spec.name
    modes = _listed(spec.mode_ids)
    if not spec.has_mode(dest):
        yield "illegal", f"to_mode {dest!r} is not a mode of spec {name!r} ({modes})"
        return
    if origin == "restore":
        if not spec.has_mode(source):
            if dest != spec.initial:
                message = (
                    f"a restore from {source!r}, a mode spec {name!r} does not have, goes to "
                    f"its initial mode {spec.initial!r}, not {dest!r}"
                )
                yield "illegal", message
        elif not table.allows("restore", source, dest):
            target = spec.restore_target(source)
            goes = (
                "stays there (the mode is restorable)"
                if target == source
                else f"goes to {target!r}"
            )
            yield "illegal", f"a restore from {source!r} {goes}, not to {dest!r} (spec {name!r})"
        return
    if not spec.has_mode(source):
        yield "illegal", f"from_mode {source!r} is not a mode of spec {name!r} ({modes})"
        return
    if origin == "new":
        yield "illegal", "origin 'new' on a mode_changed record (only a creation has it)"
    elif table.kind_of(origin) == "client_change":
        if not table.allows("client_change", source, dest):
            allowed = _listed(table.targets("client_change", source)) or "none"
            message = (
                f"{origin} may not change the mode from {source!r} to {dest!r} under spec "
                f"{name!r} (allowed from {source!r}: {allowed})"
            )
            yield "illegal", message
    else:
        if not table.allows("switch_mode", source, dest):
            allowed = _listed(table.targets("switch_mode", source)) or "none"
            message = (
                f"an approved switch_mode may not move from {source!r} to {dest!r} under "
                f"spec {name!r} (allowed from {source!r}: {allowed})"
            )
            yield "illegal", message
        yield from _switch_problems(record, track, spec)


def _switch_problems(
    record: TransitionRecord, track: _Track, spec: ModeSpec
) -> Iterator[tuple[ViolationKind, str]]:
    if record.tool_call_id is None:
        yield "switch", "an approved switch_mode without a tool_call_id"
    option_id = record.option_id
    if option_id is None:
        yield "switch", "an approved switch_mode without an option_id"
        return
    proposer = record.proposed_in or record.from_mode or ""
    switch = spec.switch_from(proposer)
    if switch is None:
        yield "switch", f"spec {spec.name!r} offers no switch in mode {proposer!r}"
        return
    option = next((o for o in switch.options if o.option_id == option_id), None)
    if option is None:
        offered = ", ".join(o.option_id for o in switch.options)
        yield (
            "switch",
            f"option {option_id!r} was not offered in mode {proposer!r} (offered: {offered})",
        )
        return
    if not option.allows:
        yield "switch", f"option {option_id!r} is a {option.kind} option: it approves nothing"
    elif option.target == PREVIOUS:
        # A stale approval (proposed_in recorded) applies the target shown when the request
        # was built, before the changes that made it stale: only the policy edge is checked.
        if (
            record.proposed_in is None
            and track.previous is not None
            and record.to_mode != track.previous
        ):
            message = (
                f"option {option_id!r} returns to the previous mode {track.previous!r}, "
                f"not {record.to_mode!r}"
            )
            yield "switch", message
    elif option.target != record.to_mode:
        yield "switch", f"option {option_id!r} moves to {option.target!r}, not {record.to_mode!r}"


def replay(
    paths: Iterable[str | Path],
    specs: Iterable[ModeSpec] | None = None,
    *,
    verify: bool = False,
    session_id: str | None = None,
    keep_timeline: bool = True,
    on_entry: Callable[[LogEntry], None] | None = None,
    progress: Callable[[int], None] | None = None,
    stdin: BinaryIO | None = None,
) -> ReplayReport:
    """Replay the logs *paths* (oldest first) and check every session's history.

    Args:
        paths: JSON-lines logs, gzip files, or ``-`` for standard input, in order.
        specs: the specs the records may have been written with; ``None``: those the
            logs' headers hold and the shipped presets (see :class:`Replayer`).
        verify: also verify the digest chain.
        session_id: replay only this session.
        keep_timeline: keep each session's records in :attr:`SessionHistory.changes`
            (set ``False`` for large logs when only final modes and violations matter).
        on_entry: called with each record of the replayed session(s), in log order (the
            CLI prints the timeline from it while reading).
        progress: called now and then with the number of bytes read so far.
        stdin: what ``-`` reads (default: ``sys.stdin.buffer``).

    Several files of PostgreSQL workers (each committed record with a ``gseq``), or a
    database export, are read as one history: merged by ``gseq`` (their order in *paths*
    does not matter), each file's chain followed on its own and each session's by
    ``session_prev`` (see :class:`Replayer`'s ``merged``). A file with no committed
    record (empty, or only rejections) joins such a set.

    Returns:
        The :class:`ReplayReport`; nothing is raised for bad input, it is all reported.
    """
    files = [str(path) for path in paths]
    kinds = [file_kind(path, workers=len(files) > 1) for path in files]
    if merged_kinds(kinds):
        exports = [path for path, kind in zip(files, kinds, strict=True) if kind == "export"]
        merged = Replayer(
            specs,
            verify=verify,
            session_id=session_id,
            keep_timeline=keep_timeline,
            merged=True,
            exports=exports,
        )
        for item in merge_by_gseq(files, check_digests=verify):
            if merged.feed(item) and on_entry is not None:
                on_entry(item)  # type: ignore[arg-type]  # feed() is True only for entries
        return merged.report()
    replayer = Replayer(specs, verify=verify, session_id=session_id, keep_timeline=keep_timeline)
    # take() cannot apply a record that must reach on_entry or a kept timeline: then it
    # only serves the sessions not replayed, if there are any
    take: Take | None = replayer.take
    if on_entry is not None or keep_timeline:
        take = replayer.take_others if session_id is not None else None
    items = read_log(
        files,
        check_digests=verify,
        progress=progress,
        stdin=stdin,
        take=take,
        decisions=True,
        headers=True,
    )
    for read in items:
        if replayer.feed(read) and on_entry is not None:
            on_entry(read)  # type: ignore[arg-type]  # feed() is True only for entries
    return replayer.report()


@overload
def iter_records(
    paths: Iterable[str | Path], *, decisions: Literal[False] = ...
) -> Iterator[TransitionRecord]: ...
@overload
def iter_records(
    paths: Iterable[str | Path], *, decisions: Literal[True]
) -> Iterator[TransitionRecord | DecisionRecord]: ...
def iter_records(
    paths: Iterable[str | Path], *, decisions: bool = False
) -> Iterator[TransitionRecord | DecisionRecord]:
    """Yield the modefsm records of the JSON-lines files *paths*, in order.

    Lines that cannot be used (torn, not a record) are skipped; :func:`replay` reports them.

    Args:
        paths: the log files, read one after the other.
        decisions: also yield each ``modefsm.tool_decided`` line as a
            :class:`~modefsm.log.DecisionRecord` (else skipped).

    Raises:
        LogError: a file is unusable (missing, unreadable, not text).
    """
    items = read_log(paths, decisions=True) if decisions else read_log(paths)
    for item in items:
        if isinstance(item, LogEntry | DecisionEntry):
            yield item.record
        elif item.fatal:
            msg = item.message.replace("cannot read:", "cannot read the transition log:")
            raise LogError(msg, item.location.path)
