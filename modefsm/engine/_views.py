"""What ACP shows of a session's mode, as plain frozen data built from the spec.

A session's mode is one value; ACP shows it twice: as ``modes`` (``SessionModeState``,
with ``current_mode_update`` notifications; v1 only) and as the ``category: "mode"``
config option (``configOptions``, with ``config_option_update`` notifications). The
engine keeps both views of each mode here, as plain data; :mod:`modefsm.protocol` renders
them as the SDK's wire models of each ACP version. Both views of a mode never change for
a given spec, so they are built once per mode and shared.

What each view offers:

- the mode option's ``options`` are the modes a client may select from the current mode:
  the current mode itself and the ones its ``client_changes`` allow, in spec order (every
  mode when the spec does not restrict the current one). Clients replace their list on
  every ``config_option_update``, which every change sends, so the choices shown are
  always ones ``session/set_config_option`` accepts;
- :attr:`ModeView.available_modes` (v1's ``modes.availableModes``) is the spec's whole
  catalogue: v1 has no notification that updates it (``current_mode_update`` carries only
  the id), so a list filtered for one mode would be wrong after the next change. A mode
  the policy refuses from the current one is answered ``-32602`` with ``data.valid``
  listing the modes allowed from there.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from modefsm.spec import ModeSpec

__all__ = ["Choice", "ModeInfo", "ModeView", "OptionView", "build_views"]


@dataclass(frozen=True, slots=True)
class Choice:
    """One value a select config option offers (ACP ``SessionConfigSelectOption``).

    Attributes:
        value: ACP ``value``: what ``session/set_config_option`` sends.
        name: ACP ``name``, shown to the user.
        description: ACP ``description``, if any.
    """

    value: str
    name: str
    description: str | None = None


@dataclass(frozen=True, slots=True)
class ModeInfo:
    """One advertised mode (ACP v1 ``SessionMode``).

    Attributes:
        id: ACP ``id`` (the mode id).
        name: ACP ``name``.
        description: ACP ``description``, if any.
    """

    id: str
    name: str
    description: str | None = None


@dataclass(frozen=True, slots=True)
class OptionView:
    """A select config option at its current value (ACP ``SessionConfigOptionSelect``).

    Attributes:
        id: ACP v1 ``id`` (v2 ``configId``).
        name: ACP ``name``.
        current_value: ACP ``currentValue``: one of :attr:`options`' values.
        options: ACP ``options``: the values a client may select now, in order.
        category: ACP ``category`` (``"mode"`` for the mode option), or ``None``.
        description: ACP ``description``, or ``None``.
    """

    id: str
    name: str
    current_value: str
    options: tuple[Choice, ...]
    category: str | None = None
    description: str | None = None


@dataclass(frozen=True, slots=True)
class ModeView:
    """Everything ACP says about a session whose current mode is :attr:`mode_id`.

    Attributes:
        mode_id: the mode (ACP ``currentModeId``, and the mode option's ``currentValue``).
        available_modes: the spec's modes, in order (ACP v1 ``availableModes``).
        mode_option: the ``category: "mode"`` config option at :attr:`mode_id`.
    """

    mode_id: str
    available_modes: tuple[ModeInfo, ...]
    mode_option: OptionView


def build_views(spec: ModeSpec) -> Mapping[str, ModeView]:
    """The :class:`ModeView` of every mode of *spec*, keyed by mode id.

    Each view is built the first time it is asked for and kept, so the time to build the
    mapping is linear in the number of modes whatever the spec, and only the modes
    sessions use cost a view. The views share their tuples.
    """
    return _Views(spec)


class _Views(Mapping[str, ModeView]):
    """The views of a spec's modes, each made when first asked for."""

    def __init__(self, spec: ModeSpec) -> None:
        self._spec = spec
        self._views: dict[str, ModeView] = {}
        self._available = tuple(ModeInfo(m.id, m.name, m.description) for m in spec.modes)
        self._choices = tuple(Choice(m.id, m.name, m.description) for m in spec.modes)

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
        spec = self._spec
        choices = self._choices
        if spec.client_restricted(mode_id):  # the modes selectable from mode_id
            selectable = {mode_id, *spec.client_targets(mode_id)}
            choices = tuple(choice for choice in choices if choice.value in selectable)
        option = OptionView(
            spec.config_option_id, spec.config_option_name, mode_id, choices, category="mode"
        )
        return ModeView(mode_id, self._available, option)
