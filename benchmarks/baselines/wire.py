"""``session/update`` notifications serialized to bytes exactly as the ACP SDK sends them.

The SDK's ``AgentSideConnection.session_update`` wraps the update in a
``SessionNotification`` and sends it with ``notify_model`` -> ``serialize_params``
(``model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)``)
-> ``Connection.send_notification`` (``{"jsonrpc", "method", "params"}``) ->
``MessageSender.send`` (``json.dumps(payload, separators=(",", ":")) + "\\n"``, UTF-8).
:class:`NullWire` does the same steps and drops the bytes, so a benchmark pays for the
serialization that every notification costs on the real wire, and nothing else.
"""

from __future__ import annotations

import json
from typing import Any

from acp.meta import CLIENT_METHODS
from acp.schema import SessionNotification
from acp.utils import serialize_params

__all__ = ["NullWire", "notification_bytes"]

_METHOD = CLIENT_METHODS["session_update"]


def notification_bytes(session_id: str, update: Any) -> bytes:
    """The bytes the SDK writes to stdout for ``conn.session_update(session_id, update)``."""
    params = serialize_params(
        SessionNotification(session_id=session_id, update=update, field_meta=None)
    )
    payload = {"jsonrpc": "2.0", "method": _METHOD, "params": params}
    return (json.dumps(payload, separators=(",", ":")) + "\n").encode("utf-8")


class NullWire:
    """An async notification sink that serializes like the SDK and discards the bytes.

    Attributes:
        sent: notifications serialized.
        size: bytes serialized.
    """

    def __init__(self) -> None:
        """Start with nothing sent."""
        self.sent = 0
        self.size = 0

    async def __call__(self, session_id: str, update: Any) -> None:
        """Serialize one ``session/update``, as ``conn.session_update`` would."""
        self.sent += 1
        self.size += len(notification_bytes(session_id, update))
