"""modefsm.protocol.v1: the ACP v1 agent adapter."""

from modefsm.protocol.v1._agent import (
    CLOSE_WAIT,
    MAX_CWD_CHARS,
    ModeAgent,
    RestoreSource,
    acp_errors,
)
from modefsm.protocol.v1._switch import (
    REQUEST_CANCELLED,
    SwitchResult,
    offered_options,
    propose_switch,
)

__all__ = [
    "CLOSE_WAIT",
    "MAX_CWD_CHARS",
    "REQUEST_CANCELLED",
    "ModeAgent",
    "RestoreSource",
    "SwitchResult",
    "acp_errors",
    "offered_options",
    "propose_switch",
]
