"""modefsm: ACP session modes as explicit, logged, replayable state machines.

The public API, re-exported from the modules that define it.
"""

from modefsm.errors import (
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
    "FrameError",
    "HookError",
    "InvalidParamsError",
    "InvalidValueError",
    "LogError",
    "Mode",
    "ModeChange",
    "ModeEngine",
    "ModeSpec",
    "ModeView",
    "ModefsmError",
    "NotificationSink",
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
    "load_spec",
    "preset",
    "preset_names",
]
