"""Test instrumentation: every frame a `modefsm serve` process writes, kept for schema checks.

The suite puts this folder on ``PYTHONPATH`` and names a folder in ``MODEFSM_TEST_FRAMES``
(``tests/conftest.py``); every Python process started then imports this module at
start-up. In such a process, once modefsm's transports are imported, each frame they write
(answers, notifications and requests of the agent's, and the errors that answer bad
frames) and each request they admit is appended, one JSON line each, to
``MODEFSM_TEST_FRAMES/<pid>.jsonl``: ``{"c": connection, "in"|"out": frame}``. Nothing
else changes, and without the variable nothing is done at all.
"""

import importlib.abc
import importlib.machinery
import json
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

_FOLDER = os.environ.get("MODEFSM_TEST_FRAMES")
_FD: list[int] = []


def _record(kind: str, connection: object, frame: Any) -> None:
    line = {"c": None if connection is None else id(connection), kind: frame}
    try:
        data = json.dumps(line, default=repr).encode() + b"\n"
    except (TypeError, ValueError):
        return
    os.write(_FD[0], data)


def _patch_transport(module: Any) -> None:
    ledger = module._Ledger
    admit, outgoing = ledger.admit, ledger.outgoing

    def tapped_admit(self: Any, frame: dict[str, Any]) -> Any:
        admitted = admit(self, frame)
        if admitted and "method" in frame and "id" in frame:
            _record("in", self, frame)
        return admitted

    def tapped_outgoing(self: Any, message: dict[str, Any]) -> Any:
        sent = outgoing(self, message)
        _record("out", self, sent[0])
        return sent

    ledger.admit, ledger.outgoing = tapped_admit, tapped_outgoing


def _patch_errors(module: Any) -> None:
    """The answers to refused frames: imported from here by every transport."""
    frame_refusal = module.frame_refusal

    def tapped_refusal(error: Any) -> Any:
        response = frame_refusal(error)
        _record("out", None, response)
        return response

    module.frame_refusal = tapped_refusal


def _patch_http(module: Any) -> None:
    make_error = module._error

    def tapped_error(*args: Any, **kwargs: Any) -> Any:
        response = make_error(*args, **kwargs)
        _record("out", None, json.loads(response.body))
        return response

    module._error = tapped_error


_PATCHES: dict[str, Callable[[Any], None]] = {
    "modefsm.protocol.errors": _patch_errors,
    "modefsm.protocol.transport._stdio": _patch_transport,
    "modefsm.protocol.transport._http": _patch_http,
}


class _Finder(importlib.abc.MetaPathFinder):
    """Patches modefsm's transports as they are imported."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        patch = _PATCHES.get(fullname)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        loader: Any = spec.loader if spec is not None else None
        if loader is None:
            return spec
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            patch(module)

        loader.exec_module = exec_module
        return spec


def _open(folder: str) -> int | None:
    """The process's frame file, or ``None`` for a process that may not write there
    (a test running a command as another user, which is then not tapped)."""
    try:
        return os.open(
            os.path.join(folder, f"{os.getpid()}.jsonl"),  # noqa: PTH118 - start-up
            os.O_WRONLY | os.O_CREAT | os.O_APPEND,
            0o600,
        )
    except PermissionError:
        return None


_OPENED = _open(_FOLDER) if _FOLDER else None
if _OPENED is not None:
    _FD.append(_OPENED)
    sys.meta_path.insert(0, _Finder())
