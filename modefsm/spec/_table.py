"""The transition table of a spec: which mode changes exist, by trigger kind.

The one answer to "is this transition legal?": the engine's machine, the spec's
reachability check, replay's legality checks (its fast path included) and the diagrams
all read it. A table is built once per spec (:attr:`ModeSpec.table
<modefsm.spec.ModeSpec.table>`) from the spec's per-rule answers
(:meth:`~modefsm.spec.ModeSpec.client_allows`, :meth:`~modefsm.spec.ModeSpec.switch_allows`,
:meth:`~modefsm.spec.ModeSpec.restore_target`); :meth:`TransitionTable.allows` takes
constant time whatever the size of the spec.

Trigger kinds (:data:`TriggerKind`):

``client_change``
    ``session/set_mode`` and ``session/set_config_option``: from every mode whose
    ``client_changes`` allow the destination.
``switch_mode``
    an approved ``switch_mode``: from every mode that has a switch option reaching the
    destination (a ``$previous`` option reaches every other mode), and from every mode a
    client change could reach it from.
``restore``
    ``session/load``/``session/resume`` of a session last seen in a non-restorable mode:
    from that mode to its fallback.

Example:
    >>> from modefsm.spec import preset
    >>> table = preset("seed").table
    >>> table.allows("client_change", "ask", "code"), table.targets("restore", "code")
    (True, ())
    >>> table.kind_of("set_config_option"), table.kind_of("new")
    ('client_change', None)
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from modefsm.spec._model import ModeSpec

__all__ = ["ORIGIN_KINDS", "PREVIOUS", "TRIGGER_KINDS", "TransitionTable", "TriggerKind"]

PREVIOUS = "$previous"
"""A switch option target meaning "the mode the session was in before the current one"."""

TriggerKind = Literal["client_change", "switch_mode", "restore"]
"""What moves a session: a client's change, an approved agent switch, a restore."""

TRIGGER_KINDS: tuple[TriggerKind, ...] = ("client_change", "switch_mode", "restore")
"""Every :data:`TriggerKind`, in the order :meth:`TransitionTable.edges` lists them."""

ORIGIN_KINDS: Mapping[str, TriggerKind] = MappingProxyType(
    {
        "set_mode": "client_change",
        "set_config_option": "client_change",
        "switch_mode": "switch_mode",
        "restore": "restore",
    }
)
"""The trigger kind of each log record ``origin`` that changes a mode (``new`` has none)."""


class TransitionTable:
    """The transitions of *spec*: ``(kind, source, dest)`` triples, asked in constant time.

    Args:
        spec: the spec (a table is usually reached as ``spec.table``).
    """

    def __init__(self, spec: ModeSpec) -> None:
        """Derive the table from *spec* (no work until asked)."""
        self.spec = spec

    @staticmethod
    def kind_of(origin: object) -> TriggerKind | None:
        """The trigger kind of a record's ``origin``; ``None`` for ``new`` or anything else."""
        return ORIGIN_KINDS.get(origin) if isinstance(origin, str) else None

    def allows(self, kind: TriggerKind, source: str, dest: str) -> bool:
        """Whether trigger *kind* has a transition from *source* to *dest* (constant time).

        Modes the spec does not advertise have no transitions; no transition goes from a
        mode to itself.
        """
        spec = self.spec
        if kind == "client_change":
            return spec.client_allows(source, dest)
        if kind == "switch_mode":
            return spec.client_allows(source, dest) or spec.switch_allows(source, dest)
        return (
            kind == "restore"
            and source != dest
            and spec.has_mode(source)
            and spec.has_mode(dest)
            and spec.restore_target(source) == dest
        )

    def sources(self, kind: TriggerKind, dest: str) -> tuple[str, ...]:
        """The modes from which trigger *kind* may reach *dest*, in spec order."""
        return tuple(s for s in self.spec.mode_ids if self.allows(kind, s, dest))

    def targets(self, kind: TriggerKind, source: str) -> tuple[str, ...]:
        """The modes trigger *kind* may reach from *source*, in spec order."""
        if kind == "client_change":  # the spec's own list: no walk over every mode
            return self.spec.client_targets(source) if self.spec.has_mode(source) else ()
        return tuple(d for d in self.spec.mode_ids if self.allows(kind, source, d))

    def edges(self) -> list[tuple[TriggerKind, str, str]]:
        """Every transition as ``(kind, source, dest)``, in spec order of dest, kind, source.

        The list has one item per transition: n² for a spec of n modes whose clients may
        change from any mode to any other.
        """
        edges: list[tuple[TriggerKind, str, str]] = []
        modes = self.spec.mode_ids
        for dest in modes:
            for kind in TRIGGER_KINDS:
                edges.extend((kind, s, dest) for s in modes if self.allows(kind, s, dest))
        return edges

    def reachable(self) -> frozenset[str]:
        """The modes some path of client changes and switches reaches from the initial mode.

        A ``$previous`` option reaches no mode the path did not pass through, so it adds
        none; restores are not followed. The search reads the spec's own lists: a mode not
        listed in ``client_changes`` reaches every mode, so it ends as soon as it meets one,
        in time linear in the spec.
        """
        spec = self.spec
        reached = {spec.initial}
        frontier = [spec.initial]
        while frontier:
            source = frontier.pop()
            if not spec.client_restricted(source):
                return frozenset(spec.mode_ids)
            switch = spec.switch_from(source)
            options = switch.options if switch is not None else ()
            explicit = [o.target for o in options if o.allows and o.target]
            for dest in (*spec.client_changes[source], *explicit):
                if dest not in reached and dest != PREVIOUS:
                    reached.add(dest)
                    frontier.append(dest)
        return frozenset(reached)
