"""modefsm.protocol.v1: the ACP v1 agent adapter.

``ModeAgent`` serves the session methods of ACP v1 over the engine; ``_switch`` is the
``switch_mode`` permission flow; ``_render`` turns the engine's views and events into
the SDK's v1 models.

Exports: ``ModeAgent``, ``SwitchResult``, ``propose_switch``, ``offered_options``, the
renderers (``config_options``, ``mode_state``, ``session_updates``), ``CLOSE_WAIT`` and
``MAX_CWD_CHARS``.

May import: ``errors``, ``spec``, ``log``, ``store``, ``engine``, and ``protocol`` (its
JSON-RPC errors, the transports and the session/list pages).
"""

from modefsm.protocol.v1._agent import (
    CLOSE_WAIT,
    MAX_CWD_CHARS,
    ModeAgent,
)
from modefsm.protocol.v1._render import config_options, mode_state, session_updates
from modefsm.protocol.v1._switch import propose_switch
from modefsm.protocol.v1._tools import ToolResult, run_tool

__all__ = [
    "CLOSE_WAIT",
    "MAX_CWD_CHARS",
    "ModeAgent",
    "ToolResult",
    "config_options",
    "mode_state",
    "propose_switch",
    "run_tool",
    "session_updates",
]
