"""The session store that processes share, the one way the engine writes and restores.

Where it sits among the stages: the documentation's Architecture page.

Exports the seam (:mod:`modefsm.store._interface`: ``SessionStore``, ``RestorePoint``,
``SessionMoved``, ``StoreBusy``, ``StoreInDoubt``, what ``session/list`` reads) and the
in-memory store ``MemoryStore``, loaded with the package; the backends and the restore
index (``FileStore``, ``open_store``, ``RestoreIndex``, ``LogRestore``, ...) load on first
use, so that an engine loads no SQLite and no log reader until it opens a store. Imports
``errors`` and ``log`` only.
"""

from typing import TYPE_CHECKING

from modefsm._lazy import lazy_exports
from modefsm.store._interface import (
    EXPORT_EVENT,
    ListAfter,
    ListedSession,
    RestorePoint,
    SessionMoved,
    SessionStore,
    StoreBusy,
    StoreInDoubt,
)
from modefsm.store._memory import MemoryStore

if TYPE_CHECKING:
    from modefsm.store._file import FileStore
    from modefsm.store._open import export_store, open_store
    from modefsm.store._restore import (
        EVENT_INDEX_MISMATCH,
        MAX_PENDING,
        RETRY_SECONDS,
        LogRestore,
        RestoreIndex,
        check_index_path,
        is_index,
        last_points,
    )

__all__ = [
    "EVENT_INDEX_MISMATCH",
    "EXPORT_EVENT",
    "MAX_PENDING",
    "RETRY_SECONDS",
    "FileStore",
    "ListAfter",
    "ListedSession",
    "LogRestore",
    "MemoryStore",
    "RestoreIndex",
    "RestorePoint",
    "SessionMoved",
    "SessionStore",
    "StoreBusy",
    "StoreInDoubt",
    "check_index_path",
    "export_store",
    "is_index",
    "last_points",
    "open_store",
]

_LAZY = {
    "FileStore": "modefsm.store._file",
    "export_store": "modefsm.store._open",
    "open_store": "modefsm.store._open",
    **dict.fromkeys(
        (
            "EVENT_INDEX_MISMATCH",
            "MAX_PENDING",
            "RETRY_SECONDS",
            "LogRestore",
            "RestoreIndex",
            "check_index_path",
            "is_index",
            "last_points",
        ),
        "modefsm.store._restore",
    ),
}
"""The names loaded on first use, and their modules."""

__getattr__ = lazy_exports(__name__, _LAZY)
