"""modefsm.store: see the README's Architecture section."""

from modefsm.store._interface import SessionMoved, SessionStore, StoreBusy, open_store

__all__ = ["SessionMoved", "SessionStore", "StoreBusy", "open_store"]
