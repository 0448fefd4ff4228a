"""The presets shipped with modefsm, by name (a leaf: listing them loads no model)."""

from importlib import resources

__all__ = ["preset_names"]


def preset_names() -> tuple[str, ...]:
    """The names of the presets shipped with modefsm, sorted."""
    files = resources.files("modefsm.spec.presets").iterdir()
    return tuple(sorted(f.name.removesuffix(".toml") for f in files if f.name.endswith(".toml")))
