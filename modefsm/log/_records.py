"""The record format: what one line of a transition log holds, and the digest chain.

The same :class:`~modefsm.log.TransitionRecord` model describes what the writer
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
session's mode (:class:`~modefsm.log.DecisionRecord`); it is chained like the others.

A file's first record is its header, :data:`EVENT_SPEC` (``modefsm.spec``,
:class:`~modefsm.log.SpecRecord`): the spec the records after it were written with, by name, content
hash and definition, chained like the others. A writer writes one before its first record
of a spec in each file it starts or continues, unless the file already has one for that
spec's hash, so ``modefsm replay`` needs no spec file to check a log.

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

This module is a leaf: it imports nothing of modefsm (and no pydantic); the models of
the records are :mod:`modefsm.log._models`.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Mapping
from typing import Any, Literal

import orjson

__all__ = [
    "CHAINED_EVENTS",
    "EVENT_CHANGED",
    "EVENT_CONFIG",
    "EVENT_CREATED",
    "EVENT_DECIDED",
    "EVENT_DROPPED",
    "EVENT_REJECTED",
    "EVENT_REPAIRED",
    "EVENT_SPEC",
    "MAX_LINE",
    "MAX_SPEC_TEXT",
    "RECORD_EVENTS",
    "SEQ_MAX",
    "Origin",
    "Outcome",
    "RejectReason",
    "canonical_record",
    "exact_digest",
    "previous_of",
    "record_digest",
    "title_digest",
    "utc_timestamp",
]

EVENT_CREATED = "modefsm.session_created"
EVENT_CHANGED = "modefsm.mode_changed"
EVENT_REJECTED = "modefsm.change_rejected"
EVENT_CONFIG = "modefsm.config_changed"
"""A host config option set by ``session/set_config_option``: a committed record."""
EVENT_DROPPED = "modefsm.answer_dropped"
"""A diagnostic, not a record: an answer to a permission request that no ``switch_mode``
switch sent (a host's tool call's) which decided nothing, with ``tool_call_id``,
``request_id``, ``option_id`` and ``reason`` (``late_answer``: the tool call was settled
before it came; ``duplicate_answer``: a second answer). Not a decision, not chained."""
EVENT_REPAIRED = "modefsm.log_repaired"
"""A diagnostic, not a record: the line before it was torn by a crash (``torn_bytes`` long)."""
SEQ_MAX = (1 << 63) - 1
"""The largest ``seq`` a record may hold (SQLite's largest ``INTEGER``): a line with a larger
one, or one below 1, is not a record (readers report it as ``not_a_record``)."""
RECORD_EVENTS = frozenset({EVENT_CREATED, EVENT_CHANGED, EVENT_CONFIG, EVENT_REJECTED})
"""The events that are :class:`~modefsm.log.TransitionRecord` lines (other ``modefsm.*``
events, such as ``modefsm.notify_failed``, are diagnostics: not records, not chained)."""
EVENT_DECIDED = "modefsm.tool_decided"
"""A tool call decided by its session's mode: a :class:`~modefsm.log.DecisionRecord`."""
EVENT_SPEC = "modefsm.spec"
"""A file's header: the spec its records were written with (a
:class:`~modefsm.log.SpecRecord`)."""
CHAINED_EVENTS = RECORD_EVENTS | {EVENT_DECIDED, EVENT_SPEC}
"""The events whose lines are chained (``prev`` and ``digest``): the records, decisions and
spec headers."""
MAX_LINE = 1 << 20
"""The longest line looked at, in bytes (1 MiB, its newline not counted): readers skip a
longer line as ``too_long``, and a writer reopening a log does not read one to find its
last record."""
MAX_SPEC_TEXT = MAX_LINE - (64 << 10)
"""The longest spec definition a header holds, in bytes of compact JSON (960 KiB: the
header line stays within :data:`MAX_LINE`). The header of a longer spec names it by name
and hash only (``definition`` null): replay then needs the spec given."""


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


Outcome = Literal[
    "allow_once", "allow_always", "reject_once", "reject_always", "cancelled", "granted",
    "abandoned",
]  # fmt: skip
"""How an ``ask`` ended: the kind of the permission option the user selected
(``session/request_permission``), ``cancelled`` (the request was cancelled, or withdrawn
when a mode change made it moot), ``granted`` (a remembered ``allow_always`` applied:
nobody was asked), or ``abandoned`` (the process that asked ended before the answer: the
next process to restore the session settled it; the tool call did not run)."""

_DIGEST_KEYS = frozenset(
    {
        "event",
        "timestamp",
        "session_id",
        "seq",
        "from_mode",
        "to_mode",
        "origin",
        "request_id",
        "tool_call_id",
        "option_id",
        "proposed_in",
        "protocol",
        "cwd",
        "reason",
        "config_id",
        "value",
        "config",
        "spec",
        "spec_hash",
        "prev",
        "session_prev",
    }
)
"""The keys a record's digest covers: :class:`~modefsm.log.TransitionRecord`'s fields but
``level`` and ``digest`` (a test holds them equal)."""
_DECISION_KEYS = frozenset(
    {
        "event",
        "timestamp",
        "session_id",
        "tool_call_id",
        "kind",
        "tool",
        "title_digest",
        "rule",
        "decision",
        "outcome",
        "mode",
        "mode_seq",
        "spec",
        "spec_hash",
        "prev",
    }
)
"""The keys a decision's digest covers: :class:`~modefsm.log.DecisionRecord`'s fields but
``level`` and ``digest``."""
_SPEC_KEYS = frozenset({"event", "timestamp", "spec", "spec_hash", "definition", "prev"})
"""The keys a header's digest covers: :class:`~modefsm.log.SpecRecord`'s fields but
``level`` and ``digest``."""


_dumps = orjson.dumps
_SORT_KEYS = orjson.OPT_SORT_KEYS
_sha256 = hashlib.sha256


def canonical_record(data: Mapping[str, Any]) -> bytes:
    """The bytes a record's digest covers: its fields as compact JSON with sorted keys.

    Every :class:`~modefsm.log.TransitionRecord` field present in *data* counts (every
    :class:`~modefsm.log.DecisionRecord` field for a ``modefsm.tool_decided`` line, every
    :class:`~modefsm.log.SpecRecord` field for a ``modefsm.spec`` header), ``prev`` and
    ``event`` included, except ``level`` (derived from the event) and ``digest`` itself.
    Keys a host logger adds (its own context) are not covered.

    Args:
        data: a record as a JSON object (parsed from a line, or about to be written).

    Example:
        >>> canonical_record({"seq": 2, "event": "modefsm.mode_changed", "pid": 7})
        b'{"event":"modefsm.mode_changed","seq":2}'
    """
    event = data.get("event")
    keys = (
        _DECISION_KEYS
        if event == EVENT_DECIDED
        else _SPEC_KEYS
        if event == EVENT_SPEC
        else _DIGEST_KEYS
    )
    if not keys.issuperset(data):
        data = {key: value for key, value in data.items() if key in keys}
    return _dumps(data, option=_SORT_KEYS)


def record_digest(data: Mapping[str, Any]) -> str:
    """SHA-256 of :func:`canonical_record` of *data*, as 64 lowercase hex digits."""
    return _sha256(canonical_record(data)).hexdigest()


def exact_digest(data: Mapping[str, Any]) -> str:
    """:func:`record_digest` of a record whose every key its digest covers but ``digest``.

    For a writer that built *data* from a record's fields alone (``prev`` and ``event``
    included, no ``level``, no ``digest``, no key of a host's): the same digest, without
    looking for keys to leave out. A key the digest does not cover would be hashed.
    """
    return _sha256(_dumps(data, option=_SORT_KEYS)).hexdigest()


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
