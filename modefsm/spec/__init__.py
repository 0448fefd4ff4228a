"""modefsm.spec: see the README's Architecture section."""

from modefsm.spec._model import (
    PREVIOUS,
    Mode,
    ModeSpec,
    PermissionOptionKind,
    Switch,
    SwitchOption,
    load_spec,
    preset,
    preset_names,
)

__all__ = [
    "PREVIOUS",
    "Mode",
    "ModeSpec",
    "PermissionOptionKind",
    "Switch",
    "SwitchOption",
    "load_spec",
    "preset",
    "preset_names",
]
