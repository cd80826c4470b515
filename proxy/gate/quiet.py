"""Bookkeeping that waits for a quiet moment of the event loop.

Recording a reply (settling the request's token accounting, counting the reply, writing
the store) never delays the response it belongs to — the server sends the response
first — but on a single event loop it does delay whatever else is ready at that moment:
the other requests of a burst (sub-agents, parallel tool calls, several agents at
once). :class:`QuietQueue` holds such work and runs it, in order,

- once the loop has had no new work queued for ``quiet`` seconds (a burst is over),
- at the latest ``max_delay`` seconds after the oldest item, or as soon as ``max_items``
  are waiting (under sustained load the work is batched, never starved),
- or whenever the owner calls :meth:`drain` — before anything reads or changes the
  state the work updates, so no reader ever sees the difference.

Outside a running event loop the work runs at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["QuietQueue"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Seconds without new items after which the queue is drained.
QUIET_SECONDS = 0.001
#: Seconds an item may wait at most.
MAX_DELAY_SECONDS = 0.02
#: Items that may wait at most.
MAX_ITEMS = 16


class QuietQueue(Generic[T]):
    """Runs ``run(item)`` for every pushed item, in push order, when the loop is quiet
    (see module docstring). An exception from one item is logged and does not stop the
    others."""

    def __init__(
        self,
        run: Callable[[T], None],
        *,
        quiet: float = QUIET_SECONDS,
        max_delay: float = MAX_DELAY_SECONDS,
        max_items: int = MAX_ITEMS,
    ) -> None:
        self._run = run
        self.quiet = quiet
        self.max_delay = max_delay
        self.max_items = max_items
        self._items: list[T] = []
        self._oldest = 0.0
        self._newest = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._items)

    def push(self, item: T) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to wait on: run it now
            self._items.append(item)
            self.drain()
            return
        now = loop.time()
        if not self._items:
            self._oldest = now
        self._newest = now
        self._items.append(item)
        if len(self._items) >= self.max_items:
            self.drain()
        elif self._timer is None:  # one timer per batch, moved on when it fires too early
            self._timer = loop.call_at(now + self.quiet, self._due, loop)

    def _due(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if not self._items:
            return
        due = min(self._newest + self.quiet, self._oldest + self.max_delay)
        if loop.time() < due:
            self._timer = loop.call_at(due, self._due, loop)
        else:
            self.drain()

    def drain(self) -> None:
        """Run every waiting item now (a no-op when none is waiting)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._items:
            items, self._items = self._items, []
            for item in items:
                try:
                    self._run(item)
                except Exception:  # one item's failure must not lose the others
                    log.exception("deferred bookkeeping failed")
