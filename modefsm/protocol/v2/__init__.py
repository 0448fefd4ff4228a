"""modefsm.protocol.v2: the ACP v2 (Preview) agent."""

from modefsm.protocol.v2._agent import V2_PROTOCOL_VERSION, ModeAgentV2

__all__ = ["V2_PROTOCOL_VERSION", "ModeAgentV2"]
