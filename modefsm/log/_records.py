"""The record format: what one line of a transition log holds, and the digest chain.

The same :class:`TransitionRecord` model describes what the writer
(:class:`~modefsm.log.TransitionLog`) writes and what :mod:`modefsm.replay` parses. Three
events exist:

``modefsm.session_created``
    a session began (``seq`` 1, ``origin`` ``new``, ``from_mode`` null).
``modefsm.mode_changed``
    a committed change (``seq`` 2, 3, ... without gaps, per session).
``modefsm.change_rejected``
    an attempt that changed nothing (``seq`` null, ``reason`` says why).
``modefsm.config_changed``
    a committed change of a host's config option (``config_id`` set to ``value``): the
    mode stays (``from_mode`` and ``to_mode`` are both the session's mode) and ``seq``
    counts it like a mode change.

Every committed record of a session whose host options were set carries ``config``: the
session's host option values after it (``{"model": "smart"}``), so that its last record
alone says where the session stands.

A fourth, :data:`EVENT_DECIDED` (``modefsm.tool_decided``), is a tool call decided by its
session's mode (:class:`DecisionRecord`); it is chained like the others.

A line is one JSON object (at most :data:`MAX_LINE` bytes before its newline): the
record's fields, then ``event``, then ``level``::

    {"session_id":"sess_1","seq":2,"from_mode":"ask","to_mode":"architect",
     "origin":"set_mode","request_id":3,"spec":"seed","spec_hash":"sha256:0df565f236717a02",
     "timestamp":"2026-11-30T13:45:01.123456Z","event":"modefsm.mode_changed","level":"info"}

(one line in the file; shown wrapped, without its ``prev`` and ``digest``).

Tamper evidence: every record carries ``prev``, the ``digest`` of the record written
before it on the same log (``null`` for the first record of a fresh log), and ``digest``,
the SHA-256 (64 hex digits) of :func:`canonical_record`, which covers ``prev``. The
records of a log thus form a hash chain: editing, deleting, inserting or reordering a
record breaks it where it happened, and ``modefsm replay --verify`` says where. A log
reopened after a restart or a rotation continues the chain from its last record.

There is no secret key: the chain proves that nothing was changed *by someone who did not
recompute the digests after the change*. A forger who rewrites a record and every record
after it produces a valid chain; cutting records off the end, or deleting a whole file,
leaves none behind. Keep a copy of the chain head (``modefsm replay --verify`` prints it)
somewhere the writer cannot change to detect those.

This module is a leaf of the log package: it imports nothing of modefsm but the spec's
tool kinds and decisions (:mod:`modefsm.spec._rules`).
"""

from __future__ import annotations

import functools
import hashlib
import time
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import orjson
from pydantic import BaseModel, ConfigDict, Field

from modefsm.spec._rules import Decision, ToolKind

__all__ = [
    "CHAINED_EVENTS",
    "EVENT_CHANGED",
    "EVENT_CONFIG",
    "EVENT_CREATED",
    "EVENT_DECIDED",
    "EVENT_REJECTED",
    "EVENT_REPAIRED",
    "MAX_LINE",
    "RECORD_EVENTS",
    "SEQ_MAX",
    "DecisionRecord",
    "FieldCheck",
    "Origin",
    "Outcome",
    "RejectReason",
    "TransitionRecord",
    "canonical_record",
    "previous_of",
    "record_checks",
    "record_digest",
    "title_digest",
    "utc_timestamp",
]

EVENT_CREATED = "modefsm.session_created"
EVENT_CHANGED = "modefsm.mode_changed"
EVENT_REJECTED = "modefsm.change_rejected"
EVENT_CONFIG = "modefsm.config_changed"
"""A host config option set by ``session/set_config_option``: a committed record."""
EVENT_REPAIRED = "modefsm.log_repaired"
"""A diagnostic, not a record: the line before it was torn by a crash (``torn_bytes`` long)."""
SEQ_MAX = (1 << 63) - 1
"""The largest ``seq`` a record may hold (SQLite's largest ``INTEGER``): a line with a larger
one, or one below 1, is not a record (readers report it as ``not_a_record``)."""
RECORD_EVENTS = frozenset({EVENT_CREATED, EVENT_CHANGED, EVENT_CONFIG, EVENT_REJECTED})
"""The events that are :class:`TransitionRecord` lines (other ``modefsm.*`` events, such as
``modefsm.notify_failed``, are diagnostics: not records, not chained)."""
EVENT_DECIDED = "modefsm.tool_decided"
"""A tool call decided by its session's mode: a :class:`DecisionRecord`."""
CHAINED_EVENTS = RECORD_EVENTS | {EVENT_DECIDED}
"""The events whose lines are chained (``prev`` and ``digest``): the records and decisions."""
MAX_LINE = 1 << 20
"""The longest line looked at, in bytes (1 MiB, its newline not counted): readers skip a
longer line as ``too_long``, and a writer reopening a log does not read one to find its
last record."""


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
    "session_closed",
    "no_previous_mode",
    "stale_option",
    "log_failed",
    "invalid_answer",
    "late_answer",
    "duplicate_answer",
]
"""Why a ``modefsm.change_rejected`` record changed nothing.

``stale_option``: an approval given after the mode changed while its permission request
was open, for a target that is not restorable or that the policy forbids from the new mode.
The last three are permission answers that cannot approve anything: ``invalid_answer``
(not a valid ``RequestPermissionResponse``, or a JSON-RPC error other than ``-32800``),
``late_answer`` (an option selected after ``session/cancel`` or ``session/close`` ended
the wait) and ``duplicate_answer`` (a second answer to the same request)."""


class TransitionRecord(BaseModel):
    """One line of the transition log.

    Attributes:
        event: ``modefsm.session_created``, ``modefsm.mode_changed``,
            ``modefsm.config_changed`` or ``modefsm.change_rejected``.
        timestamp: UTC, ISO 8601 with a ``Z`` suffix.
        session_id: ACP ``sessionId``.
        seq: the session's sequence number, 1 for its creation, then +1 per committed
            change; ``None`` on rejections; at most :data:`SEQ_MAX` (a SQLite ``INTEGER``).
        from_mode: the mode before (``None`` on creation).
        to_mode: the mode after (on a rejection: the mode asked for, if any).
        origin: see :data:`Origin`.
        request_id: the JSON-RPC id of the request that caused it, if known (an integer
            id within a 64-bit range: ``-2**63`` to ``2**64 - 1``).
        tool_call_id: ACP ``toolCallId`` of a ``switch_mode`` tool call.
        option_id: ACP ``optionId`` the user selected.
        proposed_in: the mode a switch was proposed in: on an approved switch only when
            the client changed the mode while the permission request was pending; on a
            rejected switch always (when known).
        protocol: the ACP protocol version of the client that made the change (``2``);
            absent on records of v1 clients and of logs written before it existed.
        cwd: on a ``session_created`` record: the ACP ``cwd`` the client gave
            ``session/new`` (what ``session/list`` reports and filters on); absent on
            sessions made without one and in logs written before it existed.
        reason: why a rejection changed nothing.
        config_id: on a ``config_changed`` record: the ACP ``configId`` of the host's
            option set (on a rejection: the one asked for, if known).
        value: on a ``config_changed`` record: the value it was set to (a select
            option's ``value``, or a boolean option's).
        config: on a committed record of a session whose host options were set: their
            values after it, by ``configId`` (options never set are at their defaults);
            absent when none was set.
        spec: the spec's name.
        spec_hash: the spec's :attr:`~modefsm.spec.ModeSpec.content_hash`.
        level: the log level (``info``, ``warning`` for rejections).
        prev: the ``digest`` of the record written before this one on the same log, or
            ``None`` for the first record of a fresh log (and in logs written before
            records were chained).
        session_prev: on committed records written through a
            :class:`~modefsm.store.SessionStore`: the ``digest`` of the session's record
            ``seq - 1`` (``None`` on its creation), so a session's records form a chain of
            their own across files and writers. Absent in older logs (then unchecked).
        digest: :func:`record_digest` of this record: 64 hex digits.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    event: Literal[
        "modefsm.session_created",
        "modefsm.mode_changed",
        "modefsm.config_changed",
        "modefsm.change_rejected",
    ]
    timestamp: str
    session_id: str
    seq: Annotated[int, Field(ge=1, le=SEQ_MAX)] | None
    from_mode: str | None
    to_mode: str | None
    origin: Origin
    request_id: str | Annotated[int, Field(ge=-(1 << 63), lt=1 << 64)] | None = None
    tool_call_id: str | None = None
    option_id: str | None = None
    proposed_in: str | None = None
    protocol: Annotated[int, Field(ge=1, le=2)] | None = None
    cwd: str | None = None
    reason: RejectReason | None = None
    config_id: str | None = None
    value: str | bool | None = None
    config: dict[str, str | bool] | None = None
    spec: str
    spec_hash: str
    level: str = "info"
    prev: str | None = None
    session_prev: str | None = None
    digest: str | None = None


Outcome = Literal[
    "allow_once", "allow_always", "reject_once", "reject_always", "cancelled", "granted",
]  # fmt: skip
"""How an ``ask`` ended: the kind of the permission option the user selected
(``session/request_permission``), ``cancelled`` (the request was cancelled, or withdrawn
when a mode change made it moot), or ``granted`` (a remembered ``allow_always`` applied:
nobody was asked)."""

_RAN = frozenset({"allow_once", "allow_always", "granted"})


class DecisionRecord(BaseModel):
    """One ``modefsm.tool_decided`` line: a tool call decided by its session's mode.

    Compact on purpose: the tool call's title is kept as a digest only (it may hold paths
    or commands), and the rule by its index.

    Attributes:
        event: ``modefsm.tool_decided``.
        timestamp: UTC, ISO 8601 with a ``Z`` suffix.
        session_id: ACP ``sessionId``.
        tool_call_id: ACP ``toolCallId``.
        kind: ACP ``ToolCall.kind`` (``other`` when the call had none).
        tool: the host's name for the tool, as the rules' ``name`` patterns were matched
            against it (``None``: the call had none).
        title_digest: :func:`title_digest` of ACP ``ToolCall.title``.
        rule: the index of the rule that decided in the mode's ``tools``; ``None``: the
            mode's ``tools_default``.
        decision: ``allow``, ``ask`` or ``deny`` (the verdict of the mode's rules).
        outcome: for an ``ask``, how it ended (:data:`Outcome`); ``None`` otherwise.
        mode: the session's committed mode the call was decided in.
        mode_seq: the ``seq`` of the session's committed record that set *mode* (the
            record the decision was made against).
        spec: the spec's name.
        spec_hash: the spec's :attr:`~modefsm.spec.ModeSpec.content_hash`.
        level: the log level (``info``).
        prev: the ``digest`` of the record written before this one on the same log.
        digest: :func:`record_digest` of this record.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    event: Literal["modefsm.tool_decided"]
    timestamp: str
    session_id: str
    tool_call_id: str
    kind: ToolKind
    tool: str | None = None
    title_digest: str | None = None
    rule: Annotated[int, Field(ge=0)] | None = None
    decision: Decision
    outcome: Outcome | None = None
    mode: str
    mode_seq: Annotated[int, Field(ge=1, le=SEQ_MAX)]
    spec: str
    spec_hash: str
    level: str = "info"
    prev: str | None = None
    digest: str | None = None

    @property
    def ran(self) -> bool:
        """Whether the tool ran: allowed, or asked and approved (or granted)."""
        return self.decision == "allow" or (self.decision == "ask" and self.outcome in _RAN)


_DIGEST_KEYS = frozenset(TransitionRecord.model_fields) - {"level", "digest"}
_DECISION_KEYS = frozenset(DecisionRecord.model_fields) - {"level", "digest"}


@dataclass(frozen=True, slots=True)
class FieldCheck:
    """The JSON values of one :class:`TransitionRecord` field that the model keeps as they are.

    For readers that check a parsed line without building the model (replay's fast path):
    a value :meth:`accepts` is one the model takes unchanged; anything else (a value the
    model would convert, such as ``"2"`` for an integer, or reject) must go through it.

    Attributes:
        name: the field (the JSON key).
        types: the exact Python types of the accepted values (``bool`` is not ``int``); a
            ``dict`` field (``config``) accepts no dict here: such a value goes through
            the model.
        low: the smallest accepted integer, if bounded.
        high: the largest accepted integer, if bounded.
        values: the accepted strings, for a ``Literal`` field.
        required: whether a record must have the key.
    """

    name: str
    types: frozenset[type]
    low: int | None = None
    high: int | None = None
    values: frozenset[str] | None = None
    required: bool = True

    def accepts(self, value: object) -> bool:
        """Whether *value* (parsed from JSON) is one the model keeps unchanged.

        Example:
            >>> seq = record_checks()["seq"]
            >>> seq.accepts(2), seq.accepts(0), seq.accepts(True), seq.accepts(None)
            (True, False, False, True)
        """
        kind = type(value)
        if kind not in self.types or kind is dict:
            return False
        if kind is int:
            number: int = value  # type: ignore[assignment]  # checked just above
            return (self.low is None or number >= self.low) and (
                self.high is None or number <= self.high
            )
        return kind is not str or self.values is None or value in self.values


@functools.cache
def record_checks() -> dict[str, FieldCheck]:
    """A :class:`FieldCheck` for every :class:`TransitionRecord` field, derived from the model.

    Raises:
        TypeError: a field's annotation is not one this derivation knows (a change to the
            model that needs a change here).
    """
    return {
        name: _check_of(name, info.annotation, required=info.is_required())
        for name, info in TransitionRecord.model_fields.items()
    }


def _check_of(name: str, annotation: Any, *, required: bool) -> FieldCheck:
    kinds: set[type] = set()
    low = high = None
    values: frozenset[str] | None = None
    arms = get_args(annotation) if get_origin(annotation) in {Union, types.UnionType} else ()
    for arm in arms or (annotation,):
        if arm in {str, int, bool, type(None)}:
            kinds.add(arm)
        elif get_origin(arm) is dict:
            kinds.add(dict)
        elif get_origin(arm) is Literal and all(type(v) is str for v in get_args(arm)):
            kinds.add(str)
            values = frozenset(get_args(arm))
        elif get_origin(arm) is Annotated and get_args(arm)[0] is int:
            kinds.add(int)
            for constraint in (m for f in get_args(arm)[1:] for m in f.metadata):
                low = getattr(constraint, "ge", low)
                high = getattr(constraint, "le", high)
                if getattr(constraint, "lt", None) is not None:
                    high = constraint.lt - 1
        else:
            msg = f"no JSON check for the record field {name!r}: {arm!r}"
            raise TypeError(msg)
    return FieldCheck(name, frozenset(kinds), low, high, values, required)


def canonical_record(data: Mapping[str, Any]) -> bytes:
    """The bytes a record's digest covers: its fields as compact JSON with sorted keys.

    Every :class:`TransitionRecord` field present in *data* counts (every
    :class:`DecisionRecord` field for a ``modefsm.tool_decided`` line), ``prev`` and
    ``event`` included, except ``level`` (derived from the event) and ``digest`` itself.
    Keys a host logger adds (its own context) are not covered.

    Args:
        data: a record as a JSON object (parsed from a line, or about to be written).

    Example:
        >>> canonical_record({"seq": 2, "event": "modefsm.mode_changed", "pid": 7})
        b'{"event":"modefsm.mode_changed","seq":2}'
    """
    keys = _DECISION_KEYS if data.get("event") == EVENT_DECIDED else _DIGEST_KEYS
    if not data.keys() <= keys:
        data = {key: value for key, value in data.items() if key in keys}
    return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)


def record_digest(data: Mapping[str, Any]) -> str:
    """SHA-256 of :func:`canonical_record` of *data*, as 64 lowercase hex digits."""
    return hashlib.sha256(canonical_record(data)).hexdigest()


def title_digest(title: str | None) -> str | None:
    """The digest a decision record keeps of a tool call's title: ``sha256:`` and 16 hex.

    Example:
        >>> title_digest("Edit README.md")
        'sha256:c073dc9d0035f779'
    """
    if title is None:
        return None
    return "sha256:" + hashlib.sha256(title.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def previous_of(
    origin: str, from_mode: str | None, event: str = EVENT_CHANGED
) -> tuple[str | None, bool]:
    """How a committed record moves a session's ``previous`` mode: ``(value, keep)``.

    A client or switch change sets it to the record's ``from_mode``; a creation clears it;
    a restore keeps it (a fallback is not a move the user can return from), and so does a
    ``config_changed`` record (the mode did not move).
    """
    if origin == "restore" or event == EVENT_CONFIG:
        return None, True
    return (None if origin == "new" else from_mode), False


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
