"""Every frame an agent wrote, checked against the ACP v1 or v2 JSON schema of the TS SDK 2.4.

``tests/frame_tap/sitecustomize.py`` records, in each `modefsm serve` process the suite
starts, every frame its transports write and every request they admit, per connection.
:func:`problems` reads those records: a connection's version is the one its
``initialize`` answer names (v1 until then), and each frame is validated with
``jsonschema`` against that version's schema (``schema/v1/schema.json``,
``schema/v2/schema.json`` of ``@agentclientprotocol/sdk``): a response as an
``AgentResponse``, its ``result`` as the response type of the method it answers, a
request's and a notification's ``params`` as their method's type.
"""

from __future__ import annotations

import json
from collections import deque
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

SCHEMAS = (
    Path(__file__).resolve().parent
    / "ts"
    / "node_modules"
    / "@agentclientprotocol"
    / "sdk"
    / "schema"
)


@cache
def _document(version: int) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((SCHEMAS / f"v{version}" / "schema.json").read_text())
    return document


@cache
def _validator(version: int, name: str) -> Any:
    document = _document(version)
    schema = {"$schema": document["$schema"], "$ref": f"#/$defs/{name}", "$defs": document["$defs"]}
    return jsonschema.validators.validator_for(document)(schema)


@cache
def _by_method(version: int, side: str, suffix: str) -> dict[str, str]:
    """``{method: definition}`` of the definitions of *side* whose names end with *suffix*."""
    return {
        definition["x-method"]: name
        for name, definition in _document(version)["$defs"].items()
        if definition.get("x-side") == side and name.endswith(suffix) and "x-method" in definition
    }


def available() -> bool:
    """Whether the schemas are installed (``npm ci`` in ``tests/ts``)."""
    return (SCHEMAS / "v1" / "schema.json").is_file() and (SCHEMAS / "v2" / "schema.json").is_file()


def _errors(version: int, name: str, value: Any) -> list[str]:
    found = sorted(_validator(version, name).iter_errors(value), key=lambda e: list(e.path))
    return [f"{name} (v{version}) at {list(e.path)}: {e.message[:300]}" for e in found[:3]]


def check(version: int, frame: Any, asked: str | None) -> list[str]:
    """What is wrong with *frame*, an agent's, on a connection of ACP *version*.

    *asked*: the method of the request *frame* answers, if it is an answer and known.
    """
    if not isinstance(frame, dict) or frame.get("jsonrpc") != "2.0":
        return [f"not a JSON-RPC 2.0 object: {str(frame)[:300]}"]
    method = frame.get("method")
    if method is None:
        found = _errors(version, "AgentResponse", frame)
        if "result" in frame and asked is not None:
            name = _by_method(version, "agent", "Response").get(asked)
            if name is None:
                found.append(f"an answer to {asked}, which the v{version} schema does not have")
            else:
                found += _errors(version, name, frame["result"])
        return found
    if method == "$/cancel_request":
        return _errors(version, "CancelRequestNotification", frame.get("params"))
    suffix = "Request" if "id" in frame else "Notification"
    name = _by_method(version, "client", suffix).get(method)
    if name is None:
        return [f"the agent sent {method}, which the v{version} schema does not have"]
    return _errors(version, name, frame.get("params"))


class FrameLog:
    """The records of one folder of tapped processes, read a piece at a time."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._read: dict[Path, int] = {}
        self._versions: dict[tuple[str, Any], int] = {}
        self._asked: dict[tuple[str, Any], dict[str, deque[str]]] = {}
        self.checked = 0

    def problems(self) -> list[str]:
        """What is wrong with the frames written since the last call."""
        found: list[str] = []
        for path in sorted(self.folder.glob("*.jsonl")):
            start = self._read.get(path, 0)
            data = path.read_bytes()
            end = data.rfind(b"\n") + 1
            if end <= start:
                continue
            self._read[path] = end
            for line in data[start:end].splitlines():
                found += self._record(path.stem, json.loads(line))
        return found

    def _record(self, process: str, record: dict[str, Any]) -> list[str]:
        connection = (process, record["c"])
        asked = self._asked.setdefault(connection, {})
        if "in" in record:
            frame = record["in"]
            asked.setdefault(json.dumps(frame["id"]), deque()).append(frame["method"])
            return []
        frame = record["out"]
        method = None
        if isinstance(frame, dict) and "method" not in frame and "id" in frame:
            waiting = asked.get(json.dumps(frame["id"]))
            method = waiting.popleft() if waiting else None
            result = frame.get("result")
            if method == "initialize" and isinstance(result, dict):
                self._versions[connection] = result.get("protocolVersion", 1)
        version = self._versions.get(connection, 1)
        self.checked += 1
        return [
            f"{problem}; frame: {str(frame)[:300]}" for problem in check(version, frame, method)
        ]
