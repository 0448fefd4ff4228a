"""modefsm.protocol.v1: the ACP v1 agent adapter."""

from modefsm.protocol.v1._agent import (
    CLOSE_WAIT,
    MAX_CWD_CHARS,
    ModeAgent,
)
from modefsm.protocol.v1._render import config_options, mode_state, session_updates
from modefsm.protocol.v1._switch import (
    SwitchResult,
    offered_options,
    propose_switch,
)
from modefsm.protocol.v1._tools import ToolResult, run_tool

__all__ = [
    "CLOSE_WAIT",
    "MAX_CWD_CHARS",
    "ModeAgent",
    "SwitchResult",
    "ToolResult",
    "config_options",
    "mode_state",
    "offered_options",
    "propose_switch",
    "run_tool",
    "session_updates",
]
