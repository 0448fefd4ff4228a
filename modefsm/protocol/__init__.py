"""modefsm.protocol: see the README's Architecture section."""

from modefsm.protocol._agent import ModeAgent, RestoreSource, acp_errors
from modefsm.protocol._switch import (
    REQUEST_CANCELLED,
    SwitchResult,
    offered_options,
    propose_switch,
)
from modefsm.protocol._transport import (
    MAX_DEPTH,
    MAX_FRAME_BYTES,
    CheckedTransport,
    PermissionRequest,
    check_frame,
    run_agent,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_FRAME_BYTES",
    "REQUEST_CANCELLED",
    "CheckedTransport",
    "ModeAgent",
    "PermissionRequest",
    "RestoreSource",
    "SwitchResult",
    "acp_errors",
    "check_frame",
    "offered_options",
    "propose_switch",
    "run_agent",
]
