"""The readers' fast path: a record line decoded and type-checked in one call, without the model.

:func:`record_struct` derives, from :func:`~modefsm.log.record_checks` (itself derived from
:class:`~modefsm.log.TransitionRecord`), a msgspec struct whose decoder takes a line only
when every key is a field of the model and every value one the model keeps as it is: a
string where the model wants a string, an integer within the model's bounds, a value of a
``Literal``. Anything else (a host's key, a value the model would convert or reject, a line
that is not JSON) raises, and the line goes the slow way, as does every ``config`` object (a
session's host option values) unless asked for (the struct takes only its ``null`` then).
An optional field the line does not have is :data:`msgspec.UNSET`, so that the digest's
canonical bytes cover exactly the keys the line holds.

msgspec bounds integers to 64 bits: where the model allows more (``request_id`` up to
``2**64 - 1``), the struct stops at ``2**63 - 1`` and the rest goes the slow way.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal, get_args, get_origin

import msgspec

from modefsm.log._models import FieldCheck, TransitionRecord, record_checks

__all__ = ["canonical_encoder", "record_decoder"]

_INT64 = (-(1 << 63), (1 << 63) - 1)


@functools.cache
def record_struct(*, config: bool = False) -> type[msgspec.Struct]:
    """The struct of a record line: the model's fields, their checks, no other key.

    Args:
        config: also take a ``config`` object (string keys, each value a string or a
            boolean, as the model keeps them); else only its ``null``.

    Example:
        >>> line = (b'{"event":"modefsm.session_created","timestamp":"t","session_id":"s",'
        ...         b'"seq":1,"from_mode":null,"to_mode":"ask","origin":"new","spec":"seed",'
        ...         b'"spec_hash":"h"}')
        >>> record = record_decoder()(line)
        >>> record.seq, record.to_mode, record.digest is msgspec.UNSET
        (1, 'ask', True)
    """
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for name, check in record_checks().items():
        kind = _type_of(check)
        if config and dict in check.types:
            kind = kind | _dict_arm(name)
        fields.append(
            (name, kind) if check.required else (name, kind | msgspec.UnsetType, msgspec.UNSET)
        )
    return msgspec.defstruct(
        "ConfigRecordLine" if config else "RecordLine",
        fields,
        kw_only=True,
        forbid_unknown_fields=True,
        gc=False,
        module=__name__,
    )


def _type_of(check: FieldCheck) -> Any:
    """The msgspec type of the values *check* accepts."""
    arms: list[Any] = []
    if str in check.types:
        arms.append(Literal[tuple(sorted(check.values))] if check.values is not None else str)
    if bool in check.types:
        arms.append(bool)
    if int in check.types:
        low = _INT64[0] if check.low is None else max(check.low, _INT64[0])
        high = _INT64[1] if check.high is None else min(check.high, _INT64[1])
        arms.append(Annotated[int, msgspec.Meta(ge=low, le=high)])
    if type(None) in check.types:
        arms.append(None)
    return functools.reduce(lambda a, b: a | b, arms[1:], arms[0]) if len(arms) > 1 else arms[0]


def _dict_arm(name: str) -> Any:
    """The ``dict[...]`` arm of the model's field *name* (msgspec checks its keys and values)."""
    annotation = TransitionRecord.model_fields[name].annotation
    return next(arm for arm in get_args(annotation) if get_origin(arm) is dict)


@functools.cache
def record_decoder(*, config: bool = False) -> Any:
    """``decode(line)``: the :func:`record_struct` of a JSON line (*config*: as there).

    Raises (from the returned function):
        msgspec.MsgspecError: the line is not JSON, or not a record the model keeps as it
            is (see the module's docstring).
    """
    return msgspec.json.Decoder(record_struct(config=config)).decode


@functools.cache
def canonical_encoder() -> Any:
    """``encode(record)``: compact JSON with sorted keys, unset fields left out.

    The bytes :func:`~modefsm.log.canonical_record` gives for the same fields (strings
    escaped as orjson escapes them), once ``level`` and ``digest`` are unset.
    """
    return msgspec.json.Encoder(order="sorted").encode
