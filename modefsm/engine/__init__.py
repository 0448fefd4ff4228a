"""Live sessions: each change checked, written before it takes effect, then announced.

The stage that holds every session's mode: one ``transitions`` machine per engine
(``_machine``, its only importer), the change pipeline (policy, hooks, write-ahead
through the store, commit, notifications in commit order), live sessions as rows of plain
values with ``Session`` as their view (``_rows``) and the ACP-free views of each
mode (``_views``) and events (``_events``) a protocol renders. No ACP SDK.

Exports: ``ModeEngine``, ``Session``, ``ModeChange``, ``SwitchOffer`` and
``OfferedOption``, the sink's events (``ModeChanged``, ``NotificationSink``,
``notification_kind``), the views (``ModeView``, ``OptionView``, ``ModeInfo``,
``Choice``, ``build_views``), the machine (``ModeMachine``, ``state_name``,
``mode_of``, ``MODEL_ATTRIBUTE``, ``MATERIALIZED_MAX``) and the bound of records
written after their callback returned (``MAX_BACKLOG``).

May import: ``errors``, ``spec``, ``log``, ``store``.
"""

from modefsm.engine._backlog import MAX_BACKLOG
from modefsm.engine._engine import (
    ModeEngine,
    NotificationSink,
    Session,
    notification_kind,
)
from modefsm.engine._events import ConfigChanged, ModeChange, ModeChanged
from modefsm.engine._machine import (
    MATERIALIZED_MAX,
    MODEL_ATTRIBUTE,
    ModeMachine,
    mode_of,
    state_name,
)
from modefsm.engine._offers import OfferedOption, SwitchOffer, SwitchOffers, SwitchResult
from modefsm.engine._options import HostOption, HostOptions, OptionChange
from modefsm.engine._tools import (
    ASK_OPTIONS,
    ENDED_KEPT,
    MAX_OPEN_ASKS,
    AskOption,
    ToolCall,
    ToolDecision,
)
from modefsm.engine._views import Choice, ModeInfo, ModeView, OptionView, build_views

__all__ = [
    "ASK_OPTIONS",
    "ENDED_KEPT",
    "MATERIALIZED_MAX",
    "MAX_BACKLOG",
    "MAX_OPEN_ASKS",
    "MODEL_ATTRIBUTE",
    "AskOption",
    "Choice",
    "ConfigChanged",
    "HostOption",
    "HostOptions",
    "ModeChange",
    "ModeChanged",
    "ModeEngine",
    "ModeInfo",
    "ModeMachine",
    "ModeView",
    "NotificationSink",
    "OfferedOption",
    "OptionChange",
    "OptionView",
    "Session",
    "SwitchOffer",
    "SwitchOffers",
    "SwitchResult",
    "ToolCall",
    "ToolDecision",
    "build_views",
    "mode_of",
    "notification_kind",
    "state_name",
]
