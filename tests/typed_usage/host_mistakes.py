"""A host's mistakes that ``mypy --strict`` must reject: each line carries the error it gets.

Checked with the project's ``mypy`` run (``warn_unused_ignores``: a mistake mypy stopped
catching leaves its ``type: ignore`` unused, an error) and, without the comments, as user
code by ``tests/test_typed_usage.py``, which asserts the exact errors. Nothing here runs.
"""

from __future__ import annotations

from modefsm import MemoryStore, ModeAgent, ModeChange, ModeEngine, SharedEngine, preset


def no_yolo(change: ModeChange) -> None:
    """A ``before_change`` hook."""


def mistakes() -> None:
    """Options misspelled, and a bare function where a list of hooks is expected."""
    spec = preset("seed")
    ModeAgent(spec, after_chnage=[no_yolo])  # type: ignore[call-arg]
    ModeAgent(spec, before_change=no_yolo)  # type: ignore[arg-type]
    ModeAgent(spec, stor=MemoryStore())  # type: ignore[call-arg]
    ModeEngine(spec, befor_change=[no_yolo])  # type: ignore[call-arg]
    ModeEngine(spec, after_change=no_yolo)  # type: ignore[arg-type]
    SharedEngine(spec, forget_afterr=1.0)  # type: ignore[call-arg]
    SharedEngine(spec, before_change=no_yolo)  # type: ignore[arg-type]
