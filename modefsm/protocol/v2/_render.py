"""The engine's data as ACP v2 (Preview) wire models (``acp.experimental.v2.schema``).

Built from the engine's views directly: a session's ``configOptions`` (the mode option as
``{configId, category: "mode", type: "select", currentValue, options}``, then the host's
own entries) and the ``config_option_update`` of a :class:`~modefsm.engine.ModeChanged`
(v2 has no ``modes`` and no ``current_mode_update``). A host's entry given as a v1 model
is carried over field for field (``id`` becomes ``configId``); a v2 one is passed as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from acp import schema as v1
from acp.experimental.v2 import schema as v2

from modefsm.engine import ModeChanged, OptionView

__all__ = ["config_options", "session_updates"]

_CACHE_LIMIT = 4096
"""How many distinct option views keep their rendered model (the spec's modes use one each)."""

_options: dict[OptionView, v2.SelectSessionConfigOption] = {}
_updates: dict[tuple[Any, ...], v2.ConfigOptionUpdate] = {}


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


def _host_option(option: Any) -> Any:
    """The v2 model of a host's ``configOptions`` entry (``id`` becomes ``configId``)."""
    if isinstance(option, v1.SessionConfigOptionSelect):
        data = option.model_dump(mode="json", by_alias=True, exclude_none=True)
        data["configId"] = data.pop("id")
        return v2.SelectSessionConfigOption.model_validate(data)
    if isinstance(option, v1.SessionConfigOptionBoolean):
        data = option.model_dump(mode="json", by_alias=True, exclude_none=True)
        data["configId"] = data.pop("id")
        return v2.BooleanSessionConfigOption.model_validate(data)
    return option  # already a v2 model


def _render(options: Iterable[object]) -> list[Any]:
    return [_option(o) if isinstance(o, OptionView) else _host_option(o) for o in options]


def config_options(options: Iterable[object]) -> list[Any]:
    """A session's complete v2 ``configOptions`` (deep copies: a receiver may change them)."""
    return [option.model_copy(deep=True) for option in _render(options)]


def session_updates(event: object) -> list[Any]:
    """The v2 ``session/update`` updates that carry *event*, in order.

    A :class:`~modefsm.engine.ModeChanged` is one ``config_option_update`` with the
    complete list; anything else is a host's own update, passed through.
    """
    if not isinstance(event, ModeChanged):
        return [event]
    options = event.config_options
    update = _updates.get(options) if all(isinstance(o, OptionView) for o in options) else None
    if update is None:
        update = v2.ConfigOptionUpdate(config_options=_render(options))
        if len(_updates) < _CACHE_LIMIT and all(isinstance(o, OptionView) for o in options):
            _updates[options] = update
    return [update]
