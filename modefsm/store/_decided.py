"""The decided tool calls a store remembers per session, for ``DecidesOnce``.

``sessionId -> call_key(toolCallId) -> outcome``: a ``toolCallId`` of any length is kept as a
16-byte digest, and a store may bound how many it keeps per session.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["DECIDED_KEPT"]

DECIDED_KEPT = 4096
"""The most decided ``toolCallId`` values a :class:`~modefsm.store.FileStore` keeps in memory
per held session for :meth:`~modefsm.store.DecidesOnce.note_once_async`; past it, the oldest
are dropped and the store reads the session's earlier decisions from the file (off the event
loop) before it answers."""

_CALL_KEY_BYTES = 16
"""The size of the digest a decided ``toolCallId`` is remembered by (BLAKE2b), whatever
its length."""


def call_key(tool_call_id: str) -> bytes:
    """The fixed-size key a decided ACP ``toolCallId`` (as logged: whole) is remembered by."""
    data = tool_call_id.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=_CALL_KEY_BYTES).digest()


def remember_decision(
    decided: dict[str, dict[bytes, str | None]], fields: dict[str, Any], kept: int | None
) -> bool:
    """Note the decision *fields* in *decided* (``sessionId -> call_key(toolCallId) -> outcome``).

    At most *kept* calls per session (the oldest dropped; ``None``: every one).

    Returns:
        Whether a call was dropped to keep the bound.
    """
    calls = decided.setdefault(fields["session_id"], {})
    call_id = fields.get("tool_call_id")
    if not isinstance(call_id, str):
        return False
    key = call_key(call_id)
    calls.pop(key, None)  # the last decision of the call, and now the newest
    calls[key] = fields.get("outcome")
    if kept is not None and len(calls) > kept:
        del calls[next(iter(calls))]
        return True
    return False
