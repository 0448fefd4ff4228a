"""modefsm.protocol: see the README's Architecture section."""

from modefsm.protocol._agent import ModeAgent, RestoreSource, acp_errors
from modefsm.protocol._switch import (
    REQUEST_CANCELLED,
    SwitchResult,
    offered_options,
    propose_switch,
)
from modefsm.protocol._transport import (
    EOF_GRACE,
    MAX_DEPTH,
    MAX_ECHO_CHARS,
    MAX_FRAME_BYTES,
    MAX_ID_CHARS,
    MAX_IN_FLIGHT,
    MAX_OPEN,
    MAX_VALUES,
    BoundedPipeWriter,
    CheckedTransport,
    Diagnostics,
    OutputClosedError,
    PermissionRequest,
    check_frame,
    run_agent,
)

__all__ = [
    "EOF_GRACE",
    "MAX_DEPTH",
    "MAX_ECHO_CHARS",
    "MAX_FRAME_BYTES",
    "MAX_ID_CHARS",
    "MAX_IN_FLIGHT",
    "MAX_OPEN",
    "MAX_VALUES",
    "REQUEST_CANCELLED",
    "BoundedPipeWriter",
    "CheckedTransport",
    "Diagnostics",
    "ModeAgent",
    "OutputClosedError",
    "PermissionRequest",
    "RestoreSource",
    "SwitchResult",
    "acp_errors",
    "check_frame",
    "offered_options",
    "propose_switch",
    "run_agent",
]
