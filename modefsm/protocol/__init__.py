"""modefsm.protocol: see the README's Architecture section."""

from modefsm.protocol._agent import CLOSE_WAIT, MAX_CWD_CHARS, ModeAgent, RestoreSource, acp_errors
from modefsm.protocol._batch import MAX_BATCH
from modefsm.protocol._http import (
    ACP_PATH,
    IDLE_SECONDS,
    MAX_BODY_BYTES,
    MAX_CONNECTIONS,
    AgentFactory,
    create_app,
    serve_http,
)
from modefsm.protocol._list import LIST_PAGE
from modefsm.protocol._negotiate import SUPPORTED_PROTOCOLS, UNSUPPORTED_PROTOCOL, serve_negotiated
from modefsm.protocol._shared import FORGET_AFTER, SEND_WAIT, SharedEngine
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
    MAX_ECHO_ITEMS,
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
    "ACP_PATH",
    "CLOSE_WAIT",
    "EOF_GRACE",
    "FORGET_AFTER",
    "IDLE_SECONDS",
    "LIST_PAGE",
    "MAX_BATCH",
    "MAX_BODY_BYTES",
    "MAX_CONNECTIONS",
    "MAX_CWD_CHARS",
    "MAX_DEPTH",
    "MAX_ECHO_CHARS",
    "MAX_ECHO_ITEMS",
    "MAX_FRAME_BYTES",
    "MAX_ID_CHARS",
    "MAX_IN_FLIGHT",
    "MAX_OPEN",
    "MAX_VALUES",
    "REQUEST_CANCELLED",
    "SEND_WAIT",
    "SUPPORTED_PROTOCOLS",
    "UNSUPPORTED_PROTOCOL",
    "AgentFactory",
    "BoundedPipeWriter",
    "CheckedTransport",
    "Diagnostics",
    "ModeAgent",
    "OutputClosedError",
    "PermissionRequest",
    "RestoreSource",
    "SharedEngine",
    "SwitchResult",
    "acp_errors",
    "check_frame",
    "create_app",
    "offered_options",
    "propose_switch",
    "run_agent",
    "serve_http",
    "serve_negotiated",
]
