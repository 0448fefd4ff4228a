"""modefsm.engine: see the README's Architecture section."""

from modefsm.engine._engine import (
    ModeChange,
    ModeEngine,
    NotificationSink,
    OfferedOption,
    Session,
    SwitchOffer,
)
from modefsm.engine._machine import (
    MATERIALIZED_MAX,
    MODEL_ATTRIBUTE,
    ModeMachine,
    mode_of,
    state_name,
)
from modefsm.engine._views import ModeView, build_views

__all__ = [
    "MATERIALIZED_MAX",
    "MODEL_ATTRIBUTE",
    "ModeChange",
    "ModeEngine",
    "ModeMachine",
    "ModeView",
    "NotificationSink",
    "OfferedOption",
    "Session",
    "SwitchOffer",
    "build_views",
    "mode_of",
    "state_name",
]
