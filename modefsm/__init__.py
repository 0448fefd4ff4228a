"""modefsm: ACP session modes as explicit, logged, replayable state machines.

The public API, re-exported from the modules that define it.
"""

from modefsm.errors import (
    DiagramError,
    FrameError,
    HookError,
    InvalidParamsError,
    InvalidValueError,
    LogError,
    ModefsmError,
    SessionExistsError,
    SpecError,
    SpecProblem,
    TransitionNotAllowedError,
    UnknownConfigOptionError,
    UnknownModeError,
    UnknownSessionError,
)
from modefsm.records import TransitionLog, TransitionRecord
from modefsm.replay import ReplayReport, Violation, replay
from modefsm.restore import LogRestore, RestoreIndex, RestorePoint
from modefsm.sessions import ModeChange, ModeEngine, NotificationSink, Session
from modefsm.spec import (
    PREVIOUS,
    Mode,
    ModeSpec,
    Switch,
    SwitchOption,
    load_spec,
    preset,
    preset_names,
)
from modefsm.views import ModeView

__all__ = [
    "PREVIOUS",
    "DiagramError",
    "FrameError",
    "HookError",
    "InvalidParamsError",
    "InvalidValueError",
    "LogError",
    "LogRestore",
    "Mode",
    "ModeChange",
    "ModeEngine",
    "ModeSpec",
    "ModeView",
    "ModefsmError",
    "NotificationSink",
    "ReplayReport",
    "RestoreIndex",
    "RestorePoint",
    "Session",
    "SessionExistsError",
    "SpecError",
    "SpecProblem",
    "Switch",
    "SwitchOption",
    "TransitionLog",
    "TransitionNotAllowedError",
    "TransitionRecord",
    "UnknownConfigOptionError",
    "UnknownModeError",
    "UnknownSessionError",
    "Violation",
    "load_spec",
    "preset",
    "preset_names",
    "replay",
]
