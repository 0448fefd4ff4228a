"""What each mode allows: tool rules, compiled once per spec, and the verdict for a tool call.

A mode's ``tools`` is an ordered list of :class:`ToolRule`; the first rule that matches a
tool call decides it (``allow``, ``ask`` or ``deny``), and the mode's ``tools_default``
decides a call no rule matches. A rule matches by ACP ``ToolKind`` (``kind``, a list), by
the host's tool name (``name``, an :mod:`fnmatch` pattern, case-sensitive), or by both.

:class:`RuleTable` is the compiled form (:attr:`ModeSpec.rules
<modefsm.spec.ModeSpec.rules>`): for every mode, a dict from kind to verdict for the
kinds that no name pattern can decide first, and the ordered scan for the others.
:meth:`RuleTable.judge` is the one answer to "what does this mode say of this tool call";
the engine and replay both ask it.

Example:
    >>> from modefsm.spec import preset
    >>> rules = preset("permission").rules
    >>> rules.judge("plan", "edit", "Edit")
    Verdict(decision='deny', rule_index=0, reason='Plan mode: no edits and no commands')
    >>> rules.judge("default", "read", "Read").decision, rules.judge("default", None).decision
    ('allow', 'ask')

This module imports nothing of modefsm.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from modefsm.spec._model import ModeSpec

__all__ = [
    "DECISIONS",
    "TOOL_KINDS",
    "Decision",
    "RuleTable",
    "ToolKind",
    "ToolRule",
    "Verdict",
]

ToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other",
]  # fmt: skip
"""ACP ``ToolKind``: the category of a tool call (``ToolCall.kind``; absent means ``other``)."""

TOOL_KINDS: tuple[ToolKind, ...] = get_args(ToolKind)
"""Every :data:`ToolKind`, in ACP's order."""

Decision = Literal["allow", "ask", "deny"]
"""What a mode says of a tool call: run it, ask the user first, or refuse it."""

_KINDS = frozenset(TOOL_KINDS)

DECISIONS: tuple[Decision, ...] = get_args(Decision)
"""Every :data:`Decision`."""

MAX_PATTERN = 256
"""The longest tool-name pattern, in characters."""
MAX_REASON = 1024
"""The longest ``reason`` of a rule, in characters."""
NAMED_MAX = 4096
"""The most answers :meth:`RuleTable.judge` keeps for calls a name pattern may decide."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ToolRule(BaseModel):
    """One rule of a mode's ``tools`` list.

    Attributes:
        kind: the ACP ``ToolKind`` values the rule matches; ``None``: any kind.
        name: an :mod:`fnmatch` pattern (``*``, ``?``, ``[seq]``; case-sensitive) over the
            host's tool name; ``None``: any name. A rule with a pattern never matches a
            tool call without a name.
        decision: what the rule says.
        reason: why, for the user (the text of a refusal).
    """

    model_config = _FROZEN

    kind: tuple[ToolKind, ...] | None = None
    name: Annotated[str, Field(min_length=1, max_length=MAX_PATTERN)] | None = None
    decision: Decision
    reason: Annotated[str, Field(max_length=MAX_REASON)] | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a mode's rules say of one tool call.

    Attributes:
        decision: ``allow``, ``ask`` or ``deny``.
        rule_index: the index of the rule that matched in the mode's ``tools``; ``None``
            when none did and ``tools_default`` decided.
        reason: the matching rule's ``reason`` (``None`` for the default, or a rule
            without one).
    """

    decision: Decision
    rule_index: int | None
    reason: str | None


_Matcher = tuple[frozenset[str] | None, Callable[[str], object] | None, Verdict]
"""A compiled rule: its kinds (``None``: any), its name test (``None``: any), its verdict."""


class _Kinds(dict[str | None, "Verdict | None"]):
    """One mode's kind table: a kind's verdict, or ``None`` where a name may decide."""

    __slots__ = ()

    def __missing__(self, kind: str | None) -> None:
        return None  # not a ToolKind: the scan says so


class _Modes(dict[str, _Kinds]):
    """The kind table of each mode."""

    __slots__ = ()

    def __missing__(self, mode_id: str) -> _Kinds:
        msg = f"mode {mode_id!r} is not a mode of the spec"
        raise ValueError(msg)


class RuleTable:
    """The compiled ``tools`` rules of every mode of a spec (built once, then read only).

    Args:
        spec: the spec (a table is usually reached as ``spec.rules``).
    """

    __slots__ = ("_defaults", "_fast", "_named", "_scans")

    def __init__(self, spec: ModeSpec) -> None:
        """Compile every mode's rules: patterns once, and the kind table."""
        self._fast = _Modes()
        self._scans: dict[str, tuple[_Matcher, ...]] = {}
        self._defaults: dict[str, Verdict] = {}
        self._named: dict[tuple[str, str | None, str | None], Verdict] = {}
        for mode in spec.modes:
            default = Verdict(mode.tools_default, None, None)
            matchers = tuple(_compile(i, rule) for i, rule in enumerate(mode.tools))
            fast = _Kinds({kind: _kind_only(kind, matchers, default) for kind in TOOL_KINDS})
            fast[None] = fast["other"]  # ACP: a tool call without a kind is "other"
            self._fast[mode.id] = fast
            self._scans[mode.id] = matchers
            self._defaults[mode.id] = default

    def judge(self, mode_id: str, kind: str | None, name: str | None = None) -> Verdict:
        """What mode *mode_id* says of a tool call of *kind* named *name*.

        Constant time: a kind no name pattern precedes in the mode's rules is looked up;
        otherwise the rules are scanned in order (:meth:`scan`) and the first match
        decides, and the answer is kept for the next call with the same mode, kind and
        name (at most :data:`NAMED_MAX` answers are kept).

        Args:
            mode_id: an advertised mode id.
            kind: ACP ``ToolCall.kind``; ``None`` counts as ``other``.
            name: the host's name for the tool, matched against the rules' patterns.

        Raises:
            ValueError: *mode_id* is not a mode of the spec, or *kind* is not a
                :data:`ToolKind`.
        """
        verdict = self._fast[mode_id][kind]
        if verdict is not None:
            return verdict
        key = (mode_id, kind, name)
        verdict = self._named.get(key)
        if verdict is None:
            verdict = self.scan(mode_id, kind, name)
            if len(self._named) >= NAMED_MAX:
                self._named.clear()
            self._named[key] = verdict
        return verdict

    def scan(self, mode_id: str, kind: str | None, name: str | None = None) -> Verdict:
        """:meth:`judge` by the ordered scan of the rules alone (no kind table).

        Raises:
            ValueError: as :meth:`judge`.
        """
        matchers = self._scans.get(mode_id)
        if matchers is None:
            msg = f"mode {mode_id!r} is not a mode of the spec"
            raise ValueError(msg)
        if kind is None:
            kind = "other"
        elif kind not in _KINDS:
            msg = f"tool kind {kind!r} is not an ACP ToolKind ({', '.join(TOOL_KINDS)})"
            raise ValueError(msg)
        for kinds, test, verdict in matchers:
            if kinds is not None and kind not in kinds:
                continue
            if test is not None and (name is None or not test(name)):
                continue
            return verdict
        return self._defaults[mode_id]

    def decisions(self, mode_id: str) -> dict[ToolKind, Decision | None]:
        """Each kind's decision in *mode_id* when it does not depend on the tool's name.

        ``None`` for a kind a name pattern may decide. For views and diagrams.

        Raises:
            ValueError: *mode_id* is not a mode of the spec.
        """
        fast = self._fast[mode_id]
        return {k: (v.decision if (v := fast[k]) is not None else None) for k in TOOL_KINDS}


def _compile(index: int, rule: ToolRule) -> _Matcher:
    kinds = frozenset(rule.kind) if rule.kind is not None else None
    test = re.compile(fnmatch.translate(rule.name)).match if rule.name is not None else None
    return kinds, test, Verdict(rule.decision, index, rule.reason)


def _kind_only(kind: str, matchers: Iterable[_Matcher], default: Verdict) -> Verdict | None:
    """The verdict for *kind* whatever the name, or ``None`` if a name pattern may decide."""
    for kinds, test, verdict in matchers:
        if kinds is not None and kind not in kinds:
            continue
        if test is not None:
            return None
        return verdict
    return default
