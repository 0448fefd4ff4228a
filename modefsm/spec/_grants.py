"""Remembered ``allow_always`` answers: what a session's user has already approved.

A grant is made when the user answers a permission request for a tool call that its mode
said to ``ask`` with an ``allow_always`` option. It covers later tool calls of the same
ACP ``ToolKind`` and the same tool name, and only calls whose mode says ``ask`` (a grant
never turns a ``deny`` into a run). Its reach is the :class:`Grants` policy of the mode it
was made in:

``scope = "mode"`` (the default)
    valid in the mode it was made in only: "always allow" given in ``plan`` does not
    carry into ``default``.
``scope = "session"``
    valid in every mode of the session.
``persist``
    whether the grant survives a restart (it is rebuilt from the log's decision records);
    ``False`` by default: a restarted agent asks again.

:class:`GrantMemory` holds one session's grants; the engine keeps one per session, and
replay rebuilds them from the decision records to check every ``granted`` outcome.

Example:
    >>> from modefsm.spec import preset
    >>> grants = GrantMemory(preset("permission"))
    >>> grants.remember("default", "execute", "Bash")
    True
    >>> grants.covers("default", "execute", "Bash"), grants.covers("acceptEdits", "execute", "Bash")
    (True, False)

This module imports nothing of modefsm but the spec's models.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from modefsm.spec._model import ModeSpec

__all__ = ["MAX_GRANTS", "GrantFacts", "GrantMemory", "GrantScope", "Grants"]

GrantScope = Literal["mode", "session"]
"""Where a remembered ``allow_always`` is valid: the mode it was given in, or the session."""

MAX_GRANTS = 1024
"""The most grants one session remembers; past it a new ``allow_always`` is not
remembered (its tool call runs, and the next one asks again)."""


class Grants(BaseModel):
    """How a mode remembers ``allow_always`` answers (see the module docstring).

    Attributes:
        scope: ``mode`` or ``session``.
        persist: whether the grants survive a restart (rebuilt from the log).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    scope: GrantScope = "mode"
    persist: bool = False


class GrantFacts(Protocol):
    """What a decision record says that grants are rebuilt from (a ``DecisionRecord``)."""

    @property
    def mode(self) -> str: ...  # pragma: no cover
    @property
    def kind(self) -> str: ...  # pragma: no cover
    @property
    def tool(self) -> str | None: ...  # pragma: no cover
    @property
    def outcome(self) -> str | None: ...  # pragma: no cover


_Key = tuple[str | None, str, str | None]
"""``(mode or None for a session-wide grant, kind, tool name)``."""


class GrantMemory:
    """The ``allow_always`` grants of one session, as its spec's policies say.

    Args:
        spec: the session's spec.
    """

    __slots__ = ("_grants", "_spec")

    def __init__(self, spec: ModeSpec) -> None:
        """Start with no grant."""
        self._spec = spec
        self._grants: dict[_Key, bool] = {}  # key -> whether it persists

    def _key(self, mode_id: str, kind: str, tool: str | None) -> tuple[_Key, bool]:
        policy = self._spec.grants_in(mode_id)
        return (mode_id if policy.scope == "mode" else None, kind, tool), policy.persist

    def remember(self, mode_id: str, kind: str, tool: str | None) -> bool:
        """Remember an ``allow_always`` given in *mode_id* for a *kind* tool named *tool*.

        Returns:
            Whether it is remembered (``False`` past :data:`MAX_GRANTS`).

        Raises:
            KeyError: *mode_id* is not a mode of the spec.
        """
        key, persist = self._key(mode_id, kind, tool)
        if key not in self._grants and len(self._grants) >= MAX_GRANTS:
            return False
        self._grants[key] = persist
        return True

    def covers(self, mode_id: str, kind: str, tool: str | None) -> bool:
        """Whether a grant covers a *kind* tool call named *tool* in mode *mode_id*."""
        grants = self._grants
        return (mode_id, kind, tool) in grants or (None, kind, tool) in grants

    def __len__(self) -> int:
        """The number of grants remembered."""
        return len(self._grants)

    def restart(self) -> None:
        """Forget the grants that do not persist (what a restart keeps)."""
        self._grants = {key: True for key, persist in self._grants.items() if persist}

    @classmethod
    def rebuild(cls, spec: ModeSpec, decisions: Iterable[GrantFacts]) -> GrantMemory:
        """The grants a restarted session still has, from its decision records in order.

        Every ``allow_always`` outcome is remembered, then those that do not persist are
        forgotten (:meth:`restart`).
        """
        memory = cls(spec)
        for decision in decisions:
            if decision.outcome == "allow_always" and spec.has_mode(decision.mode):
                memory.remember(decision.mode, decision.kind, decision.tool)
        memory.restart()
        return memory
