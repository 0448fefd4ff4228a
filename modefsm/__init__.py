"""modefsm: ACP session modes as explicit, logged, replayable state machines.

The public API, re-exported from the modules that define it.
"""

from modefsm.engine._engine import ModeChange, ModeEngine, NotificationSink, Session
from modefsm.engine._views import ModeView
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
from modefsm.log._records import TransitionLog, TransitionRecord
from modefsm.replay._replayer import ReplayReport, Violation, replay
from modefsm.restore import LogRestore, RestoreIndex, RestorePoint
from modefsm.spec._model import (
    PREVIOUS,
    Mode,
    ModeSpec,
    Switch,
    SwitchOption,
    load_spec,
    preset,
    preset_names,
)

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
