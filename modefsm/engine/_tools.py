"""Tool calls decided by the session's committed mode: allow, ask the user, or deny.

A host asks the engine before it runs each tool call its model makes
(:meth:`ToolCalls.decide_async`): the answer is the session's committed mode's rules
(:meth:`RuleTable.judge <modefsm.spec.RuleTable.judge>`), after the session's remembered
``allow_always`` grants (:class:`~modefsm.spec.GrantMemory`). Every decision that runs or
refuses a tool is written as a ``modefsm.tool_decided`` record
(:class:`~modefsm.log.DecisionRecord`) *before* the host hears it, so that the tool runs
only once its decision is durable; replay checks each against the committed mode at its
place in the log.

An ``ask`` stays open until the user answers it (:meth:`ToolCalls.settle`), the session
closes (cancelled), or a mode change settles it: an open ask is judged again by every mode
the session is committed to while it is open. The new mode denies: the ask is withdrawn
(a ``deny`` record against the new mode); it allows: the ask is settled at once (an
``allow`` record); it asks: the ask stays open, now against the new mode. The host learns
it through :meth:`ToolCalls.outcome_of`, an awaitable that ends when the ask does.

The engine's module :mod:`modefsm.engine._engine` mixes :class:`ToolCalls` into
:class:`~modefsm.engine.ModeEngine`; the methods are documented there too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import msgspec.structs

from modefsm.engine._rows import MODE, SEQ, Row, Session
from modefsm.errors import (
    AskClosedError,
    AskLimitError,
    InvalidParamsError,
    ModefsmError,
    UnknownSessionError,
)
from modefsm.log import EVENT_DECIDED, title_digest, utc_timestamp
from modefsm.store import AlreadyDecided, DecidesOnce, RestorePoint, SessionMoved

if TYPE_CHECKING:
    from modefsm.engine._engine import _Turn
    from modefsm.log import DecisionRecord, Outcome
    from modefsm.spec import (
        Decision,
        GrantMemory,
        ModeSpec,
        PermissionOptionKind,
        RuleTable,
        ToolKind,
    )
    from modefsm.store import SessionStore, StoreBusy

__all__ = [
    "ASK_OPTIONS",
    "ENDED_KEPT",
    "MAX_OPEN_ASKS",
    "AskOption",
    "ToolCall",
    "ToolDecision",
]

MAX_OPEN_ASKS = 64
"""The most permission requests for tool calls one session may have open at once; past
it :meth:`ToolCalls.decide_async` raises :class:`~modefsm.errors.AskLimitError`."""
_LOGGER = logging.getLogger("modefsm")

_TRIES = 3
"""How many times a decision or an answer is tried when other processes keep moving its
session (as for a change)."""
ENDED_KEPT = 1024
"""How many decisions of ended asks (of all sessions; an ask re-judged into another
mode counts twice) :meth:`ToolCalls.outcome_of` still answers for."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the host is about to run: the ACP ``ToolCall`` fields a decision uses.

    Attributes:
        tool_call_id: ACP ``toolCallId``.
        kind: ACP ``ToolKind``; ``None`` counts as ``other``.
        name: the host's name for the tool (what the rules' ``name`` patterns match).
        title: ACP ``title``; the decision record keeps only its digest.
    """

    tool_call_id: str
    kind: ToolKind | None = None
    name: str | None = None
    title: str | None = None


@dataclass(frozen=True, slots=True)
class AskOption:
    """One option of the permission request an ``ask`` sends (ACP ``PermissionOption``).

    Attributes:
        option_id: ACP ``optionId``.
        name: ACP ``name``, the label the user sees.
        kind: ACP ``kind``; it is the outcome recorded when the user selects the option.
    """

    option_id: str
    name: str
    kind: PermissionOptionKind


ASK_OPTIONS: tuple[AskOption, ...] = (
    AskOption("allow_once", "Allow", "allow_once"),
    AskOption("allow_always", "Always allow", "allow_always"),
    AskOption("reject_once", "Reject", "reject_once"),
)
"""The options of every ``ask``, in the order shown: allow once, always allow (remembered
as the mode's ``grants`` say), reject."""

_OPTION_KINDS: dict[str, PermissionOptionKind] = {o.option_id: o.kind for o in ASK_OPTIONS}
_RAN = frozenset({"allow_once", "allow_always", "granted"})


class ToolDecision(msgspec.Struct, frozen=True, gc=False):
    """What the session's committed mode says of one tool call (immutable).

    A frozen :class:`msgspec.Struct`: compared by value, copied with changes by
    :func:`msgspec.structs.replace`; it is made on every tool call, and a struct is made
    in C.

    Attributes:
        call: the tool call decided.
        decision: ``allow`` (run it), ``ask`` (run it only if the user approves) or
            ``deny`` (do not run it; *reason* says why). A call a remembered grant covers
            is ``allow`` with outcome ``granted``.
        rule: the index of the rule that decided in the mode's ``tools``; ``None``: the
            mode's ``tools_default``.
        reason: the rule's ``reason`` (the text of a refusal), or ``None``.
        mode: the committed mode the call was decided against (ACP ``currentModeId``).
        mode_seq: the ``seq`` of the session's committed record that set *mode*.
        outcome: how an ask ended (:data:`~modefsm.log.Outcome`: the kind of the option
            selected, ``cancelled``), ``granted`` for a call a grant covered, ``None``
            for an open ask and for ``allow``/``deny``.
        options: for an ``ask``, the permission options to offer (:data:`ASK_OPTIONS`);
            empty otherwise.
    """

    call: ToolCall
    decision: Decision
    rule: int | None
    reason: str | None
    mode: str
    mode_seq: int
    outcome: Outcome | None = None
    options: tuple[AskOption, ...] = ()

    @property
    def runs(self) -> bool:
        """Whether the host may run the tool: ``allow``, or an ask the user approved."""
        return self.decision == "allow" or (self.decision == "ask" and self.outcome in _RAN)


_replace = msgspec.structs.replace


class _Ask:
    """One open ask: its decision against the latest committed mode, and its waiters.

    *first* is the decision :meth:`ToolCalls.decide_async` handed out: the host names the
    ask by that object (a ``ToolCall`` may be asked again, or in another session).
    """

    __slots__ = ("decision", "done", "first")

    def __init__(self, decision: ToolDecision, done: asyncio.Future[ToolDecision]) -> None:
        self.decision = decision
        self.first = decision
        self.done = done


class _Tools:
    """One session's tool state: its grants and its open asks (by ``toolCallId``)."""

    __slots__ = ("asks", "grants", "session_id")

    def __init__(self, session_id: str, grants: GrantMemory) -> None:
        self.session_id = session_id
        self.grants = grants
        self.asks: dict[str, _Ask] = {}


class ToolCalls:
    """The tool-call half of :class:`~modefsm.engine.ModeEngine` (mixed into it)."""

    if TYPE_CHECKING:
        spec: ModeSpec
        store: SessionStore | None
        _sessions: dict[str, Row]

        def get(self, session_id: str) -> Session: ...
        def _view(self, session_id: str) -> Session | None: ...
        async def refresh(self, session_id: str) -> Session: ...
        async def flush(self) -> None: ...
        def _turn(self, session_id: str) -> _Turn: ...
        def _adopt(self, current: RestorePoint) -> None: ...
        def _busy(self, session_id: str) -> StoreBusy: ...
        def _log_failure(
            self, event: str, session_id: str, exc: BaseException, **fields: Any
        ) -> None: ...

    def _init_tools(self) -> None:
        self._rules: RuleTable = self.spec.rules
        self._fixed = _fixed_verdicts(self.spec, self._rules)
        self._tools: dict[str, _Tools] = {}
        self._rejudges: set[asyncio.Task[None]] = set()
        self._granting: set[str] = set()  # the sessions with a grant
        # id() of a decision an open ask was handed out as -> (that decision, its sessionId)
        self._asked: dict[int, tuple[ToolDecision, str]] = {}
        # id() of a decision an ended ask was handed out as -> (that decision, the final one)
        self._ended: dict[int, tuple[ToolDecision, ToolDecision]] = {}
        self._persists = any(self.spec.grants_in(m).persist for m in self.spec.mode_ids)

    # -- deciding ------------------------------------------------------------------------

    def decide(self, session_id: str, call: ToolCall) -> ToolDecision:
        """What the session's committed mode says of *call*, as this process last saw it.

        Synchronous and without I/O: no record is written and nothing is remembered (use
        :meth:`decide_async` before running a tool). A call a remembered grant covers
        comes back ``allow`` with outcome ``granted``.

        Raises:
            UnknownSessionError: no such session.
            InvalidParamsError: ``call.kind`` is not an ACP ``ToolKind`` (field ``kind``).
        """
        try:
            row = self._sessions[session_id]
        except KeyError:
            raise UnknownSessionError(session_id) from None
        fixed = self._fixed[row[MODE]][call.kind]
        if fixed is None or (fixed[4] and session_id in self._granting):
            # a name decides, or a grant may cover it
            return self._judged(session_id, row[MODE], row[SEQ], call)
        decision, rule, reason, mode, options = fixed
        return ToolDecision(call, decision, rule, reason, mode, row[SEQ], None, options)

    def _judged(self, session_id: str, mode: str, seq: int, call: ToolCall) -> ToolDecision:
        """:meth:`decide` by the rules' judge and the grants (an ask, or a name decides)."""
        try:
            verdict = self._rules.judge(mode, call.kind, call.name)
        except ValueError:
            raise _bad_kind(call.kind) from None
        rule, reason = verdict.rule_index, verdict.reason
        if verdict.decision == "ask":
            tools = self._tools.get(session_id)
            if tools is not None and tools.grants.covers(mode, call.kind or "other", call.name):
                return ToolDecision(call, "allow", rule, reason, mode, seq, "granted", ())
            return ToolDecision(call, "ask", rule, reason, mode, seq, None, ASK_OPTIONS)
        return ToolDecision(call, verdict.decision, rule, reason, mode, seq, None, ())

    async def decide_async(self, session_id: str, call: ToolCall) -> ToolDecision:
        """Decide *call* against the committed mode; record it before returning.

        With a store the session first catches up with what other processes committed
        (:meth:`~modefsm.engine.ModeEngine.refresh`). An ``allow``, ``deny`` or
        ``granted`` decision is written as a ``modefsm.tool_decided`` record, durable
        before this returns: the host runs the tool only after. An ``ask`` is held open
        (no record yet) until :meth:`settle`, a mode change or the session's close ends
        it; :meth:`outcome_of` waits for that.

        Raises:
            UnknownSessionError: no such session.
            InvalidParamsError: ``call.kind`` is not an ACP ``ToolKind`` (field ``kind``),
                or an ask for ``call.tool_call_id`` is open already (field ``toolCallId``).
            AskLimitError: the session has :data:`MAX_OPEN_ASKS` asks open.
            LogError: the record cannot be written (the tool must not run); a
                :class:`~modefsm.store.StoreBusy` when other processes kept moving the
                session.
        """
        if self.store is not None:
            await self.refresh(session_id)
        for _ in range(_TRIES):
            async with self._turn(session_id):
                session = self.get(session_id)
                tools = self._tools_of(session_id)
                self._take_grants(tools)
                try:
                    await self._rejudge(session, tools)
                    decision = self.decide(session_id, call)
                    if decision.decision == "ask":
                        return self._open(session_id, tools, decision)
                    await self._record(session, decision)
                except SessionMoved as moved:
                    self._adopt(moved.current)
                else:
                    return decision
            await self.flush()
        raise self._busy(session_id)

    def _open(self, session_id: str, tools: _Tools, decision: ToolDecision) -> ToolDecision:
        call_id = decision.call.tool_call_id
        if call_id in tools.asks:
            msg = f"toolCallId: {call_id!r} already has an open permission request"
            raise InvalidParamsError("toolCallId", call_id, (), msg)
        if len(tools.asks) >= MAX_OPEN_ASKS:
            raise AskLimitError(session_id, MAX_OPEN_ASKS)
        tools.asks[call_id] = _Ask(decision, asyncio.get_running_loop().create_future())
        self._asked[id(decision)] = (decision, session_id)
        return decision

    async def settle(self, decision: ToolDecision, option_id: str | None) -> ToolDecision:
        """The user's answer to an open ask: record it; remember an ``allow_always``.

        The session catches up first, and the ask is judged again by the committed mode
        (see the module docstring): if that ends it (withdrawn, or allowed at once), that
        decision is returned and the answer is not used. Otherwise the ask is recorded
        against the committed mode with the selected option's kind as its outcome
        (``cancelled`` for ``None``), and an ``allow_always`` becomes a grant as the
        mode's ``grants`` say.

        Args:
            decision: the ``ask`` :meth:`decide_async` returned (this object, or the one
                :meth:`open_asks` lists now): a ``ToolCall`` asked again, or in another
                session, is another ask.
            option_id: ACP ``optionId`` of the selected option (:data:`ASK_OPTIONS`);
                ``None``: the request was cancelled.

        Returns:
            The settled decision (:attr:`ToolDecision.runs` says whether the tool runs).

        Raises:
            AskClosedError: the ask is not open (settled, withdrawn, cancelled, its
                session closed, or never asked); nothing changes.
            InvalidParamsError: *option_id* is not an offered option (field ``optionId``);
                the ask stays open.
            LogError: the record cannot be written; the ask stays open.
        """
        session_id = self._session_of(decision)
        tools, ask = self._open_ask(session_id, decision)
        if option_id is None:
            outcome: Outcome = "cancelled"
        elif option_id in _OPTION_KINDS:
            outcome = _OPTION_KINDS[option_id]
        else:
            msg = f"optionId: {option_id!r} is not an offered option ({', '.join(_OPTION_KINDS)})"
            raise InvalidParamsError("optionId", option_id, tuple(_OPTION_KINDS), msg)
        if self.store is not None:
            await self.refresh(session_id)
        for _ in range(_TRIES):
            async with self._turn(session_id):
                if ask.done.done():  # a mode change or the close ended it meanwhile
                    return ask.done.result()
                session = self.get(session_id)
                self._take_grants(tools)
                try:
                    await self._rejudge(session, tools)
                    if ask.done.done():
                        return ask.done.result()
                    settled = _replace(ask.decision, outcome=outcome, options=())
                    await self._record(session, settled)
                except SessionMoved as moved:
                    self._adopt(moved.current)
                else:
                    self._close(tools, ask, settled)
                    return settled
            await self.flush()
        raise self._busy(session_id)

    async def outcome_of(self, decision: ToolDecision) -> ToolDecision:
        """Wait until the ask *decision* ends; its final decision.

        An ask ends when :meth:`settle` records the user's answer, when a mode change
        withdraws it (``deny`` against the new mode: the host fails the tool call with
        its reason) or allows it (``allow``), or when its session closes (``cancelled``).
        The host races this with its permission request and stops waiting for the user
        when it ends first.

        Raises:
            AskClosedError: *decision* is not an ask of this engine, or one that ended
                longer ago than the last :data:`ENDED_KEPT` asks (a recent one answers at
                once).
        """
        ended = self._ended.get(id(decision))
        if ended is not None and ended[0] is decision:
            return ended[1]
        session_id = self._session_of(decision)
        _, ask = self._open_ask(session_id, decision)
        return await asyncio.shield(ask.done)

    def open_asks(self, session_id: str) -> tuple[ToolDecision, ...]:
        """The session's open asks, each against the latest mode that judged it, oldest first.

        Raises:
            UnknownSessionError: no such session.
        """
        self.get(session_id)
        tools = self._tools.get(session_id)
        return () if tools is None else tuple(a.decision for a in tools.asks.values())

    async def abandon_ask(
        self, point: RestorePoint, call: ToolCall
    ) -> Literal["written", "abandoned", "decided"]:
        """Settle an ask a process that ended left open: ``abandoned``, recorded once.

        For a session not live here, about to be restored from *point*: the tool call
        *call* (a ``switch_mode`` switch or a host's ``run_tool``) was left waiting for its
        decision or its permission answer by a process that ended. A
        ``modefsm.tool_decided`` record is written against the session's committed mode at
        *point* (``decision`` ``ask``, ``outcome`` ``abandoned``, ``rule`` and ``tool``
        ``None``: the call is not judged again), unless the session already has a decision
        record for ``call.tool_call_id``: an ``abandoned`` one (another process, or an
        earlier restore, wrote it), or any other (the call was decided, or answered, before
        its process ended: it was not an open ask; a ``toolCallId`` used again in the
        session is never settled ``abandoned`` either, its records cannot be told apart).
        Nothing is written without a store (no other process can have left an ask).

        With a store that implements :class:`~modefsm.store.DecidesOnce` (every store of
        this package), the record is written only if the store, under its own guard, finds
        no decision of the call either: of several processes restoring the session at the
        same moment, one writes it and the others return ``abandoned``. With another
        store, the check is the read of :meth:`SessionStore.decisions
        <modefsm.store.SessionStore.decisions>` alone.

        Args:
            point: where the store last saw the session (its ``mode`` and ``seq``).
            call: the tool call left open (its ``tool_call_id``, ``kind`` and ``title``).

        Returns:
            ``written`` (the record was written here), ``abandoned`` (one was there
            already, or there is no store) or ``decided`` (another decision of the call is
            logged: nothing was written).

        Raises:
            LogError: the store cannot be read or the record cannot be written; a
                :class:`~modefsm.store.StoreBusy` when other processes kept moving the
                session.
        """
        store = self.store
        if store is None:
            return "abandoned"
        session_id = point.session_id
        for _ in range(_TRIES):
            past = await asyncio.to_thread(lambda: list(store.decisions(session_id)))
            last = next((d for d in reversed(past) if d.tool_call_id == call.tool_call_id), None)
            if last is not None:
                return "abandoned" if last.outcome == "abandoned" else "decided"
            decision = ToolDecision(call, "ask", None, None, point.mode, point.seq, "abandoned")
            try:
                if isinstance(store, DecidesOnce):
                    fields = self._decision_fields(session_id, decision)
                    await store.note_once_async(fields, point)
                else:
                    await self._record_at(decision, point)
            except AlreadyDecided as decided:  # another process settled it, or decided it
                return "abandoned" if decided.outcome == "abandoned" else "decided"
            except SessionMoved as moved:
                point = moved.current
            else:
                return "written"
        raise self._busy(session_id)

    def prompt_for(self, session_id: str) -> str | None:
        """The system-prompt text of the session's committed mode (``None``: it has none).

        Raises:
            UnknownSessionError: no such session.
        """
        return self.spec.prompt_for(self.get(session_id).state)

    # -- the session's asks and grants ---------------------------------------------------

    def _session_of(self, decision: ToolDecision) -> str:
        """The session of the open ask handed out as *decision* (this very object)."""
        asked = self._asked.get(id(decision))
        if asked is None or asked[0] is not decision:
            raise AskClosedError(None, decision.call.tool_call_id)
        return asked[1]

    def _open_ask(self, session_id: str, decision: ToolDecision) -> tuple[_Tools, _Ask]:
        tools = self._tools.get(session_id)
        ask = None if tools is None else tools.asks.get(decision.call.tool_call_id)
        if ask is None or session_id not in self._sessions:
            raise AskClosedError(session_id, decision.call.tool_call_id)
        if decision is not ask.first and decision is not ask.decision:
            raise AskClosedError(session_id, decision.call.tool_call_id)
        return tools, ask  # type: ignore[return-value]  # tools is set when ask is

    def _take_grants(self, tools: _Tools) -> None:
        """Remember the grants other processes made in the session (seen as it caught up).

        From :meth:`SessionStore.grants_seen <modefsm.store.SessionStore.grants_seen>`
        (the file and PostgreSQL stores report them; others none).
        """
        if self.store is None:
            return
        for grant in self.store.grants_seen(tools.session_id):
            if self.spec.has_mode(grant.mode) and tools.grants.remember(
                grant.mode, grant.kind, grant.tool
            ):
                self._granting.add(tools.session_id)

    def _tools_of(self, session_id: str) -> _Tools:
        tools = self._tools.get(session_id)
        if tools is None:
            from modefsm.spec import GrantMemory  # noqa: PLC0415 - the spec's models: loaded with it

            tools = self._tools[session_id] = _Tools(session_id, GrantMemory(self.spec))
        return tools

    def _close(self, tools: _Tools, ask: _Ask, final: ToolDecision) -> None:
        """End *ask* with *final*: out of the open asks, remembered if granted, waiters told."""
        call = final.call
        del tools.asks[call.tool_call_id]
        ended = self._ended
        for handed in {id(ask.first): ask.first, id(ask.decision): ask.decision}.values():
            self._asked.pop(id(handed), None)
            if len(ended) >= ENDED_KEPT:
                del ended[next(iter(ended))]
            ended[id(handed)] = (handed, final)
        if final.outcome == "allow_always" and tools.grants.remember(
            final.mode, call.kind or "other", call.name
        ):
            self._granting.add(tools.session_id)
        if not ask.done.done():
            ask.done.set_result(final)

    async def _rejudge(self, session: Session, tools: _Tools) -> None:
        """Judge every open ask again by the session's committed mode (the turn held).

        Raises:
            SessionMoved: the session moved on while a record was written (the caller
                adopts and comes back).
            LogError: a record cannot be written (its ask stays open, as it was).
        """
        mode, seq = session.state, session.seq
        for ask in list(tools.asks.values()):
            old = ask.decision
            if (old.mode, old.mode_seq) == (mode, seq):
                continue
            new = self.decide(session.session_id, old.call)
            if new.decision == "ask":
                if old is not ask.first:
                    self._asked.pop(id(old), None)
                ask.decision = new
                self._asked[id(new)] = (new, session.session_id)
                continue
            await self._record(session, new)
            self._close(tools, ask, new)

    def _tools_moved(self, session_id: str) -> None:
        """The session's committed mode changed: judge its open asks again, soon.

        Called from the commit (synchronous): the records are written by a task that
        takes the session's turn, so they follow the change in the log.
        """
        tools = self._tools.get(session_id)
        if tools is None or not tools.asks:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop runs: no one waits; the next decide/settle re-judges
            return
        task = loop.create_task(self._rejudge_soon(session_id))
        self._rejudges.add(task)
        task.add_done_callback(self._rejudges.discard)

    async def _rejudge_soon(self, session_id: str) -> None:
        for _ in range(_TRIES):
            async with self._turn(session_id):
                session = self._view(session_id)
                tools = self._tools.get(session_id)
                if session is None or tools is None:
                    return
                try:
                    await self._rejudge(session, tools)
                except SessionMoved as moved:
                    self._adopt(moved.current)
                except ModefsmError as exc:  # the asks stay open; the next use tries again
                    self._log_failure("modefsm.rejudge_failed", session_id, exc)
                    return
                else:
                    return
            await self.flush()

    def _tools_closed(self, session: Session) -> None:
        """The session closes: cancel its open asks (recorded), forget its grants.

        Each ask is recorded against the session's committed mode (read back when another
        process moved it): ``cancelled`` where that mode asks, ``deny`` where it denies,
        no record where it allows (the tool did not run: the session is gone). The
        records are written before this returns, blocking while the store waits for its
        lock (:meth:`_tools_closed_async` awaits it).
        """
        steps = self._cancel_steps(session)
        moved: RestorePoint | None = None
        while True:
            try:
                final, point = steps.send(moved)
            except StopIteration:
                return
            moved = None
            try:
                self._record_now(final, point)
            except SessionMoved as exc:
                moved = exc.current
            except ModefsmError as exc:
                self._log_failure("modefsm.cancel_failed", session.session_id, exc)

    async def _tools_closed_async(self, session: Session) -> None:
        """:meth:`_tools_closed`, each record awaited (the loop runs while the store waits).

        A record that cannot be written is logged as a warning (a ``cancel_failed``
        record would wait for the same store).
        """
        steps = self._cancel_steps(session)
        moved: RestorePoint | None = None
        while True:
            try:
                final, point = steps.send(moved)
            except StopIteration:
                return
            moved = None
            try:
                await self._record_at(final, point)
            except SessionMoved as exc:
                moved = exc.current
            except ModefsmError as exc:
                _LOGGER.warning(
                    "the cancellation of %s could not be recorded: %s", final.call.tool_call_id, exc
                )

    def _cancel_steps(
        self, session: Session
    ) -> Generator[tuple[ToolDecision, RestorePoint], RestorePoint | None, None]:
        """The closing session's open asks cancelled, for :meth:`_tools_closed` and its twin.

        Yields ``(record, point)`` for each record to write against *point*; the driver
        answers ``None`` (written, or failed and logged) or the :class:`RestorePoint` of a
        :class:`SessionMoved` that refused it (the ask is judged again there, at most
        ``_TRIES`` times). Each ask is ended as it was recorded, or cancelled.
        """
        tools = self._closing_tools(session)
        if tools is None:
            return
        point = _head(session)
        for ask in list(tools.asks.values()):
            final = None
            for _ in range(_TRIES):
                final = self._cancelled(point, ask.decision)
                moved = None if final is None else (yield final, point)
                if moved is None:
                    break
                point = moved
            self._close_cancelled(tools, ask, final)

    def _closing_tools(self, session: Session) -> _Tools | None:
        """The closing session's open asks and grants, forgotten here (``None``: none)."""
        self._granting.discard(session.session_id)
        return self._tools.pop(session.session_id, None)

    def _close_cancelled(self, tools: _Tools, ask: _Ask, final: ToolDecision | None) -> None:
        """End *ask* as its session closes: *final*, or cancelled when nothing was recorded."""
        self._close(tools, ask, final or _replace(ask.decision, outcome="cancelled", options=()))

    def _cancelled(self, point: RestorePoint, decision: ToolDecision) -> ToolDecision | None:
        """*decision*'s ask cancelled against the mode at *point* (``None``: it allows)."""
        call = decision.call
        try:
            verdict = self._rules.judge(point.mode, call.kind, call.name)
        except ValueError:  # not a mode of the spec: nothing to judge by
            return None
        if verdict.decision == "allow":
            return None
        outcome: Outcome | None = "cancelled" if verdict.decision == "ask" else None
        return ToolDecision(
            call, verdict.decision, verdict.rule_index, verdict.reason, point.mode, point.seq,
            outcome,
        )  # fmt: skip

    def _past_decisions(self, session_id: str) -> list[DecisionRecord]:
        """The session's decision records in the store, when a grant may outlive a restart.

        Read from :meth:`SessionStore.decisions <modefsm.store.SessionStore.decisions>`
        (the file, PostgreSQL and in-memory stores keep them); none without a store, and
        none when no mode's grants persist.
        """
        if not self._persists or self.store is None:
            return []
        return list(self.store.decisions(session_id))

    def _tools_restored(self, session_id: str, decisions: Iterable[DecisionRecord]) -> None:
        """A restored session's grants, rebuilt from its decision records."""
        from modefsm.spec import GrantMemory  # noqa: PLC0415 - the spec's models: loaded with it

        grants = GrantMemory.rebuild(self.spec, decisions)
        self._tools[session_id] = _Tools(session_id, grants)
        if len(grants):
            self._granting.add(session_id)

    # -- records -------------------------------------------------------------------------

    async def _record(self, session: Session, decision: ToolDecision) -> None:
        """Write *decision*'s record, durable when this returns (the turn held).

        Raises:
            SessionMoved: the store saw the session move past the decision's mode.
            LogError: the record cannot be written.
        """
        fields = self._decision_fields(session.session_id, decision)
        if self.store is not None:
            await self.store.note_async(EVENT_DECIDED, fields, _head(session))

    async def _record_at(self, decision: ToolDecision, point: RestorePoint) -> None:
        """:meth:`_record` for the session at *point*, awaited."""
        fields = self._decision_fields(point.session_id, decision)
        if self.store is not None:
            await self.store.note_async(EVENT_DECIDED, fields, point)

    def _record_now(self, decision: ToolDecision, point: RestorePoint) -> None:
        """:meth:`_record` for the session at *point*, blocking until the store answers."""
        fields = self._decision_fields(point.session_id, decision)
        if self.store is not None:
            self.store.note(EVENT_DECIDED, fields, point)

    def _decision_fields(self, session_id: str, decision: ToolDecision) -> dict[str, Any]:
        call = decision.call
        granted = decision.outcome == "granted"
        return {
            "timestamp": utc_timestamp(),
            "session_id": session_id,
            "tool_call_id": call.tool_call_id,
            "kind": call.kind or "other",
            "tool": call.name,
            "title_digest": title_digest(call.title),
            "rule": decision.rule,
            "decision": "ask" if granted else decision.decision,
            "outcome": decision.outcome,
            "mode": decision.mode,
            "mode_seq": decision.mode_seq,
            "spec": self.spec.name,
            "spec_hash": self.spec.content_hash,
        }


_Fixed = tuple["Decision", int | None, str | None, str, tuple[AskOption, ...]]
"""``(decision, rule, reason, mode, options)``: a verdict no tool name can change (an
``ask``'s options are :data:`ASK_OPTIONS`: a grant may still cover it)."""


class _ByKind(dict[str | None, "_Fixed | None"]):
    """One mode's fixed verdicts by ACP ``ToolKind`` (``None`` where the judge decides)."""

    __slots__ = ()

    def __missing__(self, kind: object) -> None:
        return None  # not a ToolKind: the judge says so


def _fixed_verdicts(spec: ModeSpec, rules: RuleTable) -> dict[str, _ByKind]:
    """The verdicts only the kind decides, by mode id and kind.

    What :meth:`ToolCalls.decide` answers without the judge.
    """
    fixed: dict[str, _ByKind] = {}
    for mode_id in spec.mode_ids:
        by_kind = _ByKind()
        for kind, decided in rules.decisions(mode_id).items():
            if decided is not None:
                verdict = rules.judge(mode_id, kind)
                options = ASK_OPTIONS if decided == "ask" else ()
                by_kind[kind] = (decided, verdict.rule_index, verdict.reason, mode_id, options)
        by_kind[None] = by_kind["other"]  # ACP: a tool call without a kind is "other"
        fixed[mode_id] = by_kind
    return fixed


def _head(session: Session) -> RestorePoint:
    return RestorePoint(
        session.session_id, session.state, session.seq, session.previous, session.digest
    )


def _bad_kind(kind: object) -> InvalidParamsError:
    from modefsm.spec import TOOL_KINDS  # noqa: PLC0415 - the spec's models: loaded with it

    msg = f"kind: {kind!r} is not an ACP ToolKind ({', '.join(TOOL_KINDS)})"
    return InvalidParamsError("kind", kind, TOOL_KINDS, msg)
