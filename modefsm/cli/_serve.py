"""``modefsm serve``: a runnable stdio ACP agent hosting a spec, with a scripted prompt turn.

The agent's ``session/prompt`` is small and deterministic so that any client can
exercise every mode path:

- in a mode that has a switch (``architect`` in the seed preset), the prompt proposes it
  through ``session/request_permission``, with the prompt's text as the plan, and answers
  with a message saying how it ended;
- in any other mode, it answers one ``agent_message_chunk`` naming the current mode.

stdout carries only ACP messages. The transition log goes to ``--log FILE`` (JSON
lines), or to stderr without one. Frames are checked on the wire (:mod:`modefsm.protocol`): a
malformed one is answered with a JSON-RPC error and never reaches the agent.

Nothing waits on stderr for long: diagnostics are written only when the pipe has room
(and at a bounded rate; the ones dropped are counted), and a record of the log on stderr
waits at most :data:`STDERR_LOG_WAIT` seconds for room, after which the change fails
(``-32603``, mode unchanged) -- and later ones fail at once while the pipe stays full.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from acp.schema import AgentMessageChunk, PromptResponse, TextContentBlock

from modefsm.errors import LogError, ModefsmError
from modefsm.log._records import (
    EVENT_CHANGED,
    EVENT_CREATED,
    TransitionLog,
    ignore_file_size_signal,
    previous_of,
)
from modefsm.protocol._agent import ModeAgent, RestoreSource
from modefsm.protocol._transport import BoundedPipeWriter, Diagnostics, OutputClosedError, run_agent
from modefsm.restore import RestorePoint
from modefsm.spec import ModeSpec
from modefsm.store import SessionMoved

if TYPE_CHECKING:
    from modefsm.store._postgres import PgStore

__all__ = ["STDERR_LOG_WAIT", "ScriptedAgent", "check_log_path", "index_path", "serve"]

STDERR_LOG_WAIT = 2.0
"""Seconds a record of the log on stderr (no ``--log``) waits for the reader to make room."""


class ScriptedAgent(ModeAgent):
    """A :class:`~modefsm.protocol.ModeAgent` whose prompt turn is a fixed script (see module)."""

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        """``session/prompt``: propose the mode's switch, or say which mode the session is in."""
        del kwargs
        session = self.session(session_id)
        text = " ".join(getattr(block, "text", "") for block in prompt).strip()
        cancelled = self.begin_turn(session_id)
        try:
            if self.engine.spec.switch_from(session.state) is not None:
                try:
                    result = await self.propose_switch(
                        session_id, plan=text or "## Plan", cancelled=cancelled
                    )
                except ConnectionError:  # the client hung up; logged as session_closed
                    return PromptResponse(stop_reason="cancelled")
                if result.approved:
                    reply = f"Approved: now in {self.session(session_id).state} mode."
                else:
                    reply = f"Not switched ({result.reason}): still in {session.state} mode."
            else:
                reply = f"Mode {session.state}: {text}" if text else f"Mode {session.state}."
            if cancelled.is_set():
                return PromptResponse(stop_reason="cancelled")
            await self.engine.notify(
                session_id,
                AgentMessageChunk(
                    session_update="agent_message_chunk",
                    content=TextContentBlock(type="text", text=reply),
                ),
            )
            return PromptResponse(stop_reason="end_turn")
        finally:
            self.end_turn(session_id, cancelled)


def _check_stdio() -> None:
    """Refuse to start unless stdin and stdout are pipes, sockets or terminals.

    Raises:
        ModefsmError: one of them is a regular file or a device such as ``/dev/null``
            (asyncio's pipe transport cannot serve those).
    """
    for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)):
        mode = os.fstat(stream.fileno()).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stream.isatty()):
            msg = (
                f"{name} must be a pipe or a terminal: an ACP client starts `modefsm serve` "
                "with pipes (to try it by hand: cat requests.jsonl | modefsm serve | cat)"
            )
            raise ModefsmError(msg)


_HEAD = 64 * 1024
_RECORD_START = b'{"timestamp":"'


def check_log_path(path: Path) -> None:
    """Refuse to append records to *path* unless it is missing, empty or a transition log.

    A transition log that ``serve`` writes begins with a modefsm line (a JSON object whose
    ``event`` starts with ``modefsm.``), or, after a crash during its first write, with
    the start of a record. Anything else (notes, a binary file, another program's log) is
    left as it is; so is a file at :func:`index_path` that is not a restore index. Nothing
    is written; a file is read only if it is a regular file.

    Raises:
        LogError: *path* (or its index path) is not a regular file, cannot be read, or is
            not a transition log (a restore index).
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise LogError(f"cannot read the transition log: {exc.strerror}", str(path)) from None
    if not stat.S_ISREG(mode):
        TransitionLog.to_file(path).close()  # raises the LogError that names the kind of file
    try:
        with path.open("rb") as file:
            head = file.read(_HEAD)
    except OSError as exc:
        raise LogError(f"cannot read the transition log: {exc.strerror}", str(path)) from None
    if not head or _is_log_start(head):
        _check_index(index_path(path))
        return
    msg = (
        "exists and is not a transition log (its first line is not a modefsm record): "
        "not appended to"
    )
    raise LogError(msg, str(path))


def _check_index(path: Path) -> None:
    """Refuse a restore index path that holds something else (it is never overwritten)."""
    from modefsm.restore import is_index  # noqa: PLC0415 - sqlite3 only when serving

    try:
        status = path.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise LogError(f"cannot read the restore index: {exc.strerror}", str(path)) from None
    if not stat.S_ISREG(status.st_mode):
        raise LogError("not a regular file: the restore index must be one", str(path))
    if status.st_size and not is_index(path):
        raise LogError("exists and is not a restore index: not overwritten", str(path))


def _is_log_start(head: bytes) -> bool:
    line, newline, _rest = head.partition(b"\n")
    if not newline:
        return line.startswith(_RECORD_START)  # a first record torn by a crash
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError:
        return line.startswith(_RECORD_START)
    event = data.get("event") if isinstance(data, dict) else None
    return isinstance(event, str) and event.startswith("modefsm.")


def index_path(log_path: Path) -> Path:
    """The restore index kept next to the log *log_path*: the same name plus ``.index``."""
    return log_path.with_name(log_path.name + ".index")


class _StoreLog(TransitionLog):
    """The engine's log over a PostgreSQL session store (``serve --store``).

    Committed records go through :meth:`PgStore.append` from the head this process last
    saw of the session; rejections and diagnostics go to the store's own log. A change of
    a session that another worker moved since fails with a :class:`LogError` (JSON-RPC
    ``-32603``) naming the ``sessionId`` and changes nothing: ``session/load`` it again.
    """

    def __init__(self, store: PgStore) -> None:
        """Write through *store*."""
        super().__init__(None, path=store.log.path)
        self.store = store
        self._heads: dict[str, RestorePoint] = {}

    def restore_point(self, session_id: str) -> RestorePoint | None:
        """The session's point in the store (remembered as the head of later changes)."""
        point = self.store.restore_point(session_id)
        if point is not None:
            self._heads[session_id] = point
        return point

    def write(self, event: str, fields: dict[str, Any]) -> None:
        """Append a committed record to the store, or note any other event in the log."""
        if event not in {EVENT_CREATED, EVENT_CHANGED}:
            self.store.note(event, fields)
            return
        session_id = fields["session_id"]
        head = None if event == EVENT_CREATED else self._heads.get(session_id)
        try:
            digest = self.store.append(event, fields, head)
        except (SessionMoved, ValueError):
            msg = (
                f"sessionId {session_id} was changed by another process; "
                "load it again (session/load) to continue"
            )
            raise LogError(msg, self.path) from None
        value, keep = previous_of(fields["origin"], fields["from_mode"])
        previous = (head.previous if head is not None else None) if keep else value
        self._heads[session_id] = RestorePoint(
            session_id, fields["to_mode"], fields["seq"], previous, digest
        )

    def close(self) -> None:
        """Close the connection and the log file."""
        self.store.close()
        self.store.log.close()


def serve(
    spec: ModeSpec,
    log_path: Path | None = None,
    *,
    fsync: bool = False,
    store: str | None = None,
) -> int:
    """Serve *spec* over stdio until the client closes stdin; return the exit status.

    Every request read is answered before the end (see :func:`modefsm.protocol.run_agent`);
    the status is ``0`` then, and ``1`` when the client closed stdout first (one line on
    stderr says how many requests were left unanswered).

    Args:
        spec: the modes and policy.
        log_path: the JSON-lines transition log; its restore index (SQLite, see
            :func:`index_path`) answers ``session/load`` after a restart. ``None`` writes the
            log to stderr and cannot restore after a restart.
        fsync: sync every record to disk before it takes effect.
        store: a ``postgresql://`` URL: committed records go to that database, shared with
            other workers (``session/load`` reads it); *log_path* (or stderr) gets this
            worker's JSON lines, without a restore index.

    Raises:
        LogError: the log file cannot be opened, or exists and is not a transition log
            (see :func:`check_log_path`).
    """
    _check_stdio()
    ignore_file_size_signal()
    if log_path is not None:
        check_log_path(log_path)
    log: TransitionLog
    restore: RestoreSource | None
    if store is not None:
        from modefsm.store._postgres import PgStore  # noqa: PLC0415 - psycopg is optional

        if log_path is None:
            stream = BoundedPipeWriter(sys.stderr.fileno(), STDERR_LOG_WAIT)
            lines = TransitionLog.to_stream(stream, path="<stderr>")  # type: ignore[arg-type]
        else:
            lines = TransitionLog.to_file(log_path)
        try:
            log = restore = _StoreLog(PgStore(store, log=lines))
        except LogError:
            lines.close()
            raise
    elif log_path is None:
        stream = BoundedPipeWriter(sys.stderr.fileno(), STDERR_LOG_WAIT)
        log = TransitionLog.to_stream(stream, path="<stderr>")  # type: ignore[arg-type]
        restore = None
    else:
        log = TransitionLog.to_file(log_path, fsync=fsync, index=index_path(log_path))
        restore = log.index
    agent = ScriptedAgent(spec, log=log, restore=restore, unstable=True)
    diagnostics = Diagnostics(sys.stderr.fileno(), prefix="modefsm serve")
    root = logging.getLogger()
    root.addHandler(diagnostics)
    logging.captureWarnings(True)  # noqa: FBT003 - the logging API
    status = 0
    try:
        transport = asyncio.run(run_agent(agent))
    except OutputClosedError as exc:
        diagnostics.say(str(exc), force=True)
        status = 1
    else:
        if transport.open_requests:
            noun = "request" if transport.open_requests == 1 else "requests"
            diagnostics.say(
                f"{transport.open_requests} {noun} still unanswered at the end of input",
                force=True,
            )
        if transport.unrouted:
            noun = "notification" if transport.unrouted == 1 else "notifications"
            diagnostics.say(
                f"ignored {transport.unrouted} {noun} of methods not served", force=True
            )
    finally:
        log.close()
        logging.captureWarnings(False)  # noqa: FBT003
        root.removeHandler(diagnostics)
        diagnostics.close()
    return status
