"""What is allowed: the mode catalogue and its policy, the presets, the transition table.

Where it sits among the stages: the documentation's Architecture page.

The models load on first use of one of their names, so that listing the presets and the
transition table's names costs no pydantic model.
"""

from typing import TYPE_CHECKING

from modefsm._lazy import lazy_exports
from modefsm.spec._presets import preset_names
from modefsm.spec._table import ORIGIN_KINDS, PREVIOUS, TRIGGER_KINDS, TransitionTable, TriggerKind

if TYPE_CHECKING:
    from modefsm.spec._model import (
        Mode,
        ModeSpec,
        PermissionOptionKind,
        Switch,
        SwitchOption,
        load_spec,
        preset,
    )

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

__getattr__ = lazy_exports(
    __name__, dict.fromkeys(set(__all__) - globals().keys(), "modefsm.spec._model")
)
"""Import the module's names on first use of one of them."""
