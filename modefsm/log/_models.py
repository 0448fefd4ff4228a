"""The record models: :class:`TransitionRecord` and :class:`DecisionRecord` (pydantic).

The same :class:`TransitionRecord` model describes what the writer
(:class:`~modefsm.log.TransitionLog`) writes and what :mod:`modefsm.replay` parses (see
:mod:`modefsm.log._records` for the format and the chain). Kept apart from the format's
constants and digest, so that writing records (the engine) loads no pydantic model.
"""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field

from modefsm.log._records import SEQ_MAX, Origin, Outcome, RejectReason
from modefsm.spec import Decision, ToolKind

__all__ = ["DecisionRecord", "FieldCheck", "SpecRecord", "TransitionRecord", "record_checks"]


class TransitionRecord(BaseModel):
    """One line of the transition log.

    Attributes:
        event: ``modefsm.session_created``, ``modefsm.mode_changed``,
            ``modefsm.config_changed`` or ``modefsm.change_rejected``.
        timestamp: UTC, ISO 8601 with a ``Z`` suffix.
        session_id: ACP ``sessionId``.
        seq: the session's sequence number, 1 for its creation, then +1 per committed
            change; ``None`` on rejections; at most :data:`~modefsm.log.SEQ_MAX` (a SQLite
            ``INTEGER``).
        from_mode: the mode before (``None`` on creation).
        to_mode: the mode after (on a rejection: the mode asked for, if any).
        origin: see :data:`~modefsm.log.Origin`.
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
        digest: :func:`~modefsm.log.record_digest` of this record: 64 hex digits.
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
        title_digest: :func:`~modefsm.log.title_digest` of ACP ``ToolCall.title``.
        rule: the index of the rule that decided in the mode's ``tools``; ``None``: the
            mode's ``tools_default``.
        decision: ``allow``, ``ask`` or ``deny`` (the verdict of the mode's rules).
        outcome: for an ``ask``, how it ended (:data:`~modefsm.log.Outcome`); ``None`` otherwise.
        mode: the session's committed mode the call was decided in.
        mode_seq: the ``seq`` of the session's committed record that set *mode* (the
            record the decision was made against).
        spec: the spec's name.
        spec_hash: the spec's :attr:`~modefsm.spec.ModeSpec.content_hash`.
        level: the log level (``info``).
        prev: the ``digest`` of the record written before this one on the same log.
        digest: :func:`~modefsm.log.record_digest` of this record.
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


class SpecRecord(BaseModel):
    """One ``modefsm.spec`` line: a file's header, naming the spec of the records after it.

    Attributes:
        event: ``modefsm.spec``.
        timestamp: UTC, ISO 8601 with a ``Z`` suffix.
        spec: the spec's name.
        spec_hash: the spec's :attr:`~modefsm.spec.ModeSpec.content_hash`.
        definition: the spec itself, as :attr:`~modefsm.spec.ModeSpec.definition` gives it
            (what its ``content_hash`` is the digest of); ``None`` when its compact JSON is
            longer than :data:`~modefsm.log.MAX_SPEC_TEXT` bytes.
        level: the log level (``info``).
        prev: the ``digest`` of the record written before this one on the same log.
        digest: :func:`~modefsm.log.record_digest` of this record.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    event: Literal["modefsm.spec"]
    timestamp: str
    spec: str
    spec_hash: str
    definition: dict[str, Any] | None = None
    level: str = "info"
    prev: str | None = None
    digest: str | None = None
