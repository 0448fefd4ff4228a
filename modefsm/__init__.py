"""modefsm: ACP session modes as explicit, logged, replayable state machines.

The public API, re-exported from the modules that define it. Each name is imported on
first use, so that ``import modefsm`` (and the start of the ``modefsm`` command, which
handles Ctrl-C from its first moment) stays fast.
"""

import sys

# Nothing is imported here but sys (loaded with the interpreter): the ``modefsm`` command
# runs this module before it can handle Ctrl-C, so this module must end in microseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

    from modefsm.engine import OfferedOption, SwitchOffer
    from modefsm.engine._engine import ModeChange, ModeEngine, NotificationSink, Session
    from modefsm.engine._events import ConfigChanged, ModeChanged
    from modefsm.engine._options import HostOption, OptionChange
    from modefsm.engine._views import ModeView, OptionView
    from modefsm.errors import (
        ChangeRefused,
        DiagramError,
        FrameError,
        HookError,
        InvalidParamsError,
        InvalidValueError,
        LogError,
        ModefsmError,
        NoSwitchError,
        SessionExistsError,
        SpecError,
        SpecProblem,
        StaleOptionError,
        TransitionNotAllowedError,
        UnknownConfigOptionError,
        UnknownModeError,
        UnknownSessionError,
    )
    from modefsm.log._conversation import ConversationStore
    from modefsm.log._records import TransitionRecord
    from modefsm.log._writer import TransitionLog
    from modefsm.protocol import ModeAgent, SwitchResult, run_agent
    from modefsm.protocol.transport._access import new_token
    from modefsm.protocol.transport._http import serve_http
    from modefsm.protocol.transport._negotiate import serve_negotiated
    from modefsm.protocol.transport._shared import SharedEngine
    from modefsm.protocol.v2._agent import ModeAgentV2
    from modefsm.replay import ReplayReport, Violation, replay
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
    from modefsm.store import (
        FileStore,
        MemoryStore,
        SessionMoved,
        SessionStore,
        StoreBusy,
        StoreInDoubt,
        open_store,
    )
    from modefsm.store._interface import RestorePoint
    from modefsm.store._restore import LogRestore, RestoreIndex
else:
    ModuleType = type(sys)  # types.ModuleType, without importing types

_EXPORTS = {
    "ChangeRefused": "modefsm.errors",
    "ConversationStore": "modefsm.log._conversation",
    "FileStore": "modefsm.store",
    "MemoryStore": "modefsm.store",
    "SessionMoved": "modefsm.store",
    "SessionStore": "modefsm.store",
    "StoreBusy": "modefsm.store",
    "StoreInDoubt": "modefsm.store",
    "open_store": "modefsm.store",
    "DiagramError": "modefsm.errors",
    "FrameError": "modefsm.errors",
    "HookError": "modefsm.errors",
    "InvalidParamsError": "modefsm.errors",
    "InvalidValueError": "modefsm.errors",
    "LogError": "modefsm.errors",
    "LogRestore": "modefsm.store._restore",
    "Mode": "modefsm.spec",
    "ModeAgent": "modefsm.protocol",
    "ModeAgentV2": "modefsm.protocol.v2._agent",
    "ModeChange": "modefsm.engine._engine",
    "ModeChanged": "modefsm.engine._events",
    "ConfigChanged": "modefsm.engine._events",
    "HostOption": "modefsm.engine._options",
    "OptionChange": "modefsm.engine._options",
    "ModeEngine": "modefsm.engine._engine",
    "ModeSpec": "modefsm.spec",
    "ModeView": "modefsm.engine._views",
    "ModefsmError": "modefsm.errors",
    "NoSwitchError": "modefsm.errors",
    "NotificationSink": "modefsm.engine._engine",
    "OfferedOption": "modefsm.engine",
    "OptionView": "modefsm.engine._views",
    "PREVIOUS": "modefsm.spec",
    "ReplayReport": "modefsm.replay",
    "RestoreIndex": "modefsm.store._restore",
    "RestorePoint": "modefsm.store._interface",
    "Session": "modefsm.engine._engine",
    "SessionExistsError": "modefsm.errors",
    "SharedEngine": "modefsm.protocol.transport._shared",
    "SpecError": "modefsm.errors",
    "SpecProblem": "modefsm.errors",
    "StaleOptionError": "modefsm.errors",
    "Switch": "modefsm.spec",
    "SwitchOffer": "modefsm.engine",
    "SwitchOption": "modefsm.spec",
    "SwitchResult": "modefsm.protocol",
    "TransitionLog": "modefsm.log._writer",
    "TransitionNotAllowedError": "modefsm.errors",
    "TransitionRecord": "modefsm.log._records",
    "UnknownConfigOptionError": "modefsm.errors",
    "UnknownModeError": "modefsm.errors",
    "UnknownSessionError": "modefsm.errors",
    "Violation": "modefsm.replay",
    "load_spec": "modefsm.spec",
    "new_token": "modefsm.protocol.transport._access",
    "preset": "modefsm.spec",
    "preset_names": "modefsm.spec",
    "replay": "modefsm.replay",
    "run_agent": "modefsm.protocol",
    "serve_http": "modefsm.protocol.transport._http",
    "serve_negotiated": "modefsm.protocol",
}
"""Where each public name is defined."""


def __getattr__(name: str) -> "Any":
    """Import a public name from the module that defines it, on first use."""
    from modefsm._lazy import lazy_exports  # noqa: PLC0415 - on first use: see the imports

    return lazy_exports(__name__, _EXPORTS)(name)


def __dir__() -> list[str]:
    """The public names and the module's own dunder attributes."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})


class _Package(ModuleType):
    """The package; its ``replay`` stays the function when ``modefsm.replay`` is imported."""

    def __setattr__(self, name: str, value: "Any") -> None:
        if name in _EXPORTS and isinstance(value, ModuleType):
            return  # a submodule named like a public function (replay): keep the function
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = [
    "PREVIOUS",
    "ChangeRefused",
    "ConfigChanged",
    "ConversationStore",
    "DiagramError",
    "FileStore",
    "FrameError",
    "HookError",
    "HostOption",
    "InvalidParamsError",
    "InvalidValueError",
    "LogError",
    "LogRestore",
    "MemoryStore",
    "Mode",
    "ModeAgent",
    "ModeAgentV2",
    "ModeChange",
    "ModeChanged",
    "ModeEngine",
    "ModeSpec",
    "ModeView",
    "ModefsmError",
    "NoSwitchError",
    "NotificationSink",
    "OfferedOption",
    "OptionChange",
    "OptionView",
    "ReplayReport",
    "RestoreIndex",
    "RestorePoint",
    "Session",
    "SessionExistsError",
    "SessionMoved",
    "SessionStore",
    "SharedEngine",
    "SpecError",
    "SpecProblem",
    "StaleOptionError",
    "StoreBusy",
    "StoreInDoubt",
    "Switch",
    "SwitchOffer",
    "SwitchOption",
    "SwitchResult",
    "TransitionLog",
    "TransitionNotAllowedError",
    "TransitionRecord",
    "UnknownConfigOptionError",
    "UnknownModeError",
    "UnknownSessionError",
    "Violation",
    "load_spec",
    "new_token",
    "open_store",
    "preset",
    "preset_names",
    "replay",
    "run_agent",
    "serve_http",
    "serve_negotiated",
]
