"""What the engine tells, as data: a change to its hooks, a notification to its sink.

A :class:`ModeChange` is what ``before_change`` and ``after_change`` hooks get (and what
the coroutines that change a mode return).

The engine hands each event to its sink (``await sink(session_id, event)``) in commit
order; :mod:`modefsm.protocol` renders it as the ``session/update`` notifications of the
client's ACP version (v1: ``current_mode_update`` and ``config_option_update``; v2:
``config_option_update``; a host option's :class:`ConfigChanged`: ``config_option_update``
alone; see :func:`modefsm.protocol.v1.session_updates`). Anything
else a host passes to :meth:`ModeEngine.notify <modefsm.engine.ModeEngine.notify>` (a
tool call, a message) reaches the sink as it was given, in order with these.
"""

from __future__ import annotations

from dataclasses import dataclass

from modefsm.engine._views import OptionView
from modefsm.log import Origin

__all__ = ["ConfigChanged", "ModeChange", "ModeChanged"]


@dataclass(frozen=True, slots=True)
class ModeChange:
    """A committed (or, for ``before_change`` hooks, about to be committed) mode change.

    Attributes:
        session_id: ACP ``sessionId``.
        seq: its sequence number in the session.
        from_mode: the mode before (the transition's source).
        to_mode: the mode after (the transition's dest).
        origin: ``set_mode``, ``set_config_option``, ``switch_mode`` or ``restore``.
        request_id: the JSON-RPC id of the request, if known.
        tool_call_id: ACP ``toolCallId``, for an approved switch.
        option_id: ACP ``optionId`` selected, for an approved switch.
        proposed_in: the mode an approved switch was proposed in, when the client changed
            the mode while its permission request was pending.
    """

    session_id: str
    seq: int
    from_mode: str
    to_mode: str
    origin: Origin
    request_id: str | int | None = None
    tool_call_id: str | None = None
    option_id: str | None = None
    proposed_in: str | None = None


@dataclass(frozen=True, slots=True)
class ModeChanged:
    """A session's mode changed (by any origin, or taken from another process).

    Attributes:
        session_id: ACP ``sessionId``.
        mode_id: the mode now (ACP ``currentModeId``).
        seq: the ``seq`` of the session's record that put it there.
        config_options: the session's complete ``configOptions`` now: the mode option
            first, then the host's options, as :class:`~modefsm.engine.OptionView` objects.
    """

    session_id: str
    mode_id: str
    seq: int
    config_options: tuple[OptionView, ...]


@dataclass(frozen=True, slots=True)
class ConfigChanged:
    """A host config option of a session took a new value (ACP ``config_option_update``).

    Attributes:
        session_id: ACP ``sessionId``.
        config_id: ACP ``configId`` of the option.
        value: its value now.
        seq: the ``seq`` of the session's ``modefsm.config_changed`` record.
        config_options: the session's complete ``configOptions`` now: the mode option,
            then the host's options, as :class:`~modefsm.engine.OptionView` objects.
    """

    session_id: str
    config_id: str
    value: str
    seq: int
    config_options: tuple[OptionView, ...]
