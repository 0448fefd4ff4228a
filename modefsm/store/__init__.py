"""modefsm.store: see the README's Architecture section."""

from modefsm.store._file import FileStore
from modefsm.store._interface import (
    SessionMoved,
    SessionStore,
    StoreBusy,
    StoreInDoubt,
    open_store,
)

__all__ = ["FileStore", "SessionMoved", "SessionStore", "StoreBusy", "StoreInDoubt", "open_store"]
