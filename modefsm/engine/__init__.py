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
from modefsm.engine._events import ModeChanged
from modefsm.engine._machine import (
    MATERIALIZED_MAX,
    MODEL_ATTRIBUTE,
    ModeMachine,
    mode_of,
    state_name,
)
from modefsm.engine._tools import (
    ASK_OPTIONS,
    ENDED_KEPT,
    MAX_OPEN_ASKS,
    AskOption,
    ToolCall,
    ToolDecision,
)
from modefsm.engine._views import Choice, ModeInfo, ModeView, OptionView, build_views

__all__ = [
    "ASK_OPTIONS",
    "ENDED_KEPT",
    "MATERIALIZED_MAX",
    "MAX_OPEN_ASKS",
    "MODEL_ATTRIBUTE",
    "AskOption",
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
    "ToolCall",
    "ToolDecision",
    "build_views",
    "mode_of",
    "notification_kind",
    "state_name",
]
