"""modefsm.spec: see the README's Architecture section.

The models load on first use of one of their names, so that listing the presets and the
transition table's names costs no pydantic model.
"""

from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    """Import the models on first use of one of their names."""
    if name not in __all__:
        msg = f"module 'modefsm.spec' has no attribute {name!r}"
        raise AttributeError(msg)
    from modefsm.spec import _model  # noqa: PLC0415 - the point: on first use

    value = getattr(_model, name)
    globals()[name] = value
    return value
