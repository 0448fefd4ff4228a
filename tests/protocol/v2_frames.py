"""The ACP v2 frames of the seed preset that the v2 end-to-end tests expect, whole."""

from __future__ import annotations

from typing import Any

from modefsm import preset
from tests.conftest import mode_option

SEED = preset("seed")

V2_OPTIONS = [
    {"optionId": "code", "name": "Yes, and auto-accept all actions", "kind": "allow_always"},
    {"optionId": "ask", "name": "Yes, and manually accept actions", "kind": "allow_once"},
    {"optionId": "reject", "name": "No, stay in architect mode", "kind": "reject_once"},
]
"""The v2 permission options of the seed preset's switch from ``architect``."""


def option_v2(current: str) -> dict[str, Any]:
    """The v2 mode config option: v1's with ``configId`` for ``id``."""
    option = mode_option(SEED, current)
    option["configId"] = option.pop("id")
    return option


def text(value: str) -> list[dict[str, Any]]:
    """A tool call's content: one text block."""
    return [{"type": "content", "content": {"type": "text", "text": value}}]


class Frames:
    """``session/update`` frames as a test receives them: with ``jsonrpc`` (raw stdio
    frames) or without it (frames the SDK's observers saw, ``jsonrpc`` stripped)."""

    def __init__(self, *, jsonrpc: bool) -> None:
        self.envelope = {"jsonrpc": "2.0"} if jsonrpc else {}

    def update(self, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """A ``session/update`` of *session_id* carrying *body*."""
        params = {"sessionId": session_id, "update": body}
        return {**self.envelope, "method": "session/update", "params": params}

    def options_update(self, session_id: str, mode: str) -> dict[str, Any]:
        """The ``config_option_update`` of a change to *mode*."""
        body = {"sessionUpdate": "config_option_update", "configOptions": [option_v2(mode)]}
        return self.update(session_id, body)

    def state(self, session_id: str, name: str, **extra: Any) -> dict[str, Any]:
        """A ``state_update`` to *name* (``stopReason`` and the like in *extra*)."""
        return self.update(session_id, {"sessionUpdate": "state_update", "state": name, **extra})

    def switch_asked(
        self, session_id: str, message_id: str, call: str, request_id: Any, plan: str
    ) -> list[dict[str, Any]]:
        """A prompt of *plan* in architect, up to the switch's permission request: the
        ``user_message``, ``running``, the pending ``switch_mode`` tool call,
        ``requires_action`` and the ``session/request_permission`` (id *request_id*)."""
        call_fields = {
            "toolCallId": call,
            "title": "Ready for implementation",
            "kind": "switch_mode",
            "status": "pending",
            "content": text(plan),
        }
        user = {
            "sessionUpdate": "user_message",
            "messageId": message_id,
            "content": [{"type": "text", "text": plan}],
        }
        return [
            self.update(session_id, user),
            self.state(session_id, "running"),
            self.update(session_id, {"sessionUpdate": "tool_call_update", **call_fields}),
            self.state(session_id, "requires_action"),
            {
                **self.envelope,
                "id": request_id,
                "method": "session/request_permission",
                "params": {
                    "sessionId": session_id,
                    "title": "Ready for implementation",
                    "subject": {"type": "tool_call", "toolCall": call_fields},
                    "options": V2_OPTIONS,
                },
            },
        ]
