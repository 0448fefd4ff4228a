"""modefsm.spec: see the README's Architecture section."""

from modefsm.spec._model import (
    Mode,
    ModeSpec,
    PermissionOptionKind,
    Switch,
    SwitchOption,
    load_spec,
    preset,
    preset_names,
)
from modefsm.spec._table import ORIGIN_KINDS, PREVIOUS, TRIGGER_KINDS, TransitionTable, TriggerKind

__all__ = [
    "ORIGIN_KINDS",
    "PREVIOUS",
    "TRIGGER_KINDS",
    "Mode",
    "ModeSpec",
    "PermissionOptionKind",
    "Switch",
    "SwitchOption",
    "TransitionTable",
    "TriggerKind",
    "load_spec",
    "preset",
    "preset_names",
]
