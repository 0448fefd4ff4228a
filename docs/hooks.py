"""Build hooks of the documentation site (``mkdocs.yml``: ``hooks``).

The site shows files that live elsewhere in the repository, read at build time so that
nothing is copied into ``docs/`` to drift: the committed diagrams of the presets
(``diagrams/*.svg``, made by ``modefsm.diagram.write_preset_diagrams`` and checked by
``tests/diagram/test_diagrams_folder.py``) and the changelog (``CHANGELOG.md``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
DIAGRAMS = ROOT / "diagrams"
CHANGELOG = ROOT / "CHANGELOG.md"


def on_files(files: Files, *, config: Any) -> Files:
    """Add the committed SVG diagrams (as ``diagrams/NAME.svg``) and the changelog page."""
    for svg in sorted(DIAGRAMS.glob("*.svg")):
        files.append(File.generated(config, f"diagrams/{svg.name}", abs_src_path=str(svg)))
    files.append(
        File.generated(config, "changelog.md", content=CHANGELOG.read_text(encoding="utf-8"))
    )
    return files
