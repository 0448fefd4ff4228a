"""The session store that processes share, the one way the engine writes and restores.

Exports the seam (:mod:`modefsm.store._interface`: ``SessionStore``, ``RestorePoint``,
``SessionMoved``, ``StoreBusy``, ``StoreInDoubt``, ``DecidesOnce`` and ``AlreadyDecided``,
what ``session/list`` reads) and the in-memory store ``MemoryStore`` (with
``DECIDED_KEPT``), loaded with the package; the backends and the restore index
(``FileStore``, ``LogStore``, ``open_store``, ``export_store``, ``RestoreIndex``,
``LogRestore``, ...) load on first use, so that an engine loads no SQLite and no log
reader until it opens a store. ``PgStore`` (``modefsm.store._postgres``, psycopg) is
loaded by ``open_store("postgresql://...")``.

May import: ``errors``, ``spec`` (the bound on grants), ``log``, and ``modefsm._lazy``.
"""

from typing import TYPE_CHECKING

from modefsm._lazy import lazy_exports
from modefsm.store._decided import DECIDED_KEPT
from modefsm.store._interface import (
    EXPORT_EVENT,
    AlreadyDecided,
    DecidesOnce,
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
    from modefsm.store._log import LogStore
    from modefsm.store._open import export_store, open_store
    from modefsm.store._restore import (
        EVENT_INDEX_MISMATCH,
        MAX_PENDING,
        RETRY_SECONDS,
        LogRestore,
        RestoreIndex,
        check_index_modes,
        check_index_path,
        is_index,
        last_points,
    )

__all__ = [
    "DECIDED_KEPT",
    "EVENT_INDEX_MISMATCH",
    "EXPORT_EVENT",
    "MAX_PENDING",
    "RETRY_SECONDS",
    "AlreadyDecided",
    "DecidesOnce",
    "FileStore",
    "ListAfter",
    "ListedSession",
    "LogRestore",
    "LogStore",
    "MemoryStore",
    "RestoreIndex",
    "RestorePoint",
    "SessionMoved",
    "SessionStore",
    "StoreBusy",
    "StoreInDoubt",
    "check_index_modes",
    "check_index_path",
    "export_store",
    "is_index",
    "last_points",
    "open_store",
]

_LAZY = {
    "FileStore": "modefsm.store._file",
    "LogStore": "modefsm.store._log",
    "export_store": "modefsm.store._open",
    "open_store": "modefsm.store._open",
    **dict.fromkeys(
        (
            "EVENT_INDEX_MISMATCH",
            "MAX_PENDING",
            "RETRY_SECONDS",
            "LogRestore",
            "RestoreIndex",
            "check_index_modes",
            "check_index_path",
            "is_index",
            "last_points",
        ),
        "modefsm.store._restore",
    ),
}
"""The names loaded on first use, and their modules."""

__getattr__ = lazy_exports(__name__, _LAZY)
