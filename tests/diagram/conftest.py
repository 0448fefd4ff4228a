"""The diagram tests' Chromium: one headless browser for a test module."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.diagram._browser import Browser
from tests.diagram._diagram_support import chromium, picture_page

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """A headless Chromium (skipped, or failed where required, when it is missing)."""
    with Browser(chromium(), tmp_path_factory.mktemp("chromium")) as opened:
        yield opened


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page pictures are drawn on (see ``_diagram_support.PAGE``)."""
    return picture_page(tmp_path_factory.mktemp("page"))
