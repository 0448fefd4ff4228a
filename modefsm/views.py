"""The ACP views of a session's mode, built with the SDK's own wire models.

A session's mode is one value; ACP shows it twice: as ``modes`` (``SessionModeState``,
with ``current_mode_update`` notifications) and as the ``category: "mode"`` config option
(``configOptions``, with ``config_option_update`` notifications). Both views of a mode
never change for a given spec, so they are built once per mode and shared.
"""

from __future__ import annotations

from dataclasses import dataclass

from acp.schema import (
    ConfigOptionUpdate,
    CurrentModeUpdate,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
)

from modefsm.spec import ModeSpec

__all__ = ["ModeView", "build_views"]


@dataclass(frozen=True, slots=True)
class ModeView:
    """Everything ACP says about a session whose current mode is :attr:`mode_id`.

    Attributes:
        mode_id: the mode.
        modes: ``SessionModeState`` for ``session/new``/``load``/``resume`` responses.
        config_options: the complete ``configOptions`` list (one select option, category mode).
        current_mode_update: the ``current_mode_update`` session update.
        config_option_update: the ``config_option_update`` session update (complete list).
    """

    mode_id: str
    modes: SessionModeState
    config_options: list[SessionConfigOptionSelect]
    current_mode_update: CurrentModeUpdate
    config_option_update: ConfigOptionUpdate


def build_views(spec: ModeSpec) -> dict[str, ModeView]:
    """Build the :class:`ModeView` of every mode of *spec*, keyed by mode id.

    The views share their lists; treat them as read-only. The models holding the shared
    lists are built without validating the lists again (their items are validated models
    already), so the time is linear in the number of modes.
    """
    available = [SessionMode(id=m.id, name=m.name, description=m.description) for m in spec.modes]
    choices = [
        SessionConfigSelectOption(value=m.id, name=m.name, description=m.description)
        for m in spec.modes
    ]
    # validated once, with the lists, so that a mistake here still fails loudly
    template = SessionConfigOptionSelect(
        id=spec.config_option_id,
        name=spec.config_option_name,
        category="mode",
        type="select",
        current_value=spec.initial,
        options=choices,
    ).model_dump(include={"id", "name", "category", "type"})
    SessionModeState(current_mode_id=spec.initial, available_modes=available)
    views = {}
    for mode_id in spec.mode_ids:
        option = SessionConfigOptionSelect.model_construct(
            **template, current_value=mode_id, options=choices
        )
        views[mode_id] = ModeView(
            mode_id=mode_id,
            modes=SessionModeState.model_construct(
                current_mode_id=mode_id, available_modes=available
            ),
            config_options=[option],
            current_mode_update=CurrentModeUpdate(
                session_update="current_mode_update", current_mode_id=mode_id
            ),
            config_option_update=ConfigOptionUpdate(
                session_update="config_option_update", config_options=[option]
            ),
        )
    return views
