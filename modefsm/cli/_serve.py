"""``modefsm serve``: a runnable stdio ACP agent hosting a spec, with a scripted prompt turn.

The agent's ``session/prompt`` is small and deterministic so that any client can
exercise every mode path:

- a prompt whose every non-empty line is a tool line (:data:`TOOL_VERBS`: ``read PATH``,
  ``edit PATH``, ``delete PATH``, ``move PATH``, ``search TEXT``, ``run COMMAND``,
  ``fetch URL``, ``think TEXT``) acts those tool calls out, in order, each through
  :meth:`ModeAgent.run_tool <modefsm.protocol.ModeAgent.run_tool>`: decided by the
  session's committed mode at that moment (asked with ``session/request_permission``
  where the mode says ``ask``), and when it may run, "run" by a pretend tool that touches
  nothing and answers a text. The turn then answers one ``agent_message_chunk``, a line
  per tool call (``edit notes.txt: failed (Plan mode: no edits and no commands)``). At
  most :data:`MAX_TOOL_LINES` tool lines a prompt;
- otherwise, in a mode that has a switch (``architect`` in the seed preset), the prompt
  proposes it through ``session/request_permission``, with the prompt's text as the plan,
  and answers with a message saying how it ended (if the mode changed to one without a
  switch before the offer, it answers as in that mode);
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
import contextlib
import logging
import os
import signal
import stat
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson
from acp.schema import AgentMessageChunk, PromptResponse, TextContentBlock, UserMessageChunk

from modefsm.engine import ToolCall
from modefsm.errors import LogError, ModefsmError, NoSwitchError
from modefsm.log import (
    ConversationStore,
    TransitionLog,
    check_private,
    ignore_file_size_signal,
    journal_path,
)
from modefsm.protocol import require_v2
from modefsm.protocol.errors import invalid_params
from modefsm.protocol.transport import (
    SUPPORTED_PROTOCOLS,
    BoundedPipeWriter,
    Diagnostics,
    OutputClosedError,
    serve_negotiated,
)
from modefsm.protocol.v1 import ModeAgent
from modefsm.spec import ModeSpec, ToolKind
from modefsm.store import LogStore, SessionStore, open_store

__all__ = [
    "MAX_TOOL_LINES",
    "STDERR_LOG_WAIT",
    "TOOL_VERBS",
    "HttpAccess",
    "ScriptedAgent",
    "check_log_path",
    "conversation_path",
    "index_path",
    "serve",
    "tool_script",
]

_T = TypeVar("_T")

STDERR_LOG_WAIT = 2.0
"""Seconds a record of the log on stderr (no ``--log``) waits for the reader to make room."""


@dataclass(frozen=True)
class HttpAccess:
    """Who may use ``serve --http`` (see :mod:`modefsm.protocol.transport._access`).

    Attributes:
        token_file: the file holding the token (created with a new one if missing);
            ``None``: a new token in a new ``0600`` file of
            :func:`~modefsm.protocol.transport._access.token_directory`, removed at exit.
        no_auth: no token at all (a loopback address only).
        allow_hosts: ``Host`` values answered besides the loopback names and the bound
            address.
        allow_origins: browser origins accepted besides loopback ones.
    """

    token_file: Path | None = None
    no_auth: bool = False
    allow_hosts: tuple[str, ...] = ()
    allow_origins: tuple[str, ...] = ()


class ScriptedAgent(ModeAgent):
    """A :class:`~modefsm.protocol.ModeAgent` whose prompt turn is a fixed script (see module).

    Its conversation (the prompt's blocks as ``user_message_chunk``s, its own
    ``agent_message_chunk``s, the ``switch_mode`` tool calls) is kept write-ahead in the
    agent's :class:`~modefsm.log.ConversationStore` and replayed on ``session/load``.
    """

    replay_on_load = True

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        """``session/prompt``: act out tool calls, propose the mode's switch, or say the mode.

        Raises:
            RequestError: ``-32602`` naming ``prompt`` for more than
                :data:`MAX_TOOL_LINES` tool lines (nothing is run).
        """
        del kwargs
        session = await self.refresh(session_id)  # the mode another process may have set
        text = " ".join(getattr(block, "text", "") for block in prompt).strip()
        script = tool_script("\n".join(getattr(block, "text", "") for block in prompt))
        for block in prompt:
            self.record(
                session_id, UserMessageChunk(session_update="user_message_chunk", content=block)
            )
        cancelled = self.begin_turn(session_id)
        try:
            if script:
                return await self._act_out(session_id, script, cancelled)
            result = None
            if self.engine.spec.switch_from(session.state) is not None:
                try:
                    result = await self.propose_switch(
                        session_id, plan=text or "## Plan", cancelled=cancelled
                    )
                except NoSwitchError:  # the mode changed since the turn began: say which
                    result = None
                except ConnectionError:  # the client hung up; logged as session_closed
                    return PromptResponse(stop_reason="cancelled")
                if cancelled.is_set():  # session/cancel or session/close ended the turn
                    return PromptResponse(stop_reason="cancelled")
            if result is None:
                reply = f"Mode {session.state}: {text}" if text else f"Mode {session.state}."
            elif result.approved:
                reply = f"Approved: now in {session.state} mode."
            else:
                reply = f"Not switched ({result.reason}): still in {session.state} mode."
            if cancelled.is_set():
                return PromptResponse(stop_reason="cancelled")
            await self._reply(session_id, reply)
            return PromptResponse(stop_reason="end_turn")
        finally:
            self.end_turn(session_id, cancelled)

    async def _reply(self, session_id: str, reply: str) -> None:
        message = AgentMessageChunk(
            session_update="agent_message_chunk",
            content=TextContentBlock(type="text", text=reply),
        )
        self.record(session_id, message)
        await self.engine.notify(session_id, message)

    async def _act_out(
        self, session_id: str, script: list[tuple[str, str]], cancelled: asyncio.Event
    ) -> PromptResponse:
        """Run the prompt's tool lines through :meth:`run_tool`, then say how each ended."""
        lines = []
        for verb, argument in script:
            kind, name, label = TOOL_VERBS[verb]
            title = f"{label} {argument}"
            call = ToolCall(f"call_{verb}_{uuid.uuid4().hex[:12]}", kind, name, title)

            async def pretend(title: str = title) -> str:
                return f"{title}: acted out (modefsm serve touches nothing)"

            try:
                result = await self.run_tool(session_id, call, pretend, cancelled=cancelled)
            except ConnectionError:  # the client hung up while deciding
                return PromptResponse(stop_reason="cancelled")
            if cancelled.is_set():  # session/cancel or session/close ended the turn
                return PromptResponse(stop_reason="cancelled")
            line = f"{verb} {argument}: {result.status}"
            lines.append(line if result.ran else f"{line} ({result.text})")
        await self._reply(session_id, "\n".join(lines))
        return PromptResponse(stop_reason="end_turn")


TOOL_VERBS: dict[str, tuple[ToolKind, str, str]] = {
    "read": ("read", "read_file", "Read"),
    "edit": ("edit", "edit_file", "Edit"),
    "delete": ("delete", "delete_file", "Delete"),
    "move": ("move", "move_file", "Move"),
    "search": ("search", "search", "Search"),
    "run": ("execute", "run_command", "Run"),
    "fetch": ("fetch", "fetch", "Fetch"),
    "think": ("think", "think", "Think"),
}
"""The scripted agent's tool lines: ``verb -> (ACP ToolKind, tool name, title prefix)``; the
tool name is what the spec's ``tools[].name`` patterns match."""

MAX_TOOL_LINES = 32
"""The most tool lines one prompt of the scripted agent may act out."""


def tool_script(text: str) -> list[tuple[str, str]]:
    """The tool lines of a prompt's *text*, ``[(verb, argument), ...]``; ``[]`` if it is not one.

    A prompt is a tool script when every non-empty line is ``VERB ARGUMENT``, *VERB* one
    of :data:`TOOL_VERBS` (lowercase) and *ARGUMENT* not empty.

    Raises:
        RequestError: ``-32602`` naming ``prompt`` for more than :data:`MAX_TOOL_LINES`.
    """
    script = []
    for line in text.splitlines():
        if not line.strip():
            continue
        verb, _space, argument = line.strip().partition(" ")
        if verb not in TOOL_VERBS or not argument.strip():
            return []
        script.append((verb, argument.strip()))
    if len(script) > MAX_TOOL_LINES:
        text = f"prompt: at most {MAX_TOOL_LINES} tool lines, not {len(script)}"
        raise invalid_params(text, {"field": "prompt", "max": MAX_TOOL_LINES})
    return script


def _check_stdio() -> None:
    """Refuse to start unless stdin and stdout are pipes, sockets, files or devices.

    A regular file is served (stdin: a recorded script, its requests one after the other's
    answer; stdout: every frame written whole); so is a character device such as
    ``/dev/null``.

    Raises:
        ModefsmError: one of them is a directory, a block device or closed.
    """
    for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)):
        try:
            mode = os.fstat(stream.fileno()).st_mode
        except (OSError, ValueError, AttributeError):
            mode = 0
        if not (
            stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) or stat.S_ISREG(mode)
        ):
            msg = (
                f"{name} must be a pipe, a file or a terminal: an ACP client starts "
                "`modefsm serve` with pipes (to try it by hand: modefsm serve < requests.jsonl)"
            )
            raise ModefsmError(msg)


_HEAD = 64 * 1024
_RECORD_START = b'{"timestamp":"'


def check_log_path(path: Path, *, index: bool = True) -> None:
    """Refuse to append records to *path* unless it is missing, empty or a transition log.

    A transition log that ``serve`` writes begins with a modefsm line (a JSON object whose
    ``event`` starts with ``modefsm.``), or, after a crash during its first write, with
    the start of a record. Anything else (notes, a binary file, another program's log) is
    left as it is; so is a file at :func:`index_path` that is not a restore index. Nothing
    is written; a file is read only if it is a regular file.

    With ``index=False`` the index is not looked at (``serve`` starts whatever it holds
    and answers restores with an error naming the rebuild command instead).

    Each of these files that exists (the log, its index and SQLite's side files, its
    conversation journal) must not be writable by other users.

    Raises:
        LogError: *path* (or its index path) is not a regular file, cannot be read, or is
            not a transition log (a restore index), or other users may write it, its
            index or its journal.
    """
    try:
        mode: int | None = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise LogError(f"cannot read the transition log: {exc.strerror}", str(path)) from None
    if mode is not None and not stat.S_ISREG(mode):
        # raises the LogError that names the kind of file, before the index and journal
        # paths are made from its name (``.`` has none)
        TransitionLog.to_file(path).close()
    _check_modes(path)
    if mode is None:
        if index:
            _check_index(index_path(path))
        return
    try:
        with path.open("rb") as file:
            head = file.read(_HEAD)
    except OSError as exc:
        raise LogError(f"cannot read the transition log: {exc.strerror}", str(path)) from None
    if not head or _is_log_start(head):
        if index:
            _check_index(index_path(path))
        return
    msg = (
        "exists and is not a transition log (its first line is not a modefsm record): "
        "not appended to"
    )
    raise LogError(msg, str(path))


def _check_modes(path: Path) -> None:
    """Refuse a log whose file, index or journal others may write (see :func:`check_log_path`)."""
    from modefsm.store import check_index_modes  # noqa: PLC0415 - sqlite3 only when serving

    for file, what in (
        (path, "the transition log"),
        (conversation_path(path), "the conversation journal"),
    ):
        with contextlib.suppress(OSError):
            check_private(file.stat(), file, what)
    check_index_modes(index_path(path))


def _check_index(path: Path) -> None:
    """Refuse a restore index path that holds something else (it is never overwritten)."""
    from modefsm.store import check_index_path  # noqa: PLC0415 - sqlite3 only when serving

    check_index_path(path, doing="read")


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


def conversation_path(log_path: Path) -> Path:
    """The conversation journal kept next to the log *log_path*: its name + ``.conversation``."""
    return journal_path(log_path)


def serve(  # noqa: C901 - where each part of the agent lives, chosen once
    spec: ModeSpec,
    log_path: Path | None = None,
    *,
    fsync: bool = False,
    store: str | None = None,
    protocols: tuple[int, ...] = SUPPORTED_PROTOCOLS,
    http: tuple[str, int] | None = None,
    access: HttpAccess | None = None,
) -> int:
    """Serve *spec* over stdio until the client closes stdin (or over HTTP); the exit status.

    Over stdio, every request read is answered before the end (see
    :func:`modefsm.protocol.run_agent`); the status is ``0`` then, and ``1`` when the client
    closed stdout first (one line on stderr says how many requests were left unanswered).
    Over HTTP (*http*), it serves until SIGINT or SIGTERM (status ``0``): every connection
    shares one engine (see :class:`modefsm.protocol.SharedEngine`), log, store and
    conversation journal, so a session created on one connection can be loaded or
    resumed and changed on another, with one chained history. With a log file, ``SIGHUP``
    reopens it after a rotation (:meth:`modefsm.store.FileStore.reopen`; a rename is
    also followed at the next record without it).

    Args:
        spec: the modes and policy.
        log_path: the JSON-lines transition log; its restore index (SQLite, see
            :func:`index_path`) answers ``session/load`` after a restart, and the
            conversation journal next to it (:func:`conversation_path`) is replayed then.
            ``None`` writes the log to stderr and cannot restore after a restart.
        fsync: sync every record to disk before it takes effect.
        store: the session store as a path or URL (:func:`modefsm.store.open_store`);
            ``None`` uses *log_path*. Every process given the same log file (or store)
            shares one history: a session created in one can be loaded in another.
        protocols: the ACP versions served (``(1, 2)``: v1 and v2 clients, chosen by
            each connection's ``initialize.protocolVersion``; ``(1,)``: v1 only; ``(2,)``).
            The default is :data:`~modefsm.protocol.SUPPORTED_PROTOCOLS`: ``(1,)`` on SDK 0.12.
        http: ``(host, port)`` to serve streamable HTTP and WebSocket at
            ``http://host:port/acp`` (see :func:`modefsm.protocol.serve_http`) instead of stdio.
        access: who may use it (default: :class:`HttpAccess`, a new token). The listening
            line names the token's file; a bind that is not loopback warns once on stderr.

    Raises:
        LogError: the log file cannot be opened, or exists and is not a transition log
            (see :func:`check_log_path`).
        SdkFeatureError: *http* is given and the installed ACP SDK has no v2 (0.12; see
            :mod:`modefsm.protocol._sdk`).
        ModefsmError: stdin or stdout is not a pipe, a file or a terminal (stdio), or the HTTP
            address cannot be bound, or the ``http`` extra is not installed, or the token
            file is unusable (others may read it, no token in it), or ``no_auth`` is asked
            for an address that is not loopback.
    """
    served = None if http is None else _served(http, protocols, access or HttpAccess())
    if served is None:
        _check_stdio()
    ignore_file_size_signal()
    target: str | Path | None = store if store is not None else log_path
    if isinstance(target, str) and not target.startswith(("postgresql://", "postgres://")):
        target = Path(target)
    if isinstance(target, Path):
        check_log_path(target, index=False)
    log: TransitionLog | None = None
    shared: SessionStore
    if target is None:  # the records go to stderr; nothing is restorable after a restart
        stream = BoundedPipeWriter(sys.stderr.fileno(), STDERR_LOG_WAIT)
        log = TransitionLog.to_stream(stream, path="<stderr>")  # type: ignore[arg-type]
        shared = LogStore(log)
        conversation = ConversationStore()
    else:
        if not isinstance(target, Path):  # PostgreSQL: the worker's own log of its records
            log = _worker_log(log_path, fsync=fsync)
        try:
            shared = open_store(target, fsync=fsync, log=log)
        except LogError:
            if log is not None:
                log.close()
            raise
        journal = conversation_path(target) if isinstance(target, Path) else None
        try:
            conversation = ConversationStore(journal, fsync=fsync)
        except LogError:
            shared.close()
            raise

    def make_agent() -> ScriptedAgent:
        return ScriptedAgent(spec, store=shared, unstable=True, conversation=conversation)

    diagnostics = Diagnostics(sys.stderr.fileno(), prefix="modefsm serve")
    root = logging.getLogger()
    root.addHandler(diagnostics)
    logging.captureWarnings(True)  # noqa: FBT003 - the logging API
    hangup = (
        _reopener(shared, diagnostics) if isinstance(target, Path) or log_path is not None else None
    )
    try:
        if served is not None:
            return _serve_http(
                spec,
                shared,
                conversation,
                served=served,
                diagnostics=diagnostics,
                hangup=hangup,
            )
        return _serve_stdio(make_agent(), protocols, diagnostics, hangup)
    finally:
        shared.close()
        if log is not None:
            log.close()
        conversation.close()
        logging.captureWarnings(False)  # noqa: FBT003
        root.removeHandler(diagnostics)
        diagnostics.close()


def _reopener(store: SessionStore, diagnostics: Diagnostics) -> Callable[[], None]:
    """What ``SIGHUP`` does: reopen the log file after a rotation (only when there is a file).

    :meth:`SessionStore.reopen_async <modefsm.store.SessionStore.reopen_async>`, on a task
    of its own: the file store follows a renamed or truncated log at once (the loop serves
    on while it waits for the file's lock; signals that come meanwhile are one more reopen
    after it); a PostgreSQL worker's own log file is reopened (no lock). A failure is one
    line on stderr; the file store tries again at its next record.
    """
    running: list[asyncio.Task[None]] = []
    again = [False]

    async def reopen() -> None:
        while True:
            again[0] = False
            try:
                await store.reopen_async()
            except ModefsmError as exc:
                diagnostics.say(f"cannot reopen the log: {exc}", force=True)
            if not again[0]:
                return

    def hangup() -> None:
        if running and not running[0].done():
            again[0] = True
            return
        running[:] = [asyncio.get_running_loop().create_task(reopen())]

    return hangup


async def _on_hangup(main: Awaitable[_T], hangup: Callable[[], None] | None) -> _T:
    """Await *main*, calling *hangup* on ``SIGHUP`` between two steps of the loop."""
    if hangup is None or not hasattr(signal, "SIGHUP"):
        return await main
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, hangup)
    try:
        return await main
    finally:
        loop.remove_signal_handler(signal.SIGHUP)


def _worker_log(log_path: Path | None, *, fsync: bool) -> TransitionLog:
    """A PostgreSQL worker's JSON-lines log: *log_path*, or stderr (never blocking long)."""
    if log_path is not None:
        check_log_path(log_path, index=False)
        return TransitionLog.to_file(log_path, fsync=fsync)
    stream = BoundedPipeWriter(sys.stderr.fileno(), STDERR_LOG_WAIT)
    return TransitionLog.to_stream(stream, path="<stderr>")  # type: ignore[arg-type]


_HTTP_MODULES = (
    ("uvicorn", "uvicorn"),
    ("h11", "h11"),  # uvicorn's HTTP/1.1 parser
    ("starlette", "starlette"),
    ("acp.http.server", "agent-client-protocol[http]"),
    ("websockets", "websockets"),  # the WebSocket endpoint (uvicorn's protocol)
)
"""What ``serve --http`` imports, and the distribution that brings each."""


def _check_http_extra() -> None:
    """Refuse ``--http`` at once when a module it needs cannot be imported.

    Raises:
        ModefsmError: one line naming the missing distribution and the extra to install.
    """
    import importlib  # noqa: PLC0415 - only for --http

    for module, distribution in _HTTP_MODULES:
        try:
            importlib.import_module(module)
        except ImportError:
            msg = (
                f"--http needs the http extra ({distribution} is missing): "
                "pip install 'modefsm[http]'"
            )
            raise ModefsmError(msg) from None


@dataclass(frozen=True)
class _Served:
    """What ``serve --http`` serves: where, which versions, to whom, with which token."""

    address: tuple[str, int]
    protocols: tuple[int, ...]
    access: HttpAccess
    token: str | None


def _served(address: tuple[str, int], protocols: tuple[int, ...], access: HttpAccess) -> _Served:
    """What ``serve --http`` will serve, its token read or generated (``None``: ``--no-auth``).

    Raises:
        ModefsmError: the ``http`` extra is missing, ``--no-auth`` is asked for an address
            that is not loopback, or the token file is unusable.
    """
    require_v2("the HTTP transport (--http)", "http")
    _check_http_extra()
    from modefsm.protocol.transport import (  # noqa: PLC0415 - HTTP only
        is_loopback,
        new_token,
        read_token_file,
    )

    token: str | None = None
    if access.no_auth:
        if not is_loopback(address[0]):
            msg = f"--no-auth is only for a loopback address, and {address[0]} is not one"
            raise ModefsmError(msg)
    elif access.token_file is not None:
        token = read_token_file(access.token_file)[0]
    else:
        token = new_token()
    return _Served(address, protocols, access, token)


def _serve_http(
    spec: ModeSpec,
    shared: SessionStore,
    conversation: ConversationStore,
    *,
    served: _Served,
    diagnostics: Diagnostics,
    hangup: Callable[[], None] | None,
) -> int:
    from modefsm.protocol.transport import (  # noqa: PLC0415  # noqa: PLC0415
        SharedEngine,
        is_loopback,
        raise_descriptor_limit,
        serve_http,
        write_token_file,
    )

    engine = SharedEngine(spec, store=shared)

    def factory(conn: Any) -> ScriptedAgent:
        agent = ScriptedAgent(spec, unstable=True, conversation=conversation, engine=engine)
        agent.on_connect(conn)
        return agent

    host, port = served.address
    access, token = served.access, served.token
    written: list[Path] = []

    def ready(url: str) -> None:
        if token is None:
            how = "no authentication"
        elif access.token_file is not None:
            how = f"token in {access.token_file}"
        else:
            bound = url.rpartition(":")[2].partition("/")[0]
            written.append(write_token_file(token, f"serve-{bound}-{os.getpid()}.token"))
            how = f"token in {written[0]}"
        diagnostics.say(f"listening on {url} ({how})", force=True)

    if token is None:
        diagnostics.say(
            "--no-auth: no token; any local user or process can drive this server", force=True
        )
    elif not is_loopback(host):
        diagnostics.say(
            f"{host} is not a loopback address: every client that reaches it needs the "
            "token, and the traffic is plain HTTP (put a TLS proxy in front)",
            force=True,
        )

    def stopping(signal_name: str) -> None:
        diagnostics.say(f"{signal_name}: closing every connection and stopping", force=True)

    raise_descriptor_limit()
    try:
        asyncio.run(
            _on_hangup(
                serve_http(
                    factory,
                    host,
                    port,
                    token=token,
                    allow_hosts=access.allow_hosts,
                    allow_origins=access.allow_origins,
                    ready=ready,
                    stopping=stopping,
                    protocols=served.protocols,
                ),
                hangup,
            )
        )
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        msg = f"cannot listen on {host}:{port}: {reason}"
        raise ModefsmError(msg) from None
    finally:
        for path in written:
            path.unlink(missing_ok=True)
    return 0


def _serve_stdio(
    agent: ScriptedAgent,
    protocols: tuple[int, ...],
    diagnostics: Diagnostics,
    hangup: Callable[[], None] | None,
) -> int:
    try:
        transport = asyncio.run(_on_hangup(serve_negotiated(agent, protocols=protocols), hangup))
    except OutputClosedError as exc:
        diagnostics.say(str(exc), force=True)
        return 1
    if transport.open_requests:
        noun = "request" if transport.open_requests == 1 else "requests"
        diagnostics.say(
            f"{transport.open_requests} {noun} still unanswered at the end of input", force=True
        )
    if transport.unrouted:
        noun = "notification" if transport.unrouted == 1 else "notifications"
        diagnostics.say(f"ignored {transport.unrouted} {noun} of methods not served", force=True)
    return 0
