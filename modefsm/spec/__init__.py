"""What is allowed: the mode catalogue and its policy, the presets, the transition table.

The models load on first use of one of their names, so that listing the presets and the
transition table's names costs no pydantic model.

Exports: the models (``ModeSpec``, ``Mode``, ``Switch``, ``SwitchOption``,
``load_spec``, ``preset``, ``preset_names``), ``TransitionTable`` (the one answer to "is
this transition legal?"), the tool rules (``RuleTable``, ``ToolRule``, ``Verdict``, ...)
and grants (``Grants``, ``GrantMemory``, ...), and the names and bounds they use.

May import: ``errors``, and ``modefsm._lazy``.
"""

from typing import TYPE_CHECKING

from modefsm._lazy import lazy_exports
from modefsm.spec._presets import preset, preset_names
from modefsm.spec._table import ORIGIN_KINDS, PREVIOUS, TRIGGER_KINDS, TransitionTable, TriggerKind

if TYPE_CHECKING:
    from modefsm.spec._grants import MAX_GRANTS, GrantFacts, GrantMemory, Grants, GrantScope
    from modefsm.spec._model import (
        MAX_META,
        MAX_PROMPT,
        MAX_RULES,
        MAX_SPEC_FILE,
        Mode,
        ModeSpec,
        PermissionOptionKind,
        Switch,
        SwitchOption,
        load_spec,
    )
    from modefsm.spec._rules import (
        DECISIONS,
        TOOL_KINDS,
        Decision,
        RuleTable,
        ToolKind,
        ToolRule,
        Verdict,
    )

__all__ = [
    "DECISIONS",
    "MAX_GRANTS",
    "MAX_META",
    "MAX_PROMPT",
    "MAX_RULES",
    "MAX_SPEC_FILE",
    "ORIGIN_KINDS",
    "PREVIOUS",
    "TOOL_KINDS",
    "TRIGGER_KINDS",
    "Decision",
    "GrantFacts",
    "GrantMemory",
    "GrantScope",
    "Grants",
    "Mode",
    "ModeSpec",
    "PermissionOptionKind",
    "RuleTable",
    "Switch",
    "SwitchOption",
    "ToolKind",
    "ToolRule",
    "TransitionTable",
    "TriggerKind",
    "Verdict",
    "load_spec",
    "preset",
    "preset_names",
]

_GRANTS = ("MAX_GRANTS", "GrantFacts", "GrantMemory", "GrantScope", "Grants")
_RULES = ("DECISIONS", "TOOL_KINDS", "Decision", "RuleTable", "ToolKind", "ToolRule", "Verdict")

__getattr__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(set(__all__) - globals().keys(), "modefsm.spec._model"),
        **dict.fromkeys(_GRANTS, "modefsm.spec._grants"),
        **dict.fromkeys(_RULES, "modefsm.spec._rules"),
    },
)
"""Import the module's names on first use of one of them."""
