"""What the engine tells a session's client, as data: its notifications.

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

__all__ = ["ConfigChanged", "ModeChanged"]


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
