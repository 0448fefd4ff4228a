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

    from modefsm.engine import (
        AskOption,
        ConfigChanged,
        HostOption,
        ModeChange,
        ModeChanged,
        ModeEngine,
        ModeView,
        NotificationSink,
        OfferedOption,
        OptionChange,
        OptionView,
        Session,
        SwitchOffer,
        SwitchResult,
        ToolCall,
        ToolDecision,
    )
    from modefsm.errors import (
        AskClosedError,
        AskLimitError,
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
    from modefsm.log import ConversationStore, TransitionLog, TransitionRecord
    from modefsm.protocol import ModeAgent, ToolResult, run_agent
    from modefsm.protocol.transport import SharedEngine, new_token, serve_http, serve_negotiated
    from modefsm.protocol.v2 import ModeAgentV2
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
        LogRestore,
        LogStore,
        MemoryStore,
        RestoreIndex,
        RestorePoint,
        SessionMoved,
        SessionStore,
        StoreBusy,
        StoreInDoubt,
        open_store,
    )
else:
    ModuleType = type(sys)  # types.ModuleType, without importing types

_EXPORTS = {
    "AskClosedError": "modefsm.errors",
    "AskLimitError": "modefsm.errors",
    "AskOption": "modefsm.engine",
    "ChangeRefused": "modefsm.errors",
    "ConversationStore": "modefsm.log",
    "FileStore": "modefsm.store",
    "LogStore": "modefsm.store",
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
    "LogRestore": "modefsm.store",
    "Mode": "modefsm.spec",
    "ModeAgent": "modefsm.protocol",
    "ModeAgentV2": "modefsm.protocol.v2",
    "ModeChange": "modefsm.engine",
    "ModeChanged": "modefsm.engine",
    "ModeEngine": "modefsm.engine",
    "ConfigChanged": "modefsm.engine",
    "HostOption": "modefsm.engine",
    "OptionChange": "modefsm.engine",
    "ModeSpec": "modefsm.spec",
    "ModeView": "modefsm.engine",
    "ModefsmError": "modefsm.errors",
    "NoSwitchError": "modefsm.errors",
    "NotificationSink": "modefsm.engine",
    "OfferedOption": "modefsm.engine",
    "OptionView": "modefsm.engine",
    "PREVIOUS": "modefsm.spec",
    "ReplayReport": "modefsm.replay",
    "RestoreIndex": "modefsm.store",
    "RestorePoint": "modefsm.store",
    "Session": "modefsm.engine",
    "SessionExistsError": "modefsm.errors",
    "SharedEngine": "modefsm.protocol.transport",
    "SpecError": "modefsm.errors",
    "SpecProblem": "modefsm.errors",
    "StaleOptionError": "modefsm.errors",
    "Switch": "modefsm.spec",
    "SwitchOffer": "modefsm.engine",
    "SwitchOption": "modefsm.spec",
    "SwitchResult": "modefsm.engine",
    "TransitionLog": "modefsm.log",
    "ToolCall": "modefsm.engine",
    "ToolDecision": "modefsm.engine",
    "ToolResult": "modefsm.protocol",
    "TransitionNotAllowedError": "modefsm.errors",
    "TransitionRecord": "modefsm.log",
    "UnknownConfigOptionError": "modefsm.errors",
    "UnknownModeError": "modefsm.errors",
    "UnknownSessionError": "modefsm.errors",
    "Violation": "modefsm.replay",
    "load_spec": "modefsm.spec",
    "new_token": "modefsm.protocol.transport",
    "preset": "modefsm.spec",
    "preset_names": "modefsm.spec",
    "replay": "modefsm.replay",
    "run_agent": "modefsm.protocol",
    "serve_http": "modefsm.protocol.transport",
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
    "AskClosedError",
    "AskLimitError",
    "AskOption",
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
    "LogStore",
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
    "ToolCall",
    "ToolDecision",
    "ToolResult",
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
