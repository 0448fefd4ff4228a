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
    from modefsm.log._reader import LogEntry
    from modefsm.replay._replayer import ReplayReport

__all__ = ["JsonReport", "TableReport", "verdict"]

_HEADER = ("TIME", "SESSION", "SEQ", "CHANGE", "ORIGIN", "TOOL CALL / OPTION")
_WIDTHS = (27, 12, 4, 26, 18)


def verdict(report: ReplayReport) -> str:
    """``clean``, ``N violation(s)``, or ``unusable input``: the last line of a report."""
    if report.errors:
        return "unusable input"
    count = len(report.violations)
    if count:
        return f"{count} violation" + ("" if count == 1 else "s")
    return "clean"


class TableReport:
    """The timeline as an aligned table, then the summary sections.

    Args:
        out: where to write (text).
    """

    def __init__(self, out: TextIO) -> None:
        """Write to *out*."""
        self.out = out
        self._rows = 0

    def entry(self, entry: LogEntry) -> None:
        """Write the timeline row of one record."""
        if self._rows == 0:
            self._row(*_HEADER)
        self._rows += 1
        r = entry.record
        change = f"{r.from_mode or ''} -> {r.to_mode or '?'}".lstrip()
        origin = r.origin if r.reason is None else f"{r.origin} rejected: {r.reason}"
        tool = ""
        if r.tool_call_id is not None or r.option_id is not None:
            tool = f"{r.tool_call_id or '-'} / {r.option_id or '-'}"
        if r.proposed_in is not None:
            tool += f" (proposed in {r.proposed_in})"
        seq = "-" if r.seq is None else str(r.seq)
        self._row(r.timestamp, r.session_id, seq, change, origin, tool)

    def _row(self, *cells: str) -> None:
        time, session, seq, change, origin, tool = cells
        w = _WIDTHS
        line = (
            f"{time:<{w[0]}}  {session:<{w[1]}}  {seq:>{w[2]}}  {change:<{w[3]}}  "
            f"{origin:<{w[4]}}  {tool}"
        )
        self.out.write(line.rstrip() + "\n")

    def finish(self, report: ReplayReport) -> None:
        """Write the summary: sessions, violations, notes, chain, verdict."""
        write = self.out.write
        if self._rows:
            write("\n")
        write(f"SESSIONS ({len(report.sessions)})\n")
        for s in report.sessions:
            rejected = f", {s.rejections} rejected" if s.rejections else ""
            write(
                f"  {s.session_id}  {s.mode or '?'}  (seq {s.seq}, spec {s.spec}, "
                f"{s.records} records{rejected})\n"
            )
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
            counts = f"CHAIN  {c.verified} records verified, {c.unverifiable} without a digest"
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
        item = {"location": str(entry.location), **entry.record.model_dump(exclude={"level"})}
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


def _note(note: Any) -> dict[str, str]:
    return {"location": str(note.location), "kind": note.kind, "message": note.message}


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()
