"""modefsm.protocol.transport: frames, stdio, HTTP and WebSocket, negotiation.

The ACP connections: the strict stdio frame checks and bounded flow control
(``_stdio``), streamable HTTP and WebSocket on uvicorn with their trust checks
(``_http``, ``_access``), v2 batches (``_batch``), per-connection version negotiation
(``_negotiate``) and one engine shared by many connections (``_shared``).

Exports: ``run_agent``, ``serve_negotiated``, ``serve_http`` and ``create_app``,
``SharedEngine``, ``CheckedTransport``, ``PermissionRequest``, the access checks
(``Access``, ``Refusal``, ``new_token``, ``is_loopback``, ``normal_host``,
``normal_origin``, the token files) and every bound as a named constant.

May import: ``errors``, ``spec``, ``store``, ``engine``, and ``protocol`` (its JSON-RPC
errors and, when a v2 client connects, the v2 agent).
"""

from modefsm.protocol.transport._access import (
    ACP_SUBPROTOCOL,
    LOOPBACK_NAMES,
    TOKEN_SUBPROTOCOL,
    Access,
    Refusal,
    is_loopback,
    new_token,
    normal_host,
    normal_origin,
    read_token_file,
    write_token_file,
)
from modefsm.protocol.transport._batch import MAX_BATCH
from modefsm.protocol.transport._http import (
    ACP_PATH,
    BODY_SECONDS,
    FIRST_FRAME_SECONDS,
    HEADER_SECONDS,
    IDLE_SECONDS,
    MAX_BODY_BYTES,
    MAX_CONNECTIONS,
    RESERVED_DESCRIPTORS,
    AgentFactory,
    create_app,
    raise_descriptor_limit,
    serve_http,
)
from modefsm.protocol.transport._negotiate import (
    SUPPORTED_PROTOCOLS,
    serve_negotiated,
)
from modefsm.protocol.transport._shared import (
    FORGET_AFTER,
    FULL_WAIT,
    OUTBOX_SIZE,
    SEND_WAIT,
    SharedEngine,
)
from modefsm.protocol.transport._stdio import (
    EOF_GRACE,
    ID_SCAN_BYTES,
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
    "ACP_SUBPROTOCOL",
    "BODY_SECONDS",
    "EOF_GRACE",
    "FIRST_FRAME_SECONDS",
    "FORGET_AFTER",
    "FULL_WAIT",
    "HEADER_SECONDS",
    "IDLE_SECONDS",
    "ID_SCAN_BYTES",
    "LOOPBACK_NAMES",
    "MAX_BATCH",
    "MAX_BODY_BYTES",
    "MAX_CONNECTIONS",
    "MAX_DEPTH",
    "MAX_ECHO_CHARS",
    "MAX_ECHO_ITEMS",
    "MAX_FRAME_BYTES",
    "MAX_ID_CHARS",
    "MAX_IN_FLIGHT",
    "MAX_OPEN",
    "MAX_VALUES",
    "OUTBOX_SIZE",
    "RESERVED_DESCRIPTORS",
    "SEND_WAIT",
    "SUPPORTED_PROTOCOLS",
    "TOKEN_SUBPROTOCOL",
    "Access",
    "AgentFactory",
    "BoundedPipeWriter",
    "CheckedTransport",
    "Diagnostics",
    "OutputClosedError",
    "PermissionRequest",
    "Refusal",
    "SharedEngine",
    "check_frame",
    "create_app",
    "is_loopback",
    "new_token",
    "normal_host",
    "normal_origin",
    "raise_descriptor_limit",
    "read_token_file",
    "run_agent",
    "serve_http",
    "serve_negotiated",
    "write_token_file",
]
