"""modefsm.protocol.v2: the ACP v2 (Preview) agent and its renderers of the engine's data."""

from modefsm.protocol.v2._agent import V2_PROTOCOL_VERSION, ModeAgentV2
from modefsm.protocol.v2._render import config_options, session_updates

__all__ = ["V2_PROTOCOL_VERSION", "ModeAgentV2", "config_options", "session_updates"]
