"""The exceptions modefsm raises.

Every error is a :class:`ModefsmError`; each subclass keeps its context as attributes
and builds its own message, so a caller can turn it into a JSON-RPC error or a CLI line
without parsing text::

    ModefsmError
    ├── SpecError                    a spec file or object is unusable (every problem listed)
    ├── UnknownSessionError          no session with that sessionId          (JSON-RPC -32002)
    ├── SessionExistsError           new_session with a sessionId in use
    ├── InvalidParamsError           a request names something that does not fit (-32602)
    │   ├── UnknownModeError         a modeId / value that is not advertised
    │   ├── UnknownConfigOptionError a configId that is not the mode option
    │   ├── InvalidValueError        a value of the wrong type
    │   └── TransitionNotAllowedError  the policy forbids this change from the current mode
    ├── NoSwitchError                the agent proposed a switch from a mode that has none
    ├── AskClosedError               an answer for a tool call's ask that is no longer open
    ├── AskLimitError                a session holds the most open asks it may
    ├── HookError                    a host before_change callback failed (JSON-RPC -32603)
    │   └── ChangeRefused            a host's veto: the client gets its code and message
    ├── LogError                     the transition log cannot be written or read
    ├── DiagramError                 a diagram cannot be drawn (no Graphviz, unknown session)
    └── FrameError                   a JSON-RPC frame refused on the wire (-32700, -32600)

The JSON-RPC error codes ACP uses are named here once (:data:`INVALID_PARAMS`, ...);
:mod:`modefsm.protocol.errors` builds the error answers from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "AUTH_REQUIRED",
    "ERROR_MESSAGES",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "RESOURCE_NOT_FOUND",
    "UNSUPPORTED_PROTOCOL",
    "AskClosedError",
    "AskLimitError",
    "ChangeRefused",
    "DiagramError",
    "HookError",
    "InvalidParamsError",
    "InvalidValueError",
    "LogError",
    "ModefsmError",
    "NoSwitchError",
    "SessionExistsError",
    "SpecError",
    "SpecProblem",
    "StaleOptionError",
    "TransitionNotAllowedError",
    "UnknownConfigOptionError",
    "UnknownModeError",
    "UnknownSessionError",
]


PARSE_ERROR = -32700
"""JSON-RPC: the frame is not JSON (or not Unicode text)."""
INVALID_REQUEST = -32600
"""JSON-RPC: JSON, but not a valid request (or over a limit of the connection)."""
METHOD_NOT_FOUND = -32601
"""JSON-RPC: the method is not served."""
INVALID_PARAMS = -32602
"""JSON-RPC: a parameter does not fit (an unknown ``modeId``, ``configId``, ``value``)."""
INTERNAL_ERROR = -32603
"""JSON-RPC: the agent failed (its log, its store, a bug); never a user's mistake."""
AUTH_REQUIRED = -32000
"""ACP: the request needs authentication (an HTTP request without the token)."""
RESOURCE_NOT_FOUND = -32002
"""ACP: no such resource (an unknown ``sessionId``)."""
UNSUPPORTED_PROTOCOL = -32022
"""ACP v2: ``initialize`` asked for a ``protocolVersion`` that is not served."""
REQUEST_CANCELLED = -32800
"""ACP: the request was cancelled by the peer (``$/cancel_request``)."""

ERROR_MESSAGES = {
    PARSE_ERROR: "Parse error",
    INVALID_REQUEST: "Invalid request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params",
    INTERNAL_ERROR: "Internal error",
    AUTH_REQUIRED: "Authentication required",
    RESOURCE_NOT_FOUND: "Resource not found",
    REQUEST_CANCELLED: "Request cancelled",
}
"""The standard ``message`` of each code (the SDK's wording), for answers built on the wire."""


class ModefsmError(Exception):
    """Base of every error modefsm raises on purpose."""


@dataclass(frozen=True, slots=True)
class SpecProblem:
    """One problem found in a spec.

    Attributes:
        location: where it is, as a path into the spec (``modes[2].id``).
        message: what is wrong there.
    """

    location: str
    message: str

    def __str__(self) -> str:
        """Return ``location: message``."""
        return f"{self.location}: {self.message}" if self.location else self.message


class SpecError(ModefsmError):
    """A spec does not parse or does not validate.

    Attributes:
        problems: every problem found, in document order.
        source: the file (or other origin) the spec came from, if any.
    """

    def __init__(self, problems: Sequence[SpecProblem], source: str | None = None) -> None:
        """Build the error from all the problems found at once."""
        self.problems = tuple(problems)
        self.source = source
        where = f"{source}: " if source else ""
        if len(self.problems) == 1 and not self.problems[0].location:
            # the file as a whole (unreadable, not TOML/JSON) or an unknown preset
            super().__init__(f"{where}{self.problems[0].message}")
            return
        lines = "; ".join(str(p) for p in self.problems)
        noun = "problem" if len(self.problems) == 1 else "problems"
        super().__init__(f"{where}invalid mode spec ({len(self.problems)} {noun}): {lines}")


class UnknownSessionError(ModefsmError):
    """No session has this ``sessionId`` (ACP answers ``-32002`` resource not found).

    Attributes:
        session_id: the id asked for.
    """

    def __init__(self, session_id: str) -> None:
        """Build the error for *session_id*."""
        self.session_id = session_id
        super().__init__(f"unknown sessionId {session_id!r}")


class SessionExistsError(ModefsmError):
    """A session with this ``sessionId`` already exists.

    Attributes:
        session_id: the id that is already in use.
    """

    def __init__(self, session_id: str) -> None:
        """Build the error for *session_id*."""
        self.session_id = session_id
        super().__init__(f"sessionId {session_id!r} already exists")


class InvalidParamsError(ModefsmError):
    """A request parameter does not fit (ACP answers ``-32602`` invalid params).

    Attributes:
        field: the ACP field at fault (``modeId``, ``value``, ``configId``, ...).
        value: the value received.
        valid: the values that would have been accepted, in spec order.
    """

    def __init__(self, field: str, value: object, valid: Sequence[str], message: str) -> None:
        """Build the error; *message* is the full human-readable sentence."""
        self.field = field
        self.value = value
        self.valid = tuple(valid)
        super().__init__(message)

    def to_data(self) -> dict[str, object]:
        """Return the JSON-RPC ``error.data`` object: ``{"field", "value", "valid", "message"}``."""
        return {
            "field": self.field,
            "value": self.value,
            "valid": list(self.valid),
            "message": str(self),
        }


class UnknownModeError(InvalidParamsError):
    """A mode id that the session does not advertise in ``availableModes``."""

    def __init__(self, value: object, valid: Sequence[str], field: str = "modeId") -> None:
        """Build the error for *value* received in *field*."""
        listed = ", ".join(repr(v) for v in valid)
        super().__init__(
            field,
            value,
            valid,
            f"{field}: unknown mode {value!r}; available modes: {listed}",
        )


class UnknownConfigOptionError(InvalidParamsError):
    """A ``configId`` that is not one of the session's ``configOptions``."""

    def __init__(self, value: object, valid: Sequence[str]) -> None:
        """Build the error for the *value* received as ``configId``."""
        listed = ", ".join(repr(v) for v in valid)
        super().__init__(
            "configId",
            value,
            valid,
            f"configId: unknown config option {value!r}; config options: {listed}",
        )


class InvalidValueError(InvalidParamsError):
    """A value of the wrong type (a boolean where a mode id is expected)."""

    def __init__(self, field: str, value: object, valid: Sequence[str], expected: str) -> None:
        """Build the error: *field* should have been *expected*."""
        listed = ", ".join(repr(v) for v in valid)
        super().__init__(
            field,
            value,
            valid,
            f"{field}: expected {expected}, got {value!r}; valid values: {listed}",
        )


class TransitionNotAllowedError(InvalidParamsError):
    """The spec's policy does not allow this change from the session's current mode.

    Attributes:
        session_id: the session.
        source: the session's current mode.
        dest: the mode asked for.
        origin: who asked (``set_mode``, ``set_config_option``, ``switch_mode``, ``restore``).
    """

    def __init__(
        self,
        *,
        session_id: str,
        source: str,
        dest: str,
        origin: str,
        allowed: Sequence[str],
        field: str = "modeId",
    ) -> None:
        """Build the error; *allowed* lists the modes this origin may reach from *source*."""
        self.session_id = session_id
        self.source = source
        self.dest = dest
        self.origin = origin
        listed = ", ".join(repr(v) for v in allowed) or "none"
        super().__init__(
            field,
            dest,
            allowed,
            f"{field}: {origin} may not change session {session_id!r} from mode {source!r} "
            f"to {dest!r}; allowed from {source!r}: {listed}",
        )


class StaleOptionError(TransitionNotAllowedError):
    """A stale approval refused: the mode changed while the permission request was open.

    The option's target (as shown) is not restorable, or the policy does not let a switch
    reach it from the mode the session is in now; *allowed* lists the modes a stale
    approval could still reach.
    """


class NoSwitchError(ModefsmError):
    """The agent proposed a ``switch_mode`` from a mode the spec defines no switch for.

    This is a bug in the agent's tool code, not a client mistake.

    Attributes:
        session_id: the session.
        mode: its current mode.
    """

    def __init__(self, session_id: str, mode: str) -> None:
        """Build the error for *session_id* in *mode*."""
        self.session_id = session_id
        self.mode = mode
        super().__init__(f"session {session_id!r}: mode {mode!r} has no switch to propose")


class AskClosedError(ModefsmError):
    """An answer for a tool call's permission request that is no longer open.

    The ask was settled already, withdrawn by a mode change, cancelled, or its session
    closed; the answer changes nothing.

    Attributes:
        session_id: ACP ``sessionId``, or ``None`` when the engine never asked it.
        tool_call_id: ACP ``toolCallId`` of the tool call asked about.
    """

    def __init__(self, session_id: str | None, tool_call_id: str) -> None:
        """Build the error for the ask of *tool_call_id* in *session_id*."""
        self.session_id = session_id
        self.tool_call_id = tool_call_id
        where = "" if session_id is None else f"session {session_id!r}: "
        super().__init__(
            f"{where}toolCallId {tool_call_id!r} has no open permission request (settled, "
            "withdrawn, cancelled or never asked); the answer changes nothing"
        )


class AskLimitError(ModefsmError):
    """A session already holds the most open permission requests for tool calls it may.

    Attributes:
        session_id: ACP ``sessionId``.
        limit: the bound (:data:`~modefsm.engine.MAX_OPEN_ASKS`).
    """

    def __init__(self, session_id: str, limit: int) -> None:
        """Build the error for *session_id*, bounded at *limit* open asks."""
        self.session_id = session_id
        self.limit = limit
        super().__init__(
            f"session {session_id!r} already has {limit} open permission requests for tool "
            "calls; settle or cancel one first (the tool call was not decided)"
        )


class HookError(ModefsmError):
    """A host ``before_change`` callback raised, so the change was not made.

    Attributes:
        hook: the callback's qualified name.
        error: the exception it raised.
    """

    def __init__(self, hook: str, error: BaseException) -> None:
        """Build the error for *hook* that raised *error*."""
        self.hook = hook
        self.error = error
        super().__init__(f"before_change hook {hook} refused the change: {error!r}")


class ChangeRefused(HookError):  # noqa: N818 - a veto, not a failure
    """A host's veto of a change: raise it from a ``before_change`` hook.

    Nothing changes; the refusal is logged (``hook_failed``) and the client gets a
    JSON-RPC error with *code* (``-32602`` invalid params unless the host chooses another)
    and *message* as they are, never ``-32603``. A hook that raises modefsm's own
    :class:`InvalidParamsError` is answered the same way, with that error's code and data.

    Example:
        >>> def no_yolo(change):
        ...     if change.to_mode == "bypassPermissions":
        ...         raise ChangeRefused("bypassPermissions is off in this workspace")

    Attributes:
        code: the JSON-RPC error code the client gets.
        data: the error's ``data`` (``None``: ``{"message": message}``).
        hook: the refusing callback's qualified name, set when the engine catches it.
        error: the error itself (as for any :class:`HookError`).
    """

    def __init__(
        self, message: str, *, code: int = INVALID_PARAMS, data: dict[str, object] | None = None
    ) -> None:
        """Build the veto; *message* is what the client reads."""
        self.hook = ""
        self.error = self
        self.code = code
        self.data = data
        ModefsmError.__init__(self, message)


class LogError(ModefsmError):
    """The transition log cannot be opened, written or read.

    Attributes:
        path: the file, if the log is a file.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        """Build the error; *message* says what failed."""
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class DiagramError(ModefsmError):
    """A diagram cannot be drawn as asked.

    Raised when Graphviz's ``dot`` is missing for SVG or PNG output, when a transition log
    holds no records of the spec drawn, or when the session to highlight is not in it.
    """


class FrameError(ModefsmError):
    """A JSON-RPC frame refused on the wire, before the SDK sees it.

    Attributes:
        code: the JSON-RPC error code: :data:`PARSE_ERROR` (not JSON, or not Unicode
            text) or :data:`INVALID_REQUEST` (JSON, but not a valid JSON-RPC 2.0 frame).
        details: what is wrong, in one sentence.
        request_id: the id to answer with; ``None`` when the id cannot be known.
        answer: whether the frame gets an error answer: requests and frames of unknown
            kind do, notifications and responses never do.
        limit: the limit the frame exceeds, as ``(name, value)`` (``("bytes", 52428800)``,
            ``("values", ...)``, ``("depth", ...)``, ``("id_chars", ...)``), or ``None``;
            the answer's ``data`` names it (``limit``, ``max``).
    """

    def __init__(
        self,
        code: int,
        details: str,
        *,
        request_id: object = None,
        answer: bool = True,
        limit: tuple[str, int] | None = None,
    ) -> None:
        """Build the error; *details* says what is wrong with the frame."""
        self.code = code
        self.details = details
        self.request_id = request_id
        self.answer = answer
        self.limit = limit
        super().__init__(f"{ERROR_MESSAGES[code]}: {details}")
