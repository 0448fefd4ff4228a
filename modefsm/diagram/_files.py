"""One call per format, and the files of the shipped presets (``diagrams/``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from modefsm.diagram._build import build_diagram
from modefsm.diagram._formats import Format
from modefsm.diagram._traffic import read_traffic
from modefsm.diagram.renderers import to_dot, to_markdown, to_mermaid, to_png, to_svg
from modefsm.diagram.renderers._markdown import _md
from modefsm.errors import DiagramError
from modefsm.spec import ModeSpec, preset, preset_names

__all__ = ["render", "write_preset_diagrams"]


def render(
    spec: ModeSpec,
    fmt: Format,
    *,
    logs: Sequence[str | Path] = (),
    session_id: str | None = None,
) -> bytes:
    """Draw *spec* in format *fmt*, with the traffic of *logs* if any.

    Args:
        spec: the spec to draw.
        fmt: one of :data:`FORMATS`.
        logs: transition logs to overlay (none: the policy alone).
        session_id: a session of *logs* whose path to highlight.

    Returns:
        The file's bytes (UTF-8 text for every format but ``png``).

    Raises:
        DiagramError: ``dot`` is missing (``svg``, ``png``); the logs hold only other specs;
            *session_id* is not in them, or is given without logs.
        LogError: a log cannot be read.
    """
    if session_id is not None and not logs:
        msg = "a session to highlight needs a transition log (--log FILE)"
        raise DiagramError(msg)
    traffic = read_traffic(spec, logs, session_id=session_id) if logs else None
    diagram = build_diagram(spec, traffic)
    if fmt == "png":
        return to_png(diagram)
    if fmt == "svg":
        text = to_svg(diagram)
    elif fmt == "dot":
        text = to_dot(diagram)
    elif fmt == "md":
        text = to_markdown(diagram, spec)
    else:
        text = to_mermaid(diagram)
    return text.encode("utf-8")


def write_preset_diagrams(directory: str | Path, *, svg: bool = True) -> tuple[Path, ...]:
    """Write every shipped preset's diagrams, and an index, into *directory*.

    For each preset ``NAME``: ``NAME.mmd``, ``NAME.md`` and (with *svg*) ``NAME.svg``; then
    ``README.md`` listing them. This makes the repository's ``diagrams/`` folder, and a
    test checks that folder against it byte for byte.

    Args:
        directory: an existing directory.
        svg: also render the SVGs (this needs ``dot``).

    Returns:
        The files written, sorted.

    Raises:
        DiagramError: *svg* is true and ``dot`` is missing.
    """
    directory = Path(directory)
    files: dict[str, str] = {}
    index = [
        "# Diagrams of the shipped presets",
        "",
        "Generated from `modefsm/spec/presets/` by `modefsm.diagram.write_preset_diagrams`; a test",
        "fails when a file here differs from what the presets give. After changing a preset",
        "or the diagram code, regenerate them (the SVGs need Graphviz, and its version and",
        "fonts shape them: each SVG names the Graphviz that drew it, and the test compares",
        "SVGs only where `dot -V` shows that version):",
        "",
        "```sh",
        "python -c \"from modefsm.diagram import write_preset_diagrams; write_preset_diagrams('diagrams')\"",  # noqa: E501
        "```",
        "",
        "| Preset | Modes | Mermaid | Review page | Picture |",
        "|---|---|---|---|---|",
    ]
    for name in preset_names():
        spec = preset(name)
        diagram = build_diagram(spec)
        files[f"{name}.mmd"] = to_mermaid(diagram)
        files[f"{name}.md"] = to_markdown(diagram, spec)
        if svg:
            files[f"{name}.svg"] = to_svg(diagram)
        modes = ", ".join(_md(m.name) for m in spec.modes)
        index.append(
            f"| {name} | {modes} | [{name}.mmd]({name}.mmd) | [{name}.md]({name}.md) "
            f"| [{name}.svg]({name}.svg) |"
        )
    index += [
        line for name in preset_names() for line in ("", f"## {name}", "", f"![{name}]({name}.svg)")
    ]
    files["README.md"] = "\n".join(index) + "\n"
    written = []
    for file_name, text in files.items():
        path = directory / file_name
        path.write_text(text, encoding="utf-8", newline="\n")
        written.append(path)
    return tuple(sorted(written))
