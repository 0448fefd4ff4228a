"""Agent-initiated ``switch_mode`` switches: an offer built once, settled once.

A switch is a permission request the client answers. The engine handles it in two steps:

1. :meth:`SwitchOffers.offer_switch` catches the session up with what other processes
   committed, then resolves the options of the switch from the committed mode, as the
   user is shown them (a ``$previous`` option names its concrete mode): a
   :class:`SwitchOffer`.
2. :meth:`SwitchOffers.settle_switch` takes the answer (the ``optionId`` selected, or why
   there is none) and decides once, in the session's turn, against the committed mode:
   an allow option that was offered moves the session to exactly the target it showed;
   anything else changes nothing and is logged with its reason. The
   :class:`SwitchResult` says which.

:class:`SwitchOffers` is the part of :class:`~modefsm.engine.ModeEngine` that does this;
it uses the engine's change pipeline (turns, records, hooks) as the engine's own methods.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from modefsm.engine._events import ModeChange
from modefsm.engine._rows import MODE, Row, Session
from modefsm.errors import (
    HookError,
    LogError,
    ModefsmError,
    NoSwitchError,
    StaleOptionError,
    TransitionNotAllowedError,
)
from modefsm.log import RejectReason
from modefsm.spec import PREVIOUS

if TYPE_CHECKING:
    from collections.abc import Callable

    from modefsm.engine._backlog import Backlog
    from modefsm.engine._engine import ModeEngine
    from modefsm.engine._machine import ModeMachine
    from modefsm.spec import ModeSpec, PermissionOptionKind, SwitchOption

__all__ = ["OfferedOption", "SwitchOffer", "SwitchOffers", "SwitchResult"]


@dataclass(frozen=True, slots=True)
class OfferedOption:
    """One permission option as the user is shown it: its target already resolved.

    Attributes:
        option_id: ACP ``optionId``.
        name: ACP ``PermissionOption.name`` as shown: the spec's name with ``{mode}``
            replaced by the target's display name; a ``$previous`` option whose name has no
            ``{mode}`` gets `` (Name)`` appended, so it always names its mode.
        kind: ACP ``PermissionOption.kind``.
        target: the concrete mode id an allow option leads to; ``None`` for reject options.
    """

    option_id: str
    name: str
    kind: PermissionOptionKind
    target: str | None


@dataclass(slots=True)
class SwitchOffer:
    """One ``switch_mode`` permission request, its options resolved when it was built.

    Settling it applies exactly the target of the option selected, as shown here; it is
    never resolved again against a later state. It is settled once: a second answer
    changes nothing (see :meth:`SwitchOffers.settle_switch`).

    Attributes:
        session_id: ACP ``sessionId``.
        tool_call_id: ACP ``toolCallId`` of the switch's tool call.
        proposed_in: the mode the switch was proposed in (the switch's source).
        seq: the session's ``seq`` when the offer was built; a different ``seq`` when it
            is settled means the mode changed while the request was open (stale).
        title: the tool call's ``title``.
        options: the options, in the spec's order, without the ones left out (a
            ``$previous`` option with no target, or whose target another option offers).
        settled: whether :meth:`SwitchOffers.settle_switch` has taken an answer.
    """

    session_id: str
    tool_call_id: str
    proposed_in: str
    seq: int
    title: str
    options: tuple[OfferedOption, ...]
    settled: bool = field(default=False, compare=False)

    def get(self, option_id: object) -> OfferedOption | None:
        """The offered option with ACP ``optionId`` *option_id*, if it was offered."""
        return next((o for o in self.options if o.option_id == option_id), None)

    @property
    def targets(self) -> dict[str, str | None]:
        """``{optionId: target}`` in the order shown (``None`` for reject options)."""
        return {o.option_id: o.target for o in self.options}

    @property
    def approvable(self) -> bool:
        """Whether an option leads to a mode (if not, there is nothing to ask)."""
        return any(o.target is not None for o in self.options)


@dataclass(frozen=True, slots=True)
class SwitchResult:
    """How a switch was settled.

    Attributes:
        tool_call_id: ACP ``toolCallId`` of the switch's tool call.
        option_id: ACP ``optionId`` the client selected (``None`` when there was none).
        change: the committed change, or ``None`` when nothing changed.
        reason: why nothing changed (the ``reason`` of the ``change_rejected`` record,
            except ``log_failed``: no record could be written), or ``None`` when the
            switch was approved.
        error: the refusal as an error, for the refusals that are not the user's choice:
            a :class:`~modefsm.errors.TransitionNotAllowedError` (``option_not_offered``,
            ``not_allowed``; its ``valid`` data lists what could be selected or reached), a
            :class:`~modefsm.errors.StaleOptionError` (``stale_option``), the
            :class:`~modefsm.errors.HookError` (``hook_failed``) or the
            :class:`~modefsm.errors.LogError` (``log_failed``); else ``None``.
    """

    tool_call_id: str
    option_id: str | None
    change: ModeChange | None
    reason: RejectReason | None
    error: ModefsmError | None = None

    @property
    def approved(self) -> bool:
        """Whether the client selected an allow option and the switch was applied.

        The change is ``None`` when the option's target was already the current mode.
        """
        return self.reason is None


class SwitchOffers:
    """Offer and settle ``switch_mode`` switches (a part of :class:`~modefsm.engine.ModeEngine`).

    Attributes:
        spec: the modes and policy.
        machine: the compiled policy (which switch may go where).
    """

    spec: ModeSpec
    machine: ModeMachine
    _sessions: dict[str, Row]
    _backlog: Backlog

    @property
    def _engine(self) -> ModeEngine:
        """The engine this is a part of: its change pipeline (turns, records, hooks)."""
        return cast("ModeEngine", self)

    async def offer_switch(
        self, session_id: str, *, tool_call_id: str | None = None
    ) -> SwitchOffer:
        """Catch up with the store, then resolve the switch from the committed mode, as shown.

        ``$previous`` is resolved here, once: the option then names its concrete mode. A
        ``$previous`` option is left out when the session has no previous mode, when it
        is the current mode, when the policy does not let a switch reach it, or when its
        target is also the target of another allow option (that option, worded by the
        spec for that mode, is kept).

        Args:
            session_id: ACP ``sessionId``.
            tool_call_id: ACP ``toolCallId`` of the switch's tool call; a fresh
                ``call_switch_mode_<hex>`` when ``None``.

        Raises:
            UnknownSessionError: no such session.
            NoSwitchError: the committed mode has no switch.
            LogError: the store cannot be read to catch up (see :meth:`refresh`).
        """
        session = await self._engine.refresh(session_id)
        switch = self.spec.switch_from(session.state)
        if switch is None:
            raise NoSwitchError(session_id, session.state)
        explicit = {o.target for o in switch.options if o.allows and o.target != PREVIOUS}
        shown: list[OfferedOption] = []
        for option in switch.options:
            target = self._target(session, option)
            if option.allows and (
                target is None or (option.target == PREVIOUS and target in explicit)
            ):
                continue
            shown.append(
                OfferedOption(
                    option.option_id, self._shown_name(option, target), option.kind, target
                )
            )
        return SwitchOffer(
            session_id,
            tool_call_id or f"call_switch_mode_{uuid.uuid4().hex[:12]}",
            session.state,
            session.seq,
            switch.title,
            tuple(shown),
        )

    async def settle_switch(
        self,
        offer: SwitchOffer,
        option_id: str | None,
        *,
        reason: RejectReason | None = None,
        request_id: str | int | None = None,
    ) -> SwitchResult:
        """Settle *offer* with the client's answer; legality is decided here, once.

        An offer is settled once: a second answer changes nothing (``duplicate_answer``).
        Without *reason*, the answer is judged: the session closed meanwhile
        (``session_closed``), no option (``None``: ``cancelled``), an ``optionId`` that was
        not offered (``option_not_offered``) or a reject option (``option_rejected``)
        change nothing. An allow option applies exactly the target *offer* showed, in the
        session's turn, against the committed mode: if the session changed since the offer
        was built (a stale answer), only when the policy lets a switch reach that target
        from the current mode and it is restorable (the record then carries
        ``proposed_in``), else ``stale_option``; a target the policy forbids is
        ``not_allowed``; a refusing ``before_change`` hook is ``hook_failed``; a record
        that cannot be written is ``log_failed`` (nothing changed).

        Every outcome that changes nothing is logged with its reason (``log_failed``
        excepted), from the committed mode: a refusal after the session caught up with the
        store (a store that cannot be read then is let be).

        Args:
            offer: the offer the client answered (from :meth:`offer_switch`).
            option_id: ACP ``optionId`` selected, or ``None`` when there is none.
            reason: the reason the answer changes nothing, decided by the caller (an
                ``invalid_answer``, a ``cancelled`` request, a ``session_closed``
                connection, ``no_previous_mode`` when nothing was asked): logged as given.
            request_id: the ``session/request_permission`` request id, if known.

        Returns:
            How it was settled.

        Raises:
            LogError: the rejection record could not be written (the offer is settled).
        """
        session_id = offer.session_id
        if offer.settled:
            reason = "duplicate_answer"
        offer.settled = True
        if reason is None:
            reason = _judge(offer, option_id, live=session_id in self._sessions)
        if reason is None:
            assert option_id is not None  # noqa: S101 - _judge checked it
            try:
                return await self._approve(offer, option_id, request_id)
            except HookError as exc:  # logged by the pipeline
                return SwitchResult(offer.tool_call_id, option_id, None, "hook_failed", exc)
            except LogError as exc:  # nothing could be logged
                return SwitchResult(offer.tool_call_id, option_id, None, "log_failed", exc)
        if session_id in self._sessions:  # log from the committed mode
            with contextlib.suppress(LogError):
                await self._engine.refresh(session_id)
        option = offer.get(option_id)
        error = None
        live = self._sessions.get(session_id)
        if reason == "option_not_offered" and option_id is not None and live is not None:
            error = TransitionNotAllowedError(
                session_id=session_id,
                source=live[MODE],
                dest=option_id,
                origin="switch_mode",
                allowed=[o.option_id for o in offer.options if o.target is not None],
                field="optionId",
            )
        await self._rejecting(
            functools.partial(
                self.reject_switch,
                session_id,
                reason,
                dest=option.target if option is not None else None,
                tool_call_id=offer.tool_call_id,
                option_id=option_id,
                proposed_in=offer.proposed_in,
                request_id=request_id,
            )
        )
        return SwitchResult(offer.tool_call_id, option_id, None, reason, error)

    def reject_switch(
        self,
        session_id: str,
        reason: RejectReason,
        *,
        dest: str | None = None,
        tool_call_id: str | None = None,
        option_id: str | None = None,
        proposed_in: str | None = None,
        request_id: str | int | None = None,
    ) -> None:
        """Log that a ``switch_mode`` changed nothing, and why, without an offer.

        :meth:`settle_switch` logs the outcomes of an offer; this is for the answers no
        offer takes: a second answer seen on the wire (``duplicate_answer``), or one after
        a cancel ended the wait (``late_answer``). Works for closed sessions too; unknown
        ids are logged as given. With a store, it blocks until the store's lock is taken.

        Raises:
            LogError: the record could not be written.
        """
        self._engine._reject(
            self._engine._detached(session_id),
            dest,
            "switch_mode",
            reason,
            request_id=request_id,
            tool_call_id=tool_call_id,
            option_id=option_id,
            proposed_in=proposed_in,
        )

    def reject_switch_soon(
        self,
        session_id: str,
        reason: RejectReason,
        *,
        tool_call_id: str | None = None,
        option_id: str | None = None,
        request_id: str | int | None = None,
    ) -> None:
        """:meth:`reject_switch` from a synchronous callback: returns at once.

        With an event loop running, the record is written by the engine's backlog, in
        the order these calls came, after the call returned (:meth:`drain_notes` waits
        for it); at most :data:`~modefsm.engine.MAX_BACKLOG` wait at once, one more is
        dropped and counted (:attr:`notes_dropped`, the first logged as a warning). A
        record that cannot be written is logged as a warning. Without a running loop it
        is written before this returns, as :meth:`reject_switch` does.

        Raises:
            LogError: only without a running loop, when the record could not be written.
        """
        reject = functools.partial(
            self.reject_switch,
            session_id,
            reason,
            tool_call_id=tool_call_id,
            option_id=option_id,
            request_id=request_id,
        )
        self._backlog.put_soon(reject, lambda: self._rejecting(reject))

    async def _rejecting(self, reject: Callable[[], None]) -> None:
        """Run *reject* (a :meth:`reject_switch`); its line is written awaited (_noting)."""

        async def run() -> None:
            reject()

        await self._engine._noting(run)

    async def drain_notes(self) -> None:
        """Wait until every record given to :meth:`reject_switch_soon` has been written.

        A transport calls it when its connection ends, before the store is closed.
        """
        await self._backlog.drain()

    @property
    def notes_dropped(self) -> int:
        """Records :meth:`reject_switch_soon` dropped because the backlog was full."""
        return self._backlog.dropped

    async def _approve(
        self, offer: SwitchOffer, option_id: str, request_id: str | int | None
    ) -> SwitchResult:
        """Apply the offered allow option *option_id* in the session's turn (races retried)."""
        dest = offer.targets[option_id]
        assert dest is not None  # noqa: S101 - judged: an allow option offered
        stale: bool | None = None  # decided once the turn is taken

        def result(
            change: ModeChange | None,
            reason: RejectReason | None,
            error: ModefsmError | None = None,
        ) -> SwitchResult:
            return SwitchResult(offer.tool_call_id, option_id, change, reason, error)

        async def attempt(deadline: float | None) -> SwitchResult:
            nonlocal stale
            session = self._engine._view(offer.session_id)
            if session is None:
                self.reject_switch(
                    offer.session_id,
                    "session_closed",
                    dest=dest,
                    tool_call_id=offer.tool_call_id,
                    option_id=option_id,
                    proposed_in=offer.proposed_in,
                    request_id=request_id,
                )
                return result(None, "session_closed")
            if session.doubt:
                await self._engine._confirm_async(session, deadline)
            if dest == session.state:
                await self._engine._confirm_async(session, deadline)
                return result(None, None)
            if stale is None:
                stale = session.seq != offer.seq
            refusal = self._refusal(session, dest, stale=stale)
            if refusal is not None:
                # refused on the committed mode
                await self._engine._confirm_async(session, deadline)
                self._engine._reject(
                    session,
                    dest,
                    "switch_mode",
                    refusal,
                    redecide=True,
                    request_id=request_id if stale else None,
                    tool_call_id=offer.tool_call_id,
                    option_id=option_id,
                    proposed_in=offer.proposed_in if stale else None,
                )
                return result(None, refusal, self._refusal_error(session, dest, refusal))
            context = ModeChange(
                session.session_id,
                session.seq + 1,
                session.state,
                dest,
                "switch_mode",
                request_id,
                offer.tool_call_id,
                option_id,
                offer.proposed_in if stale else None,
            )
            await self._engine._fire_async(session, "switch_mode", dest, context, deadline)
            return result(context, None)

        def moved() -> None:
            nonlocal stale
            stale = True  # another process moved the session: the answer is stale

        return await self._engine._in_turn(offer.session_id, attempt, moved)

    def _refusal(self, session: Session, dest: str, *, stale: bool) -> RejectReason | None:
        """Why an approved switch to *dest* cannot apply now, or ``None`` if it can.

        A stale approval (the session changed since the options were shown) applies only
        to a restorable mode the current mode can reach by a switch.
        """
        allowed = self.machine.allows("switch_mode", session.state, dest)
        if stale and not (self.spec.has_mode(dest) and self.spec.mode(dest).restorable and allowed):
            return "stale_option"
        return None if allowed else "not_allowed"

    def _refusal_error(
        self, session: Session, dest: str, refusal: RejectReason
    ) -> TransitionNotAllowedError:
        """The error of a refused approval: the modes it could still reach from here."""
        error = TransitionNotAllowedError
        allowed = self.machine.targets("switch_mode", session.state)
        if refusal == "stale_option":
            error = StaleOptionError
            allowed = tuple(m for m in allowed if self.spec.mode(m).restorable)
        return error(
            session_id=session.session_id,
            source=session.state,
            dest=dest,
            origin="switch_mode",
            allowed=allowed,
            field="optionId",
        )

    def _target(self, session: Session, option: SwitchOption) -> str | None:
        """The mode an allow *option* leads the session to now, or ``None``.

        ``None`` for a reject option, or a ``$previous`` one without a target (see
        :meth:`offer_switch`).
        """
        if not option.allows:
            return None
        if option.target != PREVIOUS:
            return option.target
        previous = session.previous
        if previous is None or previous == session.state:
            return None
        if not self.machine.allows("switch_mode", session.state, previous):
            return None
        return previous

    def _shown_name(self, option: SwitchOption, target: str | None) -> str:
        """The option's name as shown: ``{mode}`` filled in; a ``$previous`` one names it."""
        if target is None:
            return option.name
        mode_name = self.spec.mode(target).name
        if "{mode}" in option.name:
            return option.name.replace("{mode}", mode_name)
        if option.target == PREVIOUS:
            return f"{option.name} ({mode_name})"
        return option.name


def _judge(offer: SwitchOffer, option_id: str | None, *, live: bool) -> RejectReason | None:
    """Why the client's answer changes nothing, or ``None`` if it selects an allow option."""
    if not live:
        return "session_closed"
    if option_id is None:
        return "cancelled"
    option = offer.get(option_id)
    if option is None:
        return "option_not_offered"
    if option.target is None:
        return "option_rejected"
    return None
