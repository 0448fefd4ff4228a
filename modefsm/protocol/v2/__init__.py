"""modefsm.protocol.v2: the ACP v2 (Preview) agent and its renderers of the engine's data.

Loaded only when a client negotiates v2 (the SDK's v2 schema doubles start-up).

Exports: ``ModeAgentV2``, ``V2_PROTOCOL_VERSION`` and the v2 renderers
(``config_options``, ``session_updates``).

May import: ``errors``, ``log``, ``engine``, and ``protocol`` (its JSON-RPC errors, the v1
agent and the session/list pages).

Needs the ACP SDK 1.0 (``acp.experimental.v2``): on SDK 0.12 importing it raises
:class:`~modefsm.protocol.SdkFeatureError` (an ``ImportError``) naming the release to install.
"""

from modefsm.protocol._sdk import require_v2

require_v2("modefsm.protocol.v2 (ACP v2)")  # one line, not a ModuleNotFoundError below

from modefsm.protocol.v2._agent import V2_PROTOCOL_VERSION, ModeAgentV2  # noqa: E402
from modefsm.protocol.v2._render import config_options, session_updates  # noqa: E402

__all__ = ["V2_PROTOCOL_VERSION", "ModeAgentV2", "config_options", "session_updates"]
