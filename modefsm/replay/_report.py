"""A replay for people (a timeline table) and for tools (JSON), written while the log is read.

Both writers take the records one by one (:meth:`TableReport.entry`), so the timeline
of a log of any size is printed without holding it, then the summary
(:meth:`TableReport.finish`): each session's final mode, the violations, the notes, the
digest chain and the verdict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TextIO

import orjson

if TYPE_CHECKING:
    from modefsm.log import LogEntry
    from modefsm.replay._replayer import ReplayReport
    from modefsm.replay._tools import ToolTally

__all__ = ["HELD_ROWS", "JsonReport", "TableReport", "verdict"]

_HEADER = ("TIME", "SESSION", "SEQ", "CHANGE", "ORIGIN", "TOOL CALL / OPTION")
HELD_ROWS = 10_000
"""Timeline rows a :class:`TableReport` holds to fit its columns to the longest value; past
them the widths are fixed, and a longer value in a later row pushes the rest of its row
right."""


_SPEC_MISMATCH = 3
"""The :attr:`~modefsm.replay.ReplayReport.exit_status` of a spec mismatch."""


def verdict(report: ReplayReport) -> str:
    """The last line of a report: what :attr:`~ReplayReport.exit_status` says, in words.

    ``unusable input`` (2), ``N violation(s)`` (1), ``spec mismatch`` (3: the only
    violations are records whose spec was not given, or headers naming another spec than
    the one given) or ``clean`` (0).
    """
    if report.errors:
        return "unusable input"
    count = len(report.violations)
    if report.exit_status == _SPEC_MISMATCH:
        hints = sorted({_spec_hint(v.kind) for v in report.violations})
        return "spec mismatch: " + "; ".join(hints)
    if count:
        return f"{count} violation" + ("" if count == 1 else "s")
    return "clean"


_HOST_KEYS = ("config_id", "value", "config")
"""Record keys a JSON timeline item has only where they are set."""


def _count(number: int, noun: str) -> str:
    """*number* and *noun*, plural unless *number* is 1 (``1 record``, ``5 records``)."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _shown(value: object) -> str:
    """A host option's value as the report shows it (``true`` for a boolean)."""
    return orjson.dumps(value).decode() if isinstance(value, bool) else str(value)


def _spec_hint(kind: str) -> str:
    if kind == "spec_changed":
        return "the spec given changed since the records were written"
    if kind == "spec_mismatch":
        return "the log's header names another spec than the one given"
    return "records written with a spec not given"


class TableReport:
    """The timeline as an aligned table, then the summary sections.

    The columns fit their longest value among the first :data:`HELD_ROWS` rows, which are
    held until then (or until :meth:`finish`); later rows are written as they come.

    Args:
        out: where to write (text).
    """

    def __init__(self, out: TextIO) -> None:
        """Write to *out*."""
        self.out = out
        self._held: list[tuple[str, ...]] | None = []
        self._widths = [len(name) for name in _HEADER[:-1]]

    def entry(self, entry: LogEntry) -> None:
        """Write (or hold) the timeline row of one record."""
        r = entry.record
        change = f"{r.from_mode or ''} -> {r.to_mode or '?'}".lstrip()
        if r.config_id is not None:  # a host config option set (or refused): not a move
            change = f"{r.config_id} = {_shown(r.value)}"
        origin = r.origin if r.reason is None else f"{r.origin} rejected: {r.reason}"
        tool = ""
        if r.tool_call_id is not None or r.option_id is not None:
            tool = f"{r.tool_call_id or '-'} / {r.option_id or '-'}"
        if r.proposed_in is not None:
            tool += f" (proposed in {r.proposed_in})"
        seq = "-" if r.seq is None else str(r.seq)
        cells = (r.timestamp, r.session_id, seq, change, origin, tool)
        if self._held is None:
            self._row(cells)
            return
        self._held.append(cells)
        self._widths = [max(w, len(c)) for w, c in zip(self._widths, cells, strict=False)]
        if len(self._held) >= HELD_ROWS:
            self._release()

    def _release(self) -> None:
        held, self._held = self._held, None
        if held:
            self._row(_HEADER)
            for cells in held:
                self._row(cells)

    def _row(self, cells: tuple[str, ...]) -> None:
        time, session, seq, change, origin, tool = cells
        w = self._widths
        line = (
            f"{time:<{w[0]}}  {session:<{w[1]}}  {seq:>{w[2]}}  {change:<{w[3]}}  "
            f"{origin:<{w[4]}}  {tool}"
        )
        self.out.write(line.rstrip() + "\n")

    def _tools(self, tallies: tuple[ToolTally, ...]) -> None:
        """Write a session's tool call decisions, one line per mode and kind."""
        for t in tallies:
            self.out.write(
                f"    {t.kind} in {t.mode}: {t.allow} allowed, {t.ask} asked, "
                f"{t.deny} denied; {t.ran} ran\n"
            )

    def finish(self, report: ReplayReport) -> None:
        """Write the summary: sessions, violations, notes, chain, verdict."""
        write = self.out.write
        rows = self._held is None or bool(self._held)
        self._release()
        if rows:
            write("\n")
        write(f"SESSIONS ({len(report.sessions)})\n")
        ids = max((len(s.session_id) for s in report.sessions), default=0)
        modes = max((len(s.mode or "?") for s in report.sessions), default=0)
        for s in report.sessions:
            rejected = f", {s.rejections} rejected" if s.rejections else ""
            config = "".join(f", {k} = {_shown(v)}" for k, v in s.config.items())
            write(
                f"  {s.session_id:<{ids}}  {s.mode or '?':<{modes}}  (seq {s.seq}, "
                f"spec {s.spec}, {_count(s.records, 'record')}{rejected}{config})\n"
            )
            self._tools(s.tools)
        if report.violations:
            write(f"VIOLATIONS ({len(report.violations)})\n")
            for v in report.violations:
                write(f"  {v}\n")
        if report.notes:
            write(f"NOTES ({len(report.notes)})\n")
            for n in report.notes:
                write(f"  {n}\n")
        if report.chain is not None:
            c = report.chain
            counts = (
                f"CHAIN  {_count(c.verified, 'record')} verified, {c.unverifiable} without a digest"
            )
            if not c.heads:
                write(f"{counts}; head {c.head or '-'}\n")
            else:  # several workers' files, merged by gseq
                write(f"{counts}; {len(c.heads)} files merged by gseq\n")
                for path, head in c.heads:
                    write(f"  {path}  head {head or '- (an export: chained by session)'}\n")
        write(f"RESULT  {verdict(report)}\n")


class JsonReport:
    """One JSON document: ``timeline`` (records in log order), then the summary keys.

    The document is ``{"timeline": [...], "sessions": [...], "violations": [...],
    "notes": [...], "errors": [...], "chain": {...} | null, "records": N,
    "result": "clean", "exit_status": 0}``; each timeline item is a record with its
    ``location`` (``path:line``); the timeline is empty when no record was written to it
    (``modefsm replay --summary``).

    Args:
        out: where to write (text).
    """

    def __init__(self, out: TextIO) -> None:
        """Write to *out*; the document starts at once."""
        self.out = out
        self._rows = 0
        out.write('{"timeline":[')

    def entry(self, entry: LogEntry) -> None:
        """Write the timeline item of one record."""
        record = entry.record.model_dump(exclude={"level"})
        for key in _HOST_KEYS:  # only on the records of host config options
            if record[key] is None:
                del record[key]
        item = {"location": str(entry.location), **record}
        self.out.write(("\n" if self._rows == 0 else ",\n") + _dumps(item))
        self._rows += 1

    def finish(self, report: ReplayReport) -> None:
        """Close the timeline and write the summary keys."""
        summary = {
            "sessions": [
                {
                    "session_id": s.session_id,
                    "mode": s.mode,
                    "seq": s.seq,
                    "spec": s.spec,
                    "spec_hash": s.spec_hash,
                    "records": s.records,
                    "rejections": s.rejections,
                    "first": str(s.first),
                    "last": str(s.last),
                    **({"tools": [_tally(t) for t in s.tools]} if s.tools else {}),
                    **({"config": s.config} if s.config else {}),
                }
                for s in report.sessions
            ],
            "violations": [
                {
                    "location": str(v.location),
                    "kind": v.kind,
                    "session_id": v.session_id,
                    "seq": v.seq,
                    "message": v.message,
                }
                for v in report.violations
            ],
            "notes": [_note(n) for n in report.notes],
            "errors": [_note(n) for n in report.errors],
            "chain": None
            if report.chain is None
            else {
                "verified": report.chain.verified,
                "unverifiable": report.chain.unverifiable,
                "head": report.chain.head,
                **({"heads": dict(report.chain.heads)} if report.chain.heads else {}),
            },
            "records": report.records,
            "result": verdict(report),
            "exit_status": report.exit_status,
        }
        rest = orjson.dumps(summary, option=orjson.OPT_INDENT_2)
        self.out.write("\n]," + rest[1:].decode() + "\n")


def _tally(tally: ToolTally) -> dict[str, Any]:
    return {
        "mode": tally.mode,
        "kind": tally.kind,
        "allow": tally.allow,
        "ask": tally.ask,
        "deny": tally.deny,
        "ran": tally.ran,
    }


def _note(note: Any) -> dict[str, str]:
    return {"location": str(note.location), "kind": note.kind, "message": note.message}


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()
