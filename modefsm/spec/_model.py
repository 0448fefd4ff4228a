"""The mode catalogue of an agent and its policy: what modes exist and how a session may move.

A :class:`ModeSpec` is the single description everything else is built from: the
transitions machine (:mod:`modefsm.engine`), the ACP views (``modes`` and the
``category: "mode"`` config option), the ``switch_mode`` permission options, the
diagrams and the replay verifier. A ``ModeSpec`` that exists is valid: building one
checks everything and reports every problem at once, each with its location.

Example:
    >>> from modefsm import preset
    >>> spec = preset("seed")
    >>> spec.mode_ids
    ('ask', 'architect', 'code')
    >>> [o.option_id for o in spec.switch_from("architect").options]
    ['code', 'ask', 'reject']
    >>> ModeSpec.from_data({"name": "x", "initial": "b", "modes": [{"id": "a", "name": "A"}]})
    Traceback (most recent call last):
    ...
    modefsm.errors.SpecError: invalid mode spec (1 problem): initial: mode "b" is not in modes (a)
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tomllib
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from modefsm.errors import SpecError, SpecProblem
from modefsm.spec._grants import Grants
from modefsm.spec._rules import Decision, RuleTable, ToolRule
from modefsm.spec._table import PREVIOUS, TransitionTable

__all__ = [
    "MAX_META",
    "MAX_PROMPT",
    "MAX_RULES",
    "MAX_SPEC_FILE",
    "Mode",
    "ModeSpec",
    "PermissionOptionKind",
    "Switch",
    "SwitchOption",
    "load_spec",
]

PermissionOptionKind = Literal["allow_once", "allow_always", "reject_once", "reject_always"]
"""ACP ``PermissionOption.kind`` (the SDK's ``acp.schema.PermissionOptionKind``)."""


_FROZEN = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

MAX_PROMPT = 256 * 1024
"""The longest ``prompt`` of a mode (inline or read from ``prompt_file``), in bytes of UTF-8."""
MAX_SPEC_FILE = 16 * 1024 * 1024
"""The largest spec file :func:`load_spec` reads, in bytes (a regular file only)."""
MAX_META = 64 * 1024
"""The longest ``meta`` of a mode, in bytes of compact JSON."""
MAX_RULES = 256
"""The most ``tools`` rules one mode may have."""


class Mode(BaseModel):
    """One advertised mode: ACP ``SessionMode`` plus modefsm's restore policy.

    Attributes:
        id: ACP ``SessionMode.id`` (also the mode option's ``value``).
        name: ACP ``SessionMode.name``.
        description: ACP ``SessionMode.description``.
        restorable: whether ``session/load``/``session/resume`` may put a session back in
            this mode. A bypass-style mode says ``False``.
        fallback: the mode used instead when this one is not restorable; defaults to the
            spec's ``initial`` mode.
        prompt: the system-prompt text a host gives its model in this mode (at most
            :data:`MAX_PROMPT` bytes). In a spec file, ``prompt_file`` names a file read
            instead, relative to the spec file (see :meth:`ModeSpec.from_data`).
        tools: what the mode allows: ordered rules, the first match decides
            (:class:`~modefsm.spec.ToolRule`, judged by :attr:`ModeSpec.rules`); at most
            :data:`MAX_RULES`.
        tools_default: the decision for a tool call no rule matches.
        meta: free-form JSON data for the host (at most :data:`MAX_META` bytes), kept as
            given; modefsm does not read it.
        grants: how ``allow_always`` answers given in this mode are remembered; ``None``:
            the spec's :attr:`ModeSpec.grants`.
    """

    model_config = _FROZEN

    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    description: str | None = None
    restorable: bool = True
    fallback: str | None = None
    prompt: str | None = None
    tools: tuple[ToolRule, ...] = Field(default=(), max_length=MAX_RULES)
    tools_default: Decision = "ask"
    meta: dict[str, JsonValue] | None = None
    grants: Grants | None = None


class SwitchOption(BaseModel):
    """One permission option offered for an agent-initiated ``switch_mode``.

    Attributes:
        option_id: ACP ``PermissionOption.optionId``. It may equal the target mode id (as in
            the ACP docs' example) or be opaque.
        name: ACP ``PermissionOption.name``, the label the user sees.
        kind: ACP ``PermissionOption.kind``.
        target: for ``allow_*`` options, the mode the switch moves to, or :data:`PREVIOUS`;
            ``None`` for ``reject_*`` options.
    """

    model_config = _FROZEN

    option_id: str = Field(min_length=1, alias="optionId")
    name: str = Field(min_length=1)
    kind: PermissionOptionKind
    target: str | None = None

    @property
    def allows(self) -> bool:
        """Whether selecting this option approves the switch (an ``allow_*`` kind)."""
        return self.kind.startswith("allow")


class Switch(BaseModel):
    """An agent-initiated mode switch (the ``switch_mode`` tool) and its permission options.

    Attributes:
        source: the modes in which the agent may propose this switch.
        title: the tool call's ``title``.
        options: the ``session/request_permission`` options, in the order shown.
    """

    model_config = _FROZEN

    source: tuple[str, ...] = Field(min_length=1)
    title: str = Field(min_length=1)
    options: tuple[SwitchOption, ...] = Field(min_length=1)


class ModeSpec(BaseModel):
    """An agent's modes and mode policy.

    Attributes:
        name: the spec's name, recorded in every log record.
        modes: the advertised modes, in the order clients show them (``availableModes``).
        initial: the mode of a new session (``currentModeId`` of ``session/new``).
        client_changes: restrictions on client changes (``session/set_mode`` and
            ``session/set_config_option``): for a mode listed here, the modes the client may
            change to from it. A mode not listed may change to any mode.
        switches: the agent-initiated switches.
        config_option_id: the ``id`` of the ``category: "mode"`` config option.
        config_option_name: its ``name``.
        grants: how ``allow_always`` answers are remembered, for the modes that do not
            say (:class:`~modefsm.spec.Grants`: per mode, not across a restart, by default).

    Raises:
        SpecError: on construction, listing every problem with its location.
    """

    model_config = _FROZEN

    name: str = Field(min_length=1)
    modes: tuple[Mode, ...]
    initial: str
    client_changes: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    switches: tuple[Switch, ...] = ()
    config_option_id: str = Field(default="mode", min_length=1)
    config_option_name: str = Field(default="Session Mode", min_length=1)
    grants: Grants = Grants()

    def __init__(self, /, **data: Any) -> None:
        """Validate *data* completely; raise :class:`SpecError` with every problem."""
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise SpecError(_problems_from_validation(exc)) from None
        problems = _semantic_problems(self)
        if problems:
            raise SpecError(problems)

    @classmethod
    def from_data(
        cls, data: Mapping[str, Any], source: str | None = None, *, base: str | Path | None = None
    ) -> ModeSpec:
        """Build a spec from parsed TOML or JSON data.

        A mode's ``prompt_file`` is read here (at most :data:`MAX_PROMPT` bytes of UTF-8,
        a regular file inside *base*, its links followed) and becomes its ``prompt``; a
        mode gives one or the other.

        Args:
            data: the document's top-level table.
            source: where it came from, for error messages.
            base: the directory ``prompt_file`` names are relative to (the spec file's;
                default: the current directory).

        Raises:
            SpecError: every problem at once, each with its location.
        """
        if not isinstance(data, Mapping):
            raise SpecError([SpecProblem("", "a spec must be a table/object")], source)
        data, file_problems = _read_prompt_files(data, Path(base) if base is not None else None)
        try:
            spec = cls(**data)
        except SpecError as exc:
            raise SpecError([*file_problems, *exc.problems], source) from None
        if file_problems:
            raise SpecError(file_problems, source)
        return spec

    @cached_property
    def mode_ids(self) -> tuple[str, ...]:
        """The advertised mode ids, in order."""
        return tuple(m.id for m in self.modes)

    @cached_property
    def table(self) -> TransitionTable:
        """The :class:`~modefsm.spec.TransitionTable` of this spec (built once)."""
        return TransitionTable(self)

    @cached_property
    def rules(self) -> RuleTable:
        """The compiled ``tools`` rules of every mode (:class:`~modefsm.spec.RuleTable`)."""
        return RuleTable(self)

    def grants_in(self, mode_id: str) -> Grants:
        """How ``allow_always`` answers given in *mode_id* are remembered.

        Raises:
            KeyError: *mode_id* is not advertised.
        """
        return self._modes_by_id[mode_id].grants or self.grants

    def prompt_for(self, mode_id: str) -> str | None:
        """The system-prompt text of mode *mode_id* (``None`` when it has none).

        Raises:
            KeyError: *mode_id* is not advertised.
        """
        return self._modes_by_id[mode_id].prompt

    @cached_property
    def _modes_by_id(self) -> dict[str, Mode]:
        return {m.id: m for m in self.modes}

    @cached_property
    def _switch_by_source(self) -> dict[str, Switch]:
        return {src: sw for sw in self.switches for src in sw.source}

    def mode(self, mode_id: str) -> Mode:
        """Return the advertised mode *mode_id*.

        Raises:
            KeyError: if it is not advertised.
        """
        return self._modes_by_id[mode_id]

    def has_mode(self, mode_id: object) -> bool:
        """Whether *mode_id* is an advertised mode id."""
        return isinstance(mode_id, str) and mode_id in self._modes_by_id

    @cached_property
    def _order(self) -> dict[str, int]:
        return {m: i for i, m in enumerate(self.mode_ids)}

    @cached_property
    def _client_sets(self) -> dict[str, frozenset[str]]:
        """For each mode listed in ``client_changes``, the modes it may change to."""
        return {
            source: frozenset(d for d in dests if d != source)
            for source, dests in self.client_changes.items()
        }

    def client_targets(self, source: str) -> tuple[str, ...]:
        """The modes a client may change to from *source* (never *source* itself), in spec order."""
        allowed = self._client_sets.get(source)
        if allowed is None:
            return tuple(m for m in self.mode_ids if m != source)
        return tuple(sorted(allowed & self._order.keys(), key=self._order.__getitem__))

    def client_allows(self, source: str, dest: str) -> bool:
        """Whether a client may change from mode *source* to mode *dest* (both advertised).

        This is :meth:`client_targets` as a test, in constant time.
        """
        if source == dest or dest not in self._modes_by_id or source not in self._modes_by_id:
            return False
        allowed = self._client_sets.get(source)
        return allowed is None or dest in allowed

    def client_restricted(self, source: str) -> bool:
        """Whether *source* is listed in ``client_changes`` (else it may change to any mode)."""
        return source in self.client_changes

    def switch_from(self, source: str) -> Switch | None:
        """The agent-initiated switch the agent may propose in mode *source*, if any."""
        return self._switch_by_source.get(source)

    def switch_targets(self, source: str) -> tuple[str, ...]:
        """The modes an approved ``switch_mode`` may reach from *source*, in spec order.

        An option targeting :data:`PREVIOUS` may reach any other mode.
        """
        targets = self._switch_sets.get(source)
        if targets is None:
            return ()
        if PREVIOUS in targets:
            return tuple(m for m in self.mode_ids if m != source)
        return tuple(sorted(targets - {source}, key=self._order.__getitem__))

    def switch_allows(self, source: str, dest: str) -> bool:
        """Whether an approved ``switch_mode`` option may move from *source* to *dest*.

        This is :meth:`switch_targets` as a test, in constant time.
        """
        targets = self._switch_sets.get(source)
        if targets is None or source == dest or dest not in self._modes_by_id:
            return False
        return PREVIOUS in targets or dest in targets

    @cached_property
    def _switch_sets(self) -> dict[str, frozenset[str]]:
        """For each mode with a switch, its allow options' targets (:data:`PREVIOUS` included)."""
        return {
            source: frozenset(o.target for o in switch.options if o.allows and o.target)
            for source, switch in self._switch_by_source.items()
        }

    def restore_target(self, mode_id: str) -> str:
        """The mode a session last seen in *mode_id* is restored to on load or resume."""
        mode = self._modes_by_id[mode_id]
        if mode.restorable:
            return mode_id
        return mode.fallback or self.initial

    @cached_property
    def definition(self) -> dict[str, Any]:
        """The spec as JSON data: what :attr:`content_hash` is the digest of.

        :meth:`from_data` builds the same spec from it (prompts inline, no
        ``prompt_file``); keys of a mode left at their defaults are left out. A log's
        header (``modefsm.spec``) holds it. Computed once: the same dictionary each time
        (do not change it).
        """
        dump = self.model_dump(mode="json")
        for mode in dump["modes"]:  # keys a spec leaves at their defaults do not count, so
            for key, default in _MODE_ADDED.items():  # that older specs keep their hash
                if mode[key] == default:
                    del mode[key]
        if dump["grants"] == _GRANTS_DEFAULT:
            del dump["grants"]
        return dump

    @cached_property
    def content_hash(self) -> str:
        """A stable digest of the spec's content: ``sha256:`` and 16 hex digits.

        The SHA-256 of :attr:`definition` as compact JSON with sorted keys, cut to 16 hex
        digits. Two specs with the same content have the same hash whatever file they came
        from; log records carry it so that replay can tell which spec wrote them.
        """
        return definition_hash(self.definition)


def definition_hash(definition: Mapping[str, Any]) -> str:
    """The :attr:`ModeSpec.content_hash` of a spec's :attr:`~ModeSpec.definition`.

    Example:
        >>> from modefsm import preset
        >>> spec = preset("seed")
        >>> definition_hash(spec.definition) == spec.content_hash
        True
    """
    canonical = orjson.dumps(definition, option=orjson.OPT_SORT_KEYS)
    return "sha256:" + hashlib.sha256(canonical).hexdigest()[:16]


_MODE_ADDED: dict[str, Any] = {
    "prompt": None,
    "tools": [],
    "tools_default": "ask",
    "meta": None,
    "grants": None,
}
"""The keys of a mode that the content hash leaves out at these values (added later)."""
_GRANTS_DEFAULT = Grants().model_dump(mode="json")


def _read_prompt_files(
    data: Mapping[str, Any], base: Path | None
) -> tuple[Mapping[str, Any], list[SpecProblem]]:
    """*data* with each mode's ``prompt_file`` read into its ``prompt``, and the problems."""
    modes = data.get("modes")
    if not isinstance(modes, list) or not any(
        isinstance(m, Mapping) and "prompt_file" in m for m in modes
    ):
        return data, []
    problems: list[SpecProblem] = []
    read: list[Any] = []
    for i, mode in enumerate(modes):
        if not isinstance(mode, Mapping) or "prompt_file" not in mode:
            read.append(mode)
            continue
        mode = dict(mode)  # noqa: PLW2901 - the caller's data stays as it was
        name = mode.pop("prompt_file")
        where = f"modes[{i}].prompt_file"
        if "prompt" in mode:
            problems.append(SpecProblem(where, "give prompt or prompt_file, not both"))
        elif not isinstance(name, str) or not name:
            problems.append(SpecProblem(where, "a file name (a non-empty string) is needed"))
        else:
            path, problem = _prompt_path(Path(base or "."), name)
            text = None
            if path is not None:
                text, problem = _read_prompt(path, name)
            if problem is not None:
                problems.append(SpecProblem(where, problem))
            else:
                mode["prompt"] = text
        read.append(mode)
    return {**data, "modes": read}, problems


def _prompt_path(folder: Path, name: str) -> tuple[Path | None, str | None]:
    """Where the prompt file *name* is, its links followed, or why it is not used.

    It must be inside *folder* (the spec's): a spec from elsewhere cannot read a file of
    the user's into a prompt.
    """
    try:
        folder = folder.resolve()
        path = (folder / name).resolve()
    except (OSError, RuntimeError) as exc:  # a loop of links
        return None, f"cannot read {name!r}: {getattr(exc, 'strerror', None) or exc}"
    if not path.is_relative_to(folder):
        return None, f"{name!r} is outside the spec's folder"
    return path, None


def _read_prompt(path: Path, name: str) -> tuple[str | None, str | None]:
    """The text of the prompt file *path* (named *name*), or why it cannot be used."""
    try:
        return _read_text(path, MAX_PROMPT), None
    except _Unusable as exc:
        return None, f"cannot read {name!r}: {exc}" if exc.unread else f"{name!r} is {exc}"


class _Unusable(Exception):  # noqa: N818 - a reason, not an error of the caller's
    """Why a file's text cannot be used (*unread*: it could not be read at all)."""

    def __init__(self, reason: str, *, unread: bool = False) -> None:
        super().__init__(reason)
        self.unread = unread


def _read_text(path: Path, limit: int) -> str:
    """The UTF-8 text of the regular file *path*, at most *limit* bytes.

    Opened without blocking (a FIFO, a device): only a regular file is read.

    Raises:
        _Unusable: it cannot be read, is not a regular file, is larger, or not UTF-8.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _Unusable(exc.strerror or str(exc), unread=True) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _Unusable("not a regular file")
        with os.fdopen(os.dup(fd), "rb") as file:
            content = file.read(limit + 1)
    except OSError as exc:
        raise _Unusable(exc.strerror or str(exc), unread=True) from None
    finally:
        os.close(fd)
    if len(content) > limit:
        raise _Unusable(f"larger than {limit} bytes")
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        raise _Unusable("not UTF-8 text") from None


def _problems_from_validation(exc: ValidationError) -> list[SpecProblem]:
    problems = []
    for err in exc.errors(include_url=False):
        location = ""
        for part in err["loc"]:
            location += f"[{part}]" if isinstance(part, int) else (f".{part}" if location else part)
        problems.append(SpecProblem(location, err["msg"]))
    return problems


def _semantic_problems(spec: ModeSpec) -> list[SpecProblem]:  # noqa: C901, PLR0912, PLR0915
    problems: list[SpecProblem] = []
    ids: list[str] = []
    known: set[str] = set()
    for i, mode in enumerate(spec.modes):
        if mode.id in known:
            problems.append(SpecProblem(f"modes[{i}].id", f"duplicate id {mode.id!r}"))
        if mode.id == PREVIOUS:
            problems.append(SpecProblem(f"modes[{i}].id", f"{PREVIOUS!r} is reserved for targets"))
        ids.append(mode.id)
        known.add(mode.id)
    listed = ", ".join(ids[:_LISTED_MAX])
    if len(ids) > _LISTED_MAX:
        listed += f", ... ({len(ids) - _LISTED_MAX} more)"

    def unknown(location: str, mode_id: str) -> None:
        problems.append(SpecProblem(location, f'mode "{mode_id}" is not in modes ({listed})'))

    if not spec.modes:
        problems.append(SpecProblem("modes", "the catalogue is empty: advertise at least one mode"))
    for i, mode in enumerate(spec.modes):
        problems.extend(_meaning_problems(f"modes[{i}]", mode))
    if spec.modes and spec.initial not in known:
        unknown("initial", spec.initial)
    for i, mode in enumerate(spec.modes):
        if mode.fallback is not None:
            if mode.fallback not in known:
                unknown(f"modes[{i}].fallback", mode.fallback)
            elif mode.restorable:
                problems.append(
                    SpecProblem(f"modes[{i}].fallback", "a fallback needs restorable = false")
                )
            elif not spec.mode(mode.fallback).restorable:
                problems.append(
                    SpecProblem(f"modes[{i}].fallback", f"{mode.fallback!r} is not restorable")
                )
    if spec.initial in known and not spec.mode(spec.initial).restorable:
        for i, mode in enumerate(spec.modes):
            if not mode.restorable and mode.fallback is None:
                problems.append(
                    SpecProblem(
                        f"modes[{i}].fallback", "needed: the initial mode is not restorable"
                    )
                )
    for source, dests in spec.client_changes.items():
        if source not in known:
            unknown(f"client_changes.{source}", source)
        for j, dest in enumerate(dests):
            if dest not in known:
                unknown(f"client_changes.{source}[{j}]", dest)
    seen_sources: dict[str, int] = {}
    for i, switch in enumerate(spec.switches):
        where = f"switches[{i}]"
        own_sources = set(switch.source)
        for j, source in enumerate(switch.source):
            if source not in known:
                unknown(f"{where}.source[{j}]", source)
            elif source in seen_sources:
                problems.append(
                    SpecProblem(
                        f"{where}.source[{j}]",
                        f"mode {source!r} already has a switch (switches[{seen_sources[source]}])",
                    )
                )
            else:
                seen_sources[source] = i
        option_ids: set[str] = set()
        for j, option in enumerate(switch.options):
            at = f"{where}.options[{j}]"
            if option.option_id in option_ids:
                problems.append(
                    SpecProblem(f"{at}.option_id", f"duplicate option_id {option.option_id!r}")
                )
            option_ids.add(option.option_id)
            if option.allows and option.target is None:
                problems.append(
                    SpecProblem(f"{at}.target", f"an {option.kind} option needs a target")
                )
            elif not option.allows and option.target is not None:
                problems.append(
                    SpecProblem(f"{at}.target", f"a {option.kind} option has no target")
                )
            elif (
                option.allows
                and option.option_id in known
                and option.target not in (option.option_id, PREVIOUS)
            ):
                problems.append(
                    SpecProblem(
                        f"{at}.option_id",
                        f"{option.option_id!r} is a mode id but targets {option.target!r}: "
                        "clients that read option ids as modes would disagree",
                    )
                )
            elif option.target not in (None, PREVIOUS):
                if option.target not in known:
                    unknown(f"{at}.target", option.target)
                elif option.target in own_sources:
                    problems.append(
                        SpecProblem(f"{at}.target", f"{option.target!r} is the switch's own source")
                    )
        if not any(o.allows for o in switch.options):
            problems.append(
                SpecProblem(f"{where}.options", "no allow_* option: nothing to approve")
            )
    if not problems:
        problems.extend(_unreachable(spec))
    return problems


def _covering_rule(earlier: Sequence[ToolRule], rule: ToolRule) -> int | None:
    """The index of the first of *earlier* that matches every call *rule* matches, if any.

    Sure cases only: its kinds include *rule*'s (or it matches any kind), and it matches
    any name or the very same pattern.
    """
    kinds = None if rule.kind is None else set(rule.kind)
    for i, other in enumerate(earlier):
        if other.kind == () or (other.kind is None and other.name is None):
            continue  # a problem of its own
        if other.kind is not None and (kinds is None or not kinds <= set(other.kind)):
            continue
        if other.name is None or other.name == rule.name:
            return i
    return None


def _meaning_problems(where: str, mode: Mode) -> list[SpecProblem]:
    """What is wrong with a mode's ``prompt``, ``tools`` and ``meta``."""
    problems = []
    if mode.prompt is not None and len(mode.prompt.encode("utf-8", "surrogatepass")) > MAX_PROMPT:
        problems.append(SpecProblem(f"{where}.prompt", f"longer than {MAX_PROMPT} bytes"))
    for j, rule in enumerate(mode.tools):
        if rule.kind == ():
            problems.append(
                SpecProblem(f"{where}.tools[{j}].kind", "an empty list matches nothing")
            )
        elif rule.kind is None and rule.name is None:
            problems.append(
                SpecProblem(
                    f"{where}.tools[{j}]",
                    "a rule needs a kind or a name (tools_default decides the rest)",
                )
            )
        elif (i := _covering_rule(mode.tools[:j], rule)) is not None:
            problems.append(
                SpecProblem(
                    f"{where}.tools[{j}]",
                    f"never matches: rule {i} matches every call it would "
                    "(the first rule that matches decides)",
                )
            )
    if mode.meta is not None:
        try:
            size = len(orjson.dumps(mode.meta))
        except orjson.JSONEncodeError as exc:
            problems.append(SpecProblem(f"{where}.meta", f"not JSON: {exc}"))
        else:
            if size > MAX_META:
                problems.append(
                    SpecProblem(f"{where}.meta", f"{size} bytes of JSON, more than {MAX_META}")
                )
    return problems


def _unreachable(spec: ModeSpec) -> list[SpecProblem]:
    """Modes no path reaches from the initial mode (:meth:`TransitionTable.reachable`)."""
    reached = spec.table.reachable()
    return [
        SpecProblem(f"modes[{i}]", f"mode {m.id!r} is unreachable from the initial mode")
        for i, m in enumerate(spec.modes)
        if m.id not in reached
    ]


_LISTED_MAX = 20
"""The most mode ids an error message lists."""


def load_spec(path: str | Path) -> ModeSpec:
    """Load a spec from a ``.toml`` or ``.json`` file.

    Args:
        path: the file, a regular file of at most :data:`MAX_SPEC_FILE` bytes of UTF-8
            (a FIFO or a device is refused, not read); its suffix chooses the parser
            (anything but ``.json`` is TOML).

    Raises:
        SpecError: the file cannot be read or parsed, or the spec is invalid (every problem).
    """
    path = Path(path)
    try:
        text = _read_text(path, MAX_SPEC_FILE)
    except _Unusable as exc:
        raise SpecError([SpecProblem("", f"cannot read the spec: {exc}")], str(path)) from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise SpecError([SpecProblem("", f"not valid {kind}: {exc}")], str(path)) from None
    except RecursionError:
        raise SpecError([SpecProblem("", "nested too deeply")], str(path)) from None
    return ModeSpec.from_data(data, str(path), base=path.parent)
