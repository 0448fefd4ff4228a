"""Logs read back: records checked against their spec, chains verified, final modes.

The replayer (``_replayer``: a fast path and the full checks, which must agree), the
merge of several workers' files (``_merge``), the tool decisions' ledger (``_tools``)
and the reports (``_report``).

Exports: ``replay`` and ``Replayer``, ``ReplayReport``, ``Violation`` and
``ViolationKind``, ``ChainSummary``, ``SessionHistory``, the reports (``TableReport``,
``JsonReport``, ``verdict``), ``ToolLedger``, ``iter_records``, and the restore points
read from logs (``LogRestore``, ``RestorePoint``, ``last_points``).

May import: ``errors``, ``spec``, ``log``, ``store``.
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
