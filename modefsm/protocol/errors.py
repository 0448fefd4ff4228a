"""JSON-RPC errors as ACP clients get them: the one place that builds them.

Two kinds of answer, both from the codes named in :mod:`modefsm.errors`:

- a frame refused on the wire, before the SDK sees it (:func:`error_response`,
  :func:`frame_refusal`): a whole JSON-RPC response, ``{"jsonrpc", "id", "error"}``;
- an error of a request the SDK routed (:func:`request_error`, :func:`acp_errors`):
  the SDK's ``RequestError``, which the SDK answers with.

How modefsm's errors map (a failed request changes nothing):

===============================================  ==========================================
error                                            JSON-RPC error
===============================================  ==========================================
:class:`~modefsm.errors.UnknownSessionError`     ``-32002``; ``data``: v1 ``{"uri": id}``,
                                                 v2 ``{"sessionId": id}``
:class:`~modefsm.errors.InvalidParamsError`      ``-32602``; ``data``: field, value, valid,
                                                 message
:class:`~modefsm.errors.ChangeRefused`           the host's code and message (``data``: the
                                                 host's, or ``{"message": ...}``)
:class:`~modefsm.errors.HookError`               the ``RequestError`` the hook raised, else
                                                 ``-32603``
:class:`~modefsm.errors.LogError`                ``-32603``; ``data``: ``{"message": ...}``
:class:`~modefsm.errors.AskLimitError`           ``-32600``; ``data``: ``{"message", "limit":
                                                 "open_asks", "max"}``
===============================================  ==========================================

This module is shared by :mod:`modefsm.protocol`'s subpackages (``v1``, ``v2``,
``transport``); it imports the SDK's ``RequestError`` only.
"""

from __future__ import annotations

import contextlib
from typing import Any

from acp.exceptions import RequestError

from modefsm.errors import (
    ERROR_MESSAGES,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    RESOURCE_NOT_FOUND,
    AskLimitError,
    ChangeRefused,
    FrameError,
    HookError,
    InvalidParamsError,
    LogError,
    UnknownSessionError,
)

__all__ = [
    "acp_errors",
    "error_object",
    "error_response",
    "frame_refusal",
    "invalid_params",
    "request_error",
    "session_not_found",
]


def error_object(code: int, message: str | None = None, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC ``error`` member: *code*, *message* (the code's standard one if ``None``).

    ``data`` is left out when ``None``.

    >>> error_object(-32602, data={"field": "modeId"})
    {'code': -32602, 'message': 'Invalid params', 'data': {'field': 'modeId'}}
    """
    error: dict[str, Any] = {
        "code": code,
        "message": ERROR_MESSAGES.get(code, "Server error") if message is None else message,
    }
    if data is not None:
        error["data"] = data
    return error


def error_response(
    request_id: Any, code: int, message: str | None = None, data: Any = None
) -> dict[str, Any]:
    """A whole JSON-RPC error response answering the request *request_id* (``None``: null).

    >>> error_response(7, -32600, data={"details": "method: a string"})
    {'jsonrpc': '2.0', 'id': 7, 'error': {'code': -32600, 'message': 'Invalid request', \
'data': {'details': 'method: a string'}}}
    """
    return {"jsonrpc": "2.0", "id": request_id, "error": error_object(code, message, data)}


def frame_refusal(error: FrameError) -> dict[str, Any]:
    """The answer to a frame refused on the wire: ``data`` has ``details`` (and the limit)."""
    data: dict[str, Any] = {"details": error.details}
    if error.limit is not None:
        data["limit"], data["max"] = error.limit
    return error_response(error.request_id, error.code, None, data)


def invalid_params(message: str, data: dict[str, Any]) -> RequestError:
    """A ``-32602`` whose ``data`` (naming the field) gets ``message`` too."""
    return RequestError(INVALID_PARAMS, message, {**data, "message": message})


def session_not_found(session_id: str, version: int = 1) -> RequestError:
    """The ``-32002`` error for *session_id*.

    ACP v1's ``data`` is ``{"uri": sessionId}``; v2's (*version* 2) ``{"sessionId": ...}``.
    """
    if version == 2:  # noqa: PLR2004
        return RequestError(
            RESOURCE_NOT_FOUND, f"sessionId: {session_id}", {"sessionId": session_id}
        )
    message = f"sessionId: {UnknownSessionError(session_id)}"
    return RequestError(RESOURCE_NOT_FOUND, message, {"uri": session_id})


def request_error(error: BaseException, version: int = 1) -> RequestError | None:
    """The JSON-RPC error a client gets for *error*, or ``None`` if it is not modefsm's.

    See the module's table; *version* is the ACP version of the connection (it shapes
    ``-32002``'s ``data``).
    """
    if isinstance(error, UnknownSessionError):
        return session_not_found(error.session_id, version)
    if isinstance(error, InvalidParamsError):
        return RequestError(INVALID_PARAMS, str(error), error.to_data())
    if isinstance(error, ChangeRefused):
        data = error.data if error.data is not None else {"message": str(error)}
        return RequestError(error.code, str(error), data)
    if isinstance(error, HookError) and isinstance(error.error, RequestError):
        return error.error
    if isinstance(error, HookError | LogError | AskLimitError):
        details: dict[str, Any] = {"message": str(error)}
        code = INTERNAL_ERROR
        if isinstance(error, AskLimitError):  # the client's to relieve, as MAX_OPEN's refusal
            details |= {"limit": "open_asks", "max": error.limit}
            code = INVALID_REQUEST
        return RequestError(code, str(error), details)
    return None


def acp_errors(version: int = 1) -> contextlib.AbstractContextManager[None]:
    """Turn modefsm errors raised inside the block into the ACP JSON-RPC errors.

    Args:
        version: the ACP version of the connection (``1`` or ``2``).

    Raises:
        RequestError: as :func:`request_error` maps it, not chained to the original
            (other exceptions pass unchanged).
    """
    return _ACP_ERRORS[version]


class _ACPErrors(contextlib.AbstractContextManager[None]):
    """What :func:`acp_errors` returns: one shared, stateless context manager per version.

    A class rather than ``@contextlib.contextmanager``: every ACP request enters it, and a
    generator-based context manager costs a generator and a wrapper object per use (see
    the documentation's Performance page).
    """

    def __init__(self, version: int) -> None:
        self._version = version

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, traceback: object) -> None:
        if exc is None:
            return
        error = request_error(exc, self._version)
        if error is not None and error is not exc:
            raise error from None


_ACP_ERRORS = {1: _ACPErrors(1), 2: _ACPErrors(2)}
