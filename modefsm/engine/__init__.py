"""Live sessions: each change checked, written before it takes effect, then announced.

Where it sits among the stages: the documentation's Architecture page.
"""

from modefsm.engine._engine import (
    ModeEngine,
    NotificationSink,
    Session,
    notification_kind,
)
from modefsm.engine._events import ModeChange, ModeChanged
from modefsm.engine._machine import (
    MATERIALIZED_MAX,
    MODEL_ATTRIBUTE,
    ModeMachine,
    mode_of,
    state_name,
)
from modefsm.engine._offers import OfferedOption, SwitchOffer, SwitchOffers, SwitchResult
from modefsm.engine._views import Choice, ModeInfo, ModeView, OptionView, build_views

__all__ = [
    "MATERIALIZED_MAX",
    "MODEL_ATTRIBUTE",
    "Choice",
    "ModeChange",
    "ModeChanged",
    "ModeEngine",
    "ModeInfo",
    "ModeMachine",
    "ModeView",
    "NotificationSink",
    "OfferedOption",
    "OptionView",
    "Session",
    "SwitchOffer",
    "SwitchOffers",
    "SwitchResult",
    "build_views",
    "mode_of",
    "notification_kind",
    "state_name",
]
