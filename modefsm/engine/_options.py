"""A host's own session config options (a model picker, ...), declared once.

A host declares each option once, as a :class:`HostOption`; the engine then handles it
as it handles the mode option: ``session/set_config_option`` checks the value, runs the
option's ``on_change`` callback (which may veto), writes a ``modefsm.config_changed``
record before the value takes effect, announces the complete ``configOptions`` list
(``config_option_update``) and answers it; ``session/load`` and ``session/resume`` bring
the value last set back. A session's values are plain data (``{configId: value}``, only
the options set), carried on each of its committed records.

This module holds the declarations and their views; it imports no ACP SDK (the
:mod:`modefsm.protocol` renderers turn the views into wire models).

Example:
    >>> model = HostOption(
    ...     id="model", name="Model", choices=[("fast", "Fast"), ("smart", "Smart")],
    ...     default="fast", category="model",
    ... )
    >>> options = HostOptions([model], mode_option_id="mode")
    >>> options.views({"model": "smart"})[0].current_value
    'smart'
    >>> options.views(None)[0].current_value
    'fast'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from modefsm.engine._views import Choice, OptionView
from modefsm.errors import InvalidValueError, UnknownConfigOptionError

__all__ = ["HostOption", "HostOptions", "OptionChange"]


@dataclass(frozen=True, slots=True)
class OptionChange:
    """A host option's value about to change (what ``on_change`` callbacks receive).

    Attributes:
        session_id: ACP ``sessionId``.
        seq: the ``seq`` of the ``modefsm.config_changed`` record it will be.
        config_id: ACP ``configId`` of the option.
        value: the value asked for (one of the option's choices).
        previous: the session's value before it (the option's default if never set).
        mode_id: the session's mode (ACP ``currentModeId``), which the change keeps.
        request_id: the JSON-RPC id of the ``session/set_config_option`` request, if known.
    """

    session_id: str
    seq: int
    config_id: str
    value: str
    previous: str
    mode_id: str
    request_id: str | int | None = None


@dataclass(frozen=True, slots=True)
class HostOption:
    """One select config option of the host's, declared once (ACP ``SessionConfigOption``).

    Args:
        id: ACP ``id`` (v2 ``configId``); must differ from the mode option's and from
            the host's other options'.
        name: ACP ``name``, shown to the user.
        choices: the values, in the order shown: :class:`~modefsm.engine.Choice` objects
            or ``(value, name)`` pairs; non-empty, values unique.
        default: the value of a session that never set it; one of *choices*.
        category: ACP ``category`` (``"model"``, ``"thought_level"``, ...), or ``None``.
        description: ACP ``description``, or ``None``.
        on_change: called before a change of the value commits, with its
            :class:`OptionChange`; raising :class:`~modefsm.errors.ChangeRefused` vetoes it
            (the client gets that code and message, nothing changes); any other exception
            fails the request as the agent's error (``-32603``), nothing changes.

    Raises:
        ValueError: an empty ``id`` or ``name``, no choices, a repeated value, or a
            default that is not one of the choices.
    """

    id: str
    name: str
    choices: Sequence[Choice | tuple[str, str]]
    default: str
    category: str | None = None
    description: str | None = None
    on_change: Callable[[OptionChange], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        """Turn ``(value, name)`` pairs into :class:`~modefsm.engine.Choice` and check."""
        choices = tuple(c if isinstance(c, Choice) else Choice(*c) for c in self.choices)
        object.__setattr__(self, "choices", choices)
        values = [c.value for c in choices]
        problems = []
        if not self.id or not self.name:
            problems.append("a host option needs a non-empty id and name")
        if not choices:
            problems.append(f"host option {self.id!r} has no choices")
        if len(set(values)) != len(values):
            problems.append(f"host option {self.id!r} repeats a value: {values}")
        if self.default not in values:
            problems.append(
                f"host option {self.id!r}: default {self.default!r} is not one of {values}"
            )
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def values(self) -> tuple[str, ...]:
        """The values a client may set, in order."""
        return tuple(c.value for c in self.choices)  # type: ignore[union-attr]


class HostOptions:
    """The host options of an engine: their checks and views.

    Args:
        options: the declarations, in the order clients show them (after the mode option).
        mode_option_id: the mode option's ``id`` (the spec's ``config_option_id``).

    Raises:
        ValueError: two options share an ``id``, or one has the mode option's.
    """

    def __init__(self, options: Iterable[HostOption], *, mode_option_id: str) -> None:
        """Index *options* by ``id``; build each option's views lazily."""
        self.options: dict[str, HostOption] = {}
        for option in options:
            if option.id == mode_option_id or option.id in self.options:
                taken = "the mode option's" if option.id == mode_option_id else "another's"
                msg = f"host option id {option.id!r} is {taken}"
                raise ValueError(msg)
            self.options[option.id] = option
        self.ids = (mode_option_id, *self.options)
        """Every ``configId`` of a session's list: the mode option's first."""
        self._views: dict[tuple[str, str], OptionView] = {}
        self._defaults = tuple(self._view(o, o.default) for o in self.options.values())

    def __bool__(self) -> bool:
        """Whether any option is declared."""
        return bool(self.options)

    def __contains__(self, config_id: object) -> bool:
        """Whether *config_id* is a host option's ``id``."""
        return config_id in self.options

    def check(self, config_id: str, value: object) -> HostOption:
        """The option *config_id*, if *value* is one of its choices.

        Raises:
            UnknownConfigOptionError: *config_id* is not a host option.
            InvalidValueError: *value* is not one of its values (``data.valid`` lists them).
        """
        option = self.options.get(config_id)
        if option is None:
            raise UnknownConfigOptionError(config_id, self.ids)
        if not isinstance(value, str) or value not in option.values:
            raise InvalidValueError(
                "value", value, option.values, f"a value of config option {config_id!r}"
            )
        return option

    def value(self, values: Mapping[str, str | bool] | None, config_id: str) -> str:
        """The session's value of *config_id* (the default when never set)."""
        option = self.options[config_id]
        found = values.get(config_id) if values else None
        return found if isinstance(found, str) else option.default

    def restored(self, config: Mapping[str, object] | None) -> dict[str, str | bool] | None:
        """The values of a record's ``config`` that still fit the declarations.

        A value of an option no longer declared, or no longer one of its choices, is
        dropped: the session shows the option's default.
        """
        if not config:
            return None
        kept: dict[str, str | bool] = {
            config_id: value
            for config_id, value in config.items()
            if config_id in self.options
            and isinstance(value, str)
            and value in self.options[config_id].values
        }
        return kept or None

    def views(self, values: Mapping[str, str | bool] | None) -> tuple[OptionView, ...]:
        """The host options' views at the session's *values*, in declaration order."""
        if not values:
            return self._defaults
        return tuple(self._view(o, self.value(values, o.id)) for o in self.options.values())

    def _view(self, option: HostOption, value: str) -> OptionView:
        view = self._views.get((option.id, value))
        if view is None:
            view = self._views[option.id, value] = OptionView(
                option.id,
                option.name,
                value,
                option.choices,  # type: ignore[arg-type]  # made Choice in __post_init__
                category=option.category,
                description=option.description,
            )
        return view
