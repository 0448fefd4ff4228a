"""Replay of decision records: no tool ran against its mode.

For each ``modefsm.tool_decided`` record (:class:`~modefsm.log.DecisionRecord`),
:class:`ToolLedger` checks, against the session as the committed records before it left
it (its mode and ``seq``), and against the rules of the spec the session's records were
written with (:meth:`RuleTable.judge <modefsm.spec.RuleTable.judge>`, the engine's own
judge):

- the decision was made in the session's committed mode, against its latest committed
  record (``mode`` and ``mode_seq``);
- the decision and the rule are what the mode's rules give for the call's kind and tool;
- an ``ask`` has an outcome, an ``allow`` or ``deny`` none;
- an ``abandoned`` outcome (an ask a process that ended left open, settled by the next
  process that restored the session) is not judged against the rules (the call's tool is
  not known then: ``rule`` and ``tool`` are ``None``), and settles an ask once: a second
  one for the same ``toolCallId`` with no other decision of that call between is refused,
  and so is one that follows an ``allow`` or a ``deny`` of that call with no ask between
  (that call was decided, not asked);
- a ``granted`` outcome has a matching ``allow_always`` before it
  (:class:`~modefsm.spec.GrantMemory`, scoped as the spec says; a grant that does not
  persist is accepted after a restart too, since the log does not show restarts). When a
  session's records go on under another spec (a restart with a changed spec), its
  ``allow_always`` answers so far are remembered again as that spec scopes them, for the
  modes it has, as the engine rebuilds them.

Each failure is a ``tool_policy`` violation naming both sides. The ledger also counts,
per session, mode and kind, the decisions (``allow``, ``ask``, ``deny``): the summary's
"which tools ran in which mode".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from modefsm.spec import MAX_GRANTS, GrantMemory

if TYPE_CHECKING:
    from modefsm.log import DecisionRecord
    from modefsm.spec import ModeSpec

__all__ = ["ToolLedger", "ToolTally"]


@dataclass(frozen=True, slots=True)
class ToolTally:
    """How many tool calls of one kind a session's mode decided, by decision.

    Attributes:
        mode: the mode they were decided in.
        kind: ACP ``ToolKind``.
        allow: calls the rules allowed.
        ask: calls the rules asked about (whatever the answer).
        deny: calls the rules refused.
        ran: calls that ran (allowed, or asked and approved or granted).
    """

    mode: str
    kind: str
    allow: int
    ask: int
    deny: int
    ran: int


_DECISION_INDEX = {"allow": 0, "ask": 1, "deny": 2}


class ToolLedger:
    """The decision records of every session, checked and counted."""

    def __init__(self) -> None:
        """Start with no session."""
        self._grants: dict[str, tuple[str, GrantMemory]] = {}  # by session: spec_hash, grants
        # by session: the (mode, kind, tool) of its allow_always answers, in order
        self._given: dict[str, dict[tuple[str, str, str | None], None]] = {}
        self._counts: dict[str, dict[tuple[str, str], list[int]]] = {}
        # by session: each toolCallId's last decision record: abandoned, decided (an
        # allow or a deny), or asked (an ask answered)
        self._last: dict[str, dict[str, str]] = {}

    def check(
        self,
        record: DecisionRecord,
        committed: tuple[str | None, int, str] | None,
        spec: ModeSpec | None,
    ) -> list[str]:
        """Check and count one decision; return what is wrong with it (for ``tool_policy``).

        Args:
            record: the decision.
            committed: the session's ``(mode, seq, spec_hash)`` after its last committed
                record before this one; ``None`` when no record of the session came before.
            spec: the spec matching the record's ``spec_hash``, if given.
        """
        counts = self._counts.setdefault(record.session_id, {})
        tally = counts.setdefault((record.mode, record.kind), [0, 0, 0, 0])
        tally[_DECISION_INDEX[record.decision]] += 1
        tally[3] += record.ran
        problems = []
        what = f"a {record.kind} call" + ("" if record.tool is None else f" of {record.tool!r}")
        if committed is None or committed[0] is None:
            problems.append(f"{what} decided in a session with no committed record before it")
        else:
            mode, seq, spec_hash = committed
            if record.mode != mode or record.mode_seq != seq:
                problems.append(
                    f"{what} decided in mode {record.mode!r} (seq {record.mode_seq}), but the "
                    f"session's committed mode was {mode!r} (seq {seq})"
                )
            if record.spec_hash != spec_hash:
                problems.append(
                    f"{what} decided under spec {record.spec_hash}, but the session's records "
                    f"have {spec_hash}"
                )
        if record.decision == "ask" and record.outcome is None:
            problems.append(f"{what} asked about without its outcome")
        elif record.decision != "ask" and record.outcome is not None:
            problems.append(
                f"{what} with decision {record.decision!r} and outcome {record.outcome!r}: "
                "only an ask has an outcome"
            )
        problems.extend(self._abandonment(record, what))
        if spec is not None:
            problems.extend(self._against_rules(record, spec, what))
        return problems

    def _abandonment(self, record: DecisionRecord, what: str) -> list[str]:
        """What is wrong with an ``abandoned`` record; note each call's last decision."""
        last = self._last.setdefault(record.session_id, {})
        call = record.tool_call_id
        before = last.get(call)
        if record.outcome != "abandoned":
            last[call] = "decided" if record.decision != "ask" else "asked"
            return []
        last[call] = "abandoned"
        if before == "abandoned":
            return [f"{what} ({call!r}) abandoned twice: its ask was settled already"]
        if before == "decided":
            return [f"{what} ({call!r}) abandoned after an allow or a deny: it was not asked"]
        if record.rule is not None or record.tool is not None:
            return [f"{what} abandoned with a rule or a tool: an abandoned ask is not judged"]
        return []

    def _against_rules(self, record: DecisionRecord, spec: ModeSpec, what: str) -> list[str]:
        if not spec.has_mode(record.mode):
            return [f"{what} decided in mode {record.mode!r}, not a mode of spec {spec.name!r}"]
        if record.outcome == "abandoned":  # not judged: the call's tool is not known
            return []
        problems = []
        verdict = spec.rules.judge(record.mode, record.kind, record.tool)
        if (verdict.decision, verdict.rule_index) != (record.decision, record.rule):
            problems.append(
                f"{what} in mode {record.mode!r}: the rules give {verdict.decision} "
                f"({_rule(verdict.rule_index)}), the record says {record.decision} "
                f"({_rule(record.rule)})"
            )
        grants = self._memory(record.session_id, spec)
        if record.outcome == "granted" and not grants.covers(record.mode, record.kind, record.tool):
            problems.append(
                f"{what} ran as granted in mode {record.mode!r}, but no allow_always given "
                "before it covers it there"
            )
        elif record.decision == "ask" and record.outcome == "allow_always":
            given = self._given.setdefault(record.session_id, {})
            if len(given) < MAX_GRANTS:
                given[record.mode, record.kind, record.tool] = None
            grants.remember(record.mode, record.kind, record.tool)
        return problems

    def _memory(self, session_id: str, spec: ModeSpec) -> GrantMemory:
        """The session's grants under *spec*: rebuilt when its records change spec."""
        held = self._grants.get(session_id)
        if held is not None and held[0] == spec.content_hash:
            return held[1]
        grants = GrantMemory(spec)
        for mode, kind, tool in self._given.get(session_id, {}):
            if spec.has_mode(mode):
                grants.remember(mode, kind, tool)
        self._grants[session_id] = (spec.content_hash, grants)
        return grants

    def tallies(self, session_id: str) -> tuple[ToolTally, ...]:
        """The counts of *session_id*'s decisions, by mode and kind in order of first use."""
        counts = self._counts.get(session_id, {})
        return tuple(ToolTally(mode, kind, *n) for (mode, kind), n in counts.items())


def _rule(index: int | None) -> str:
    return "tools_default" if index is None else f"rule {index}"
