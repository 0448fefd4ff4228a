"""modefsm.engine: see the README's Architecture section."""

from modefsm.engine._engine import ModeChange, ModeEngine, NotificationSink, Session
from modefsm.engine._machine import MODEL_ATTRIBUTE, ModeMachine, TriggerKind, mode_of, state_name
from modefsm.engine._views import ModeView, build_views

__all__ = [
    "MODEL_ATTRIBUTE",
    "ModeChange",
    "ModeEngine",
    "ModeMachine",
    "ModeView",
    "NotificationSink",
    "Session",
    "TriggerKind",
    "build_views",
    "mode_of",
    "state_name",
]
