"""modefsm.protocol: see the README's Architecture section."""

from modefsm.protocol._agent import ModeAgent, RestoreSource, acp_errors
from modefsm.protocol._negotiate import (
    SUPPORTED_PROTOCOLS,
    UNSUPPORTED_PROTOCOL,
    serve_negotiated,
)
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
    "SUPPORTED_PROTOCOLS",
    "UNSUPPORTED_PROTOCOL",
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
    "serve_negotiated",
]
# ModeAgentV2 (modefsm.protocol._agent_v2) is not imported here: it imports the ACP v2
# schema, which doubles start-up; `from modefsm import ModeAgentV2` loads it on first use.
