"""Records written after the call that decided them returned: in order, bounded, drained.

A transport hears of some answers in a synchronous callback (a second answer to a
``session/request_permission``, or one that came after the wait ended); the line that
logs it must not hold up the event loop while the store waits for another process's
lock. :class:`Backlog` takes such writes and runs them one after the other in a single
task, in the order given, each awaited through the store's ``note_async``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from modefsm.errors import ModefsmError
from modefsm.store import StoreBusy

__all__ = ["MAX_BACKLOG"]

MAX_BACKLOG = 1024
"""Lines waiting to be written at once; one more is dropped, counted
(:attr:`Backlog.dropped`) and, the first time, logged as a warning."""

_TRIES = 3
"""How many times a line is tried when the store stays busy (each try waits for the
store's lock up to its ``lock_timeout``)."""

_LOGGER = logging.getLogger("modefsm")

Write = Callable[[], Awaitable[None]]


class Backlog:
    """Writes run in order by one task, at most *limit* waiting.

    Args:
        limit: the most writes waiting (the one running included).

    Attributes:
        dropped: writes refused because *limit* were waiting.
        failed: writes that raised a :class:`~modefsm.errors.ModefsmError` (logged as a
            warning each).
    """

    def __init__(self, limit: int = MAX_BACKLOG) -> None:
        """Start empty."""
        self.limit = limit
        self.dropped = 0
        self.failed = 0
        self._queue: deque[Write] = deque()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        """Writes waiting, the one running included."""
        return len(self._queue)

    def put(self, write: Write) -> bool:
        """Run ``await write()`` after the writes given before; whether it was taken.

        Must be called with an event loop running. Past *limit* waiting, *write* is not
        run: it is counted in :attr:`dropped`, and the first one is logged.
        """
        if len(self._queue) >= self.limit:
            self.dropped += 1
            if self.dropped == 1:
                _LOGGER.warning(
                    "%d log lines already wait for the store: more are dropped and counted",
                    self.limit,
                )
            return False
        self._queue.append(write)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        return True

    def put_soon(self, now: Callable[[], None], later: Write) -> None:
        """:meth:`put` *later* with an event loop running; without one, call ``now()``.

        Raises:
            Exception: whatever ``now()`` raised (without a running loop only).
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            now()
            return
        self.put(later)

    async def drain(self) -> None:
        """Wait until every write taken has run (a failed one is logged, not raised)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def _run(self) -> None:
        while self._queue:
            try:
                await _tried(self._queue[0])
            except ModefsmError as exc:
                self.failed += 1
                _LOGGER.warning("a log line could not be written: %s", exc)
            finally:
                self._queue.popleft()


async def _tried(write: Write) -> None:
    """``await write()``, tried again while the store stays busy."""
    for attempt in range(_TRIES):
        try:
            await write()
        except StoreBusy:
            if attempt == _TRIES - 1:
                raise
        else:
            return
