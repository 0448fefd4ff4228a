"""modefsm.store: see the README's Architecture section."""

from modefsm.store._file import FileStore
from modefsm.store._interface import (
    SessionMoved,
    SessionStore,
    StoreBusy,
    StoreInDoubt,
    open_store,
)
from modefsm.store._restore import (
    EVENT_INDEX_MISMATCH,
    MAX_PENDING,
    RETRY_SECONDS,
    ListAfter,
    ListedSession,
    LogRestore,
    RestoreIndex,
    RestorePoint,
    check_index_path,
    is_index,
    last_points,
)

__all__ = [
    "EVENT_INDEX_MISMATCH",
    "MAX_PENDING",
    "RETRY_SECONDS",
    "FileStore",
    "ListAfter",
    "ListedSession",
    "LogRestore",
    "RestoreIndex",
    "RestorePoint",
    "SessionMoved",
    "SessionStore",
    "StoreBusy",
    "StoreInDoubt",
    "check_index_path",
    "is_index",
    "last_points",
    "open_store",
]
