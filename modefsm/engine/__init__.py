"""Live sessions: each change checked, written before it takes effect, then announced.

Where it sits among the stages: the documentation's Architecture page.
"""

from modefsm.engine._engine import (
    ModeChange,
    ModeEngine,
    NotificationSink,
    OfferedOption,
    Session,
    SwitchOffer,
    notification_kind,
)
from modefsm.engine._events import ConfigChanged, ModeChanged
from modefsm.engine._machine import (
    MATERIALIZED_MAX,
    MODEL_ATTRIBUTE,
    ModeMachine,
    mode_of,
    state_name,
)
from modefsm.engine._options import HostOption, HostOptions, OptionChange
from modefsm.engine._views import Choice, ModeInfo, ModeView, OptionView, build_views

__all__ = [
    "MATERIALIZED_MAX",
    "MODEL_ATTRIBUTE",
    "Choice",
    "ConfigChanged",
    "HostOption",
    "HostOptions",
    "ModeChange",
    "ModeChanged",
    "ModeEngine",
    "ModeInfo",
    "ModeMachine",
    "ModeView",
    "NotificationSink",
    "OfferedOption",
    "OptionChange",
    "OptionView",
    "Session",
    "SwitchOffer",
    "build_views",
    "mode_of",
    "notification_kind",
    "state_name",
]
