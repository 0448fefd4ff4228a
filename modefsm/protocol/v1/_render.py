"""The engine's data as ACP v1 wire models (``acp.schema``).

The engine speaks plain data (:mod:`modefsm.engine`'s views and events); this module is
the one place that turns it into the SDK's v1 models: a session's ``modes``
(``SessionModeState``), its ``configOptions`` and the ``session/update`` notifications of a
:class:`~modefsm.engine.ModeChanged` (``current_mode_update`` then
``config_option_update``) and of a :class:`~modefsm.engine.ConfigChanged`
(``config_option_update``). Anything else the engine hands over (a host's own update)
passes through as it was given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from acp.schema import (
    ConfigOptionUpdate,
    CurrentModeUpdate,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
)

from modefsm.engine import ConfigChanged, ModeChanged, ModeView, OptionView

__all__ = ["config_options", "mode_state", "session_updates"]

_CACHE_LIMIT = 4096
"""How many distinct option views keep their rendered model (the spec's modes use one each)."""

_options: dict[OptionView, SessionConfigOptionSelect] = {}
_updates: dict[tuple[OptionView, ...], ConfigOptionUpdate] = {}
_mode_updates: dict[str, CurrentModeUpdate] = {}


def _described(description: str | None) -> dict[str, str]:
    """``description`` only when there is one: the wire carries no ``null`` for it."""
    return {} if description is None else {"description": description}


def _option(option: OptionView) -> SessionConfigOptionSelect:
    """The v1 model of *option* (kept: an option view never changes)."""
    model = _options.get(option)
    if model is None:
        model = SessionConfigOptionSelect(
            id=option.id,
            name=option.name,
            **_described(option.description),
            **({} if option.category is None else {"category": option.category}),
            type="select",
            current_value=option.current_value,
            options=[
                SessionConfigSelectOption(value=c.value, name=c.name, **_described(c.description))
                for c in option.options
            ],
        )
        if len(_options) < _CACHE_LIMIT:
            _options[option] = model
    return model


def config_options(options: Iterable[OptionView]) -> list[Any]:
    """A session's complete v1 ``configOptions`` (``SessionConfigOptionSelect`` models).

    The models are deep copies: a response may be changed by its receiver.
    """
    return [_option(o).model_copy(deep=True) for o in options]


def mode_state(view: ModeView) -> SessionModeState:
    """The v1 ``modes`` (``SessionModeState``) of a session whose mode is *view*'s."""
    return SessionModeState(
        current_mode_id=view.mode_id,
        available_modes=[
            SessionMode(id=m.id, name=m.name, description=m.description)
            for m in view.available_modes
        ],
    )


def _options_update(options: tuple[OptionView, ...]) -> ConfigOptionUpdate:
    """The ``config_option_update`` carrying *options* (kept: views never change)."""
    update = _updates.get(options)
    if update is None:
        update = ConfigOptionUpdate(
            session_update="config_option_update",
            config_options=[_option(o) for o in options],
        )
        if len(_updates) < _CACHE_LIMIT:
            _updates[options] = update
    return update


def session_updates(event: object) -> list[Any]:
    """The v1 ``session/update`` updates that carry *event*, in order.

    A :class:`~modefsm.engine.ModeChanged` is ``current_mode_update`` then
    ``config_option_update`` (the complete list); a :class:`~modefsm.engine.ConfigChanged`
    is that ``config_option_update`` alone; anything else is a host's own update, passed
    through.
    """
    if isinstance(event, ConfigChanged):
        return [_options_update(event.config_options)]
    if isinstance(event, ModeChanged):
        mode_update = _mode_updates.get(event.mode_id)
        if mode_update is None:
            mode_update = CurrentModeUpdate(
                session_update="current_mode_update", current_mode_id=event.mode_id
            )
            if len(_mode_updates) < _CACHE_LIMIT:
                _mode_updates[event.mode_id] = mode_update
        return [mode_update, _options_update(event.config_options)]
    return [event]
