"""The ACP SDK releases the protocol runs on, behind one seam.

The v1 adapter (:class:`~modefsm.protocol.ModeAgent`, :func:`~modefsm.protocol.run_agent`,
``modefsm serve`` and ``modefsm demo`` on stdio) runs on the Python SDK
(``agent-client-protocol``) 0.12.x and 1.0; ACP v2 (``acp.experimental.v2``) and the HTTP
and WebSocket transports need 1.0. Every difference between the two releases that modefsm
meets is answered here, and only here: the rest of :mod:`modefsm.protocol` imports the
names below instead of probing the SDK itself.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec

import acp.meta

from modefsm.errors import ModefsmError

__all__ = ["SDK_VERSION", "V2_SDK", "SdkFeatureError", "require_v2"]

try:
    SDK_VERSION: str = version("agent-client-protocol")
    """The installed ACP SDK's release (``agent-client-protocol``), such as ``"0.12.1"``."""
except PackageNotFoundError:  # pragma: no cover - an SDK on the path, not installed
    SDK_VERSION = "unknown"

V2_SDK = "1.0.0rc3"
"""The SDK release ACP v2 and the HTTP transport need (the ``v2`` and ``http`` extras)."""

HAS_V2: bool = find_spec("acp.experimental") is not None
"""Whether the installed SDK has ACP v2 (``acp.experimental.v2``, SDK 1.0)."""

CANCEL_REQUEST = "$/cancel_request"
"""The JSON-RPC notification that cancels a request (ACP's protocol-level cancellation)."""

ROUTES_CANCEL_REQUEST: bool = "cancel_request" in getattr(acp.meta, "PROTOCOL_METHODS", {})
"""Whether the SDK implements :data:`CANCEL_REQUEST` (1.0): an incoming one cancels the
handler of the request it names (answered ``-32800``), and an outgoing request whose wait
is cancelled (a ``session/request_permission`` when its turn ends) is withdrawn with one.
SDK 0.12 does neither: the stdio transport then drops an incoming one (after cancelling a
request it still holds), and a turn that ends while its permission request is open ends
without withdrawing it."""


class SdkFeatureError(ModefsmError, ImportError):
    """A feature the installed ACP SDK release does not have (ACP v2, HTTP/WebSocket).

    The message is one line: the feature, the SDK release it needs, the one installed, and
    the extra to install. Raised by the command line (exit status 2) and by importing
    :mod:`modefsm.protocol.v2` (hence an ``ImportError`` too).

    Args:
        feature: what was asked for, such as ``"ACP v2"``.
        extra: the modefsm extra that brings an SDK with it (``"v2"``, ``"http"``).
    """

    def __init__(self, feature: str, extra: str) -> None:
        self.feature = feature
        self.extra = extra
        super().__init__(
            f"{feature} needs agent-client-protocol>={V2_SDK} (installed: {SDK_VERSION}): "
            f"pip install 'modefsm[{extra}]'"
        )


def require_v2(feature: str, extra: str = "v2") -> None:
    """Refuse *feature* at once when the installed SDK has no ACP v2.

    Raises:
        SdkFeatureError: the SDK is older than :data:`V2_SDK`.
    """
    if not HAS_V2:
        raise SdkFeatureError(feature, extra)
