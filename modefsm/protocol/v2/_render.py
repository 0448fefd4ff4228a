"""The engine's data as ACP v2 (Preview) wire models (``acp.experimental.v2.schema``).

Built from the engine's views directly: a session's ``configOptions`` (the mode option as
``{configId, category: "mode", type: "select", currentValue, options}``, then the host's
options) and the ``config_option_update`` of a :class:`~modefsm.engine.ModeChanged` or a
:class:`~modefsm.engine.ConfigChanged` (v2 has no ``modes`` and no
``current_mode_update``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from acp.experimental.v2 import schema as v2

from modefsm.engine import ConfigChanged, ModeChanged, OptionView

__all__ = ["config_options", "session_updates"]

_CACHE_LIMIT = 4096
"""How many distinct option views keep their rendered model (the spec's modes use one each)."""

_options: dict[OptionView, v2.SelectSessionConfigOption] = {}
_updates: dict[tuple[OptionView, ...], v2.ConfigOptionUpdate] = {}


def _described(description: str | None) -> dict[str, str]:
    """``description`` only when there is one: the wire carries no ``null`` for it."""
    return {} if description is None else {"description": description}


def _option(option: OptionView) -> v2.SelectSessionConfigOption:
    """The v2 model of *option* (kept: an option view never changes)."""
    model = _options.get(option)
    if model is None:
        model = v2.SelectSessionConfigOption(
            config_id=option.id,
            name=option.name,
            **_described(option.description),
            **({} if option.category is None else {"category": option.category}),
            type="select",
            current_value=option.current_value,
            options=[
                v2.SessionConfigSelectOption(
                    value=c.value, name=c.name, **_described(c.description)
                )
                for c in option.options
            ],
        )
        if len(_options) < _CACHE_LIMIT:
            _options[option] = model
    return model


def config_options(options: Iterable[OptionView]) -> list[Any]:
    """A session's complete v2 ``configOptions`` (deep copies: a receiver may change them)."""
    return [_option(o).model_copy(deep=True) for o in options]


def session_updates(event: object) -> list[Any]:
    """The v2 ``session/update`` updates that carry *event*, in order.

    A :class:`~modefsm.engine.ModeChanged` or a :class:`~modefsm.engine.ConfigChanged` is
    one ``config_option_update`` with the complete list; anything else is a host's own
    update, passed through.
    """
    if not isinstance(event, ModeChanged | ConfigChanged):
        return [event]
    options = event.config_options
    update = _updates.get(options)
    if update is None:
        update = v2.ConfigOptionUpdate(config_options=[_option(o) for o in options])
        if len(_updates) < _CACHE_LIMIT:
            _updates[options] = update
    return [update]
