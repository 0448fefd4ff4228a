"""A host with a config option of its own (a model selector) beside modefsm's mode option.

Every ``configOptions`` list the agent sends is complete, as ACP requires: modefsm's
``mode`` option and the host's ``model`` option, in each answer and each
``config_option_update``. ``python examples/host_config_option.py LOG`` serves it on stdio.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from acp import RequestError
from acp.schema import (
    ConfigOptionUpdate,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SetSessionConfigOptionResponse,
)

from modefsm import LogStore, ModeAgent, TransitionLog, preset, run_agent
from modefsm.protocol import config_options

MODELS = ("fast", "smart")


class Agent(ModeAgent):
    """:class:`~modefsm.ModeAgent` with a ``model`` option per session (default ``fast``)."""

    def __init__(self, log: TransitionLog) -> None:
        """Serve the seed preset, logging to *log*."""
        self.models: dict[str, str] = {}
        super().__init__(
            preset("seed"),
            store=LogStore(log),
            unstable=True,
            other_config_options=self.model_option,
        )

    def model_option(self, session_id: str) -> list[SessionConfigOptionSelect]:
        """The host's own options of *session_id*: the ``model`` selector."""
        choices = [SessionConfigSelectOption(value=m, name=m.title()) for m in MODELS]
        current = self.models.get(session_id, MODELS[0])
        return [
            SessionConfigOptionSelect(
                id="model",
                name="Model",
                category="model",
                type="select",
                current_value=current,
                options=choices,
            )
        ]

    async def set_config_option(
        self,
        config_id: str,
        session_id: str,
        value: str | bool,  # noqa: FBT001 - the SDK passes it by keyword
        **kwargs: Any,
    ) -> SetSessionConfigOptionResponse:
        """``session/set_config_option``: the host's ``model``, or modefsm's options."""
        if config_id != "model":
            return await super().set_config_option(config_id, session_id, value, **kwargs)
        self.session(session_id)  # -32002 for a session this connection does not hold
        if value not in MODELS:
            raise RequestError.invalid_params({"field": "value", "valid": list(MODELS)})
        self.models[session_id] = str(value)
        # the complete list, as ACP v1 models: modefsm's mode option, then the host's own
        options = config_options(self.engine.config_options(session_id))
        update = ConfigOptionUpdate(session_update="config_option_update", config_options=options)
        await self.engine.notify(session_id, update)
        return SetSessionConfigOptionResponse(config_options=options)


def main(log_path: str) -> None:
    """Serve :class:`Agent` on stdin and stdout, logging to *log_path*."""
    log = TransitionLog.to_file(log_path)
    try:
        asyncio.run(run_agent(Agent(log)))
    finally:
        log.close()


if __name__ == "__main__":
    main(sys.argv[1])
