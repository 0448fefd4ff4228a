"""Logs read back: records checked against their spec, chains verified, final modes.

Where it sits among the stages: the documentation's Architecture page.
"""

from modefsm.replay._replayer import (
    ChainSummary,
    LogRestore,
    Note,
    Replayer,
    ReplayReport,
    RestorePoint,
    SessionHistory,
    Violation,
    ViolationKind,
    iter_records,
    last_points,
    replay,
)
from modefsm.replay._report import HELD_ROWS, JsonReport, TableReport, verdict
from modefsm.replay._tools import ToolLedger, ToolTally

__all__ = [
    "HELD_ROWS",
    "ChainSummary",
    "JsonReport",
    "LogRestore",
    "Note",
    "ReplayReport",
    "Replayer",
    "RestorePoint",
    "SessionHistory",
    "TableReport",
    "ToolLedger",
    "ToolTally",
    "Violation",
    "ViolationKind",
    "iter_records",
    "last_points",
    "replay",
    "verdict",
]
