"""The ACP views of a session's mode, built with the SDK's own wire models.

A session's mode is one value; ACP shows it twice: as ``modes`` (``SessionModeState``,
with ``current_mode_update`` notifications) and as the ``category: "mode"`` config option
(``configOptions``, with ``config_option_update`` notifications). Both views of a mode
never change for a given spec, so they are built once per mode and shared.

What each view offers:

- the config option's ``options`` are the modes a client may select from the current
  mode: the current mode itself and the ones its ``client_changes`` allow, in spec order
  (every mode when the spec does not restrict the current one). Clients replace their
  list on every ``config_option_update``, which every change sends, so the choices shown
  are always ones ``session/set_config_option`` accepts;
- ``modes.availableModes`` is the spec's whole catalogue: v1 has no notification that
  updates it (``current_mode_update`` carries only the id), so a list filtered for one
  mode would be wrong after the next change. A mode the policy refuses from the current
  one is answered ``-32602`` with ``data.valid`` listing the modes allowed from there.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from acp.schema import (
    ConfigOptionUpdate,
    CurrentModeUpdate,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
)

from modefsm.spec._model import ModeSpec

__all__ = ["ModeView", "build_views"]


@dataclass(frozen=True, slots=True)
class ModeView:
    """Everything ACP says about a session whose current mode is :attr:`mode_id`.

    Attributes:
        mode_id: the mode.
        modes: ``SessionModeState`` for ``session/new``/``load``/``resume`` responses.
        config_options: the complete ``configOptions`` list (one select option, category
            mode, whose ``options`` are the modes selectable from :attr:`mode_id`).
        current_mode_update: the ``current_mode_update`` session update.
        config_option_update: the ``config_option_update`` session update (complete list).
    """

    mode_id: str
    modes: SessionModeState
    config_options: list[SessionConfigOptionSelect]
    current_mode_update: CurrentModeUpdate
    config_option_update: ConfigOptionUpdate


def build_views(spec: ModeSpec) -> Mapping[str, ModeView]:
    """The :class:`ModeView` of every mode of *spec*, keyed by mode id.

    The views share their lists; treat them as read-only. Each view is built the first
    time it is asked for and kept, so the time to build the mapping is linear in the
    number of modes whatever the spec, and only the modes sessions use cost a view.
    """
    return _Views(spec)


class _Views(Mapping[str, ModeView]):
    """The views of a spec's modes, each made when first asked for."""

    def __init__(self, spec: ModeSpec) -> None:
        self._spec = spec
        self._views: dict[str, ModeView] = {}
        self._available = [
            SessionMode(id=m.id, name=m.name, description=m.description) for m in spec.modes
        ]
        self._choices = [
            SessionConfigSelectOption(value=m.id, name=m.name, description=m.description)
            for m in spec.modes
        ]
        # validated once, with the lists; each view then shares them without validating
        # them again (model_construct), which keeps a view's cost independent of the spec
        self._template = SessionConfigOptionSelect(
            id=spec.config_option_id,
            name=spec.config_option_name,
            category="mode",
            type="select",
            current_value=spec.initial,
            options=self._choices,
        ).model_dump(include={"id", "name", "category", "type"})
        SessionModeState(current_mode_id=spec.initial, available_modes=self._available)

    def __getitem__(self, mode_id: str) -> ModeView:
        view = self._views.get(mode_id)
        if view is None:
            if not self._spec.has_mode(mode_id):
                raise KeyError(mode_id)
            view = self._views[mode_id] = self._make(mode_id)
        return view

    def __iter__(self) -> Iterator[str]:
        return iter(self._spec.mode_ids)

    def __len__(self) -> int:
        return len(self._spec.mode_ids)

    def _make(self, mode_id: str) -> ModeView:
        choices = self._choices
        if self._spec.client_restricted(mode_id):  # the modes selectable from mode_id
            selectable = {mode_id, *self._spec.client_targets(mode_id)}
            choices = [choice for choice in choices if choice.value in selectable]
        option = SessionConfigOptionSelect.model_construct(
            **self._template, current_value=mode_id, options=choices
        )
        return ModeView(
            mode_id=mode_id,
            modes=SessionModeState.model_construct(
                current_mode_id=mode_id, available_modes=self._available
            ),
            config_options=[option],
            current_mode_update=CurrentModeUpdate(
                session_update="current_mode_update", current_mode_id=mode_id
            ),
            config_option_update=ConfigOptionUpdate(
                session_update="config_option_update", config_options=[option]
            ),
        )
