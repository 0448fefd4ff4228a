"""The presets shipped with modefsm, by name (a leaf: listing them loads no model).

:func:`preset` loads the spec's models (:mod:`modefsm.spec._model`) when it is first
called, not when it is imported: ``from modefsm import ModeEngine, preset`` builds no
pydantic model.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from modefsm.errors import SpecError, SpecProblem

if TYPE_CHECKING:
    from modefsm.spec._model import ModeSpec

__all__ = ["preset", "preset_names"]


def preset_names() -> tuple[str, ...]:
    """The names of the presets shipped with modefsm, sorted."""
    files = resources.files("modefsm.spec.presets").iterdir()
    return tuple(sorted(f.name.removesuffix(".toml") for f in files if f.name.endswith(".toml")))


def preset(name: str) -> ModeSpec:
    """Load the shipped preset *name* (see :func:`preset_names`).

    Raises:
        SpecError: if there is no such preset.
    """
    import tomllib  # noqa: PLC0415 - with the models, on the first call

    from modefsm.spec._model import ModeSpec  # noqa: PLC0415 - the models, on the first call

    if name not in preset_names():
        choices = ", ".join(preset_names())
        raise SpecError([SpecProblem("", f"unknown preset {name!r}; presets: {choices}")])
    text = (
        resources.files("modefsm.spec.presets").joinpath(f"{name}.toml").read_text(encoding="utf-8")
    )
    return ModeSpec.from_data(tomllib.loads(text), f"preset {name}")
