"""The proxied requests in flight, so that a shutdown can end them in their dialect.

On SIGTERM the server stops listening and waits up to ``server.shutdown_grace_seconds``
for the requests in flight (:meth:`InFlight.drain`). What is still open then is *cut*
(:meth:`InFlight.cut`): a response being relayed gets :class:`ShutdownCut` from its
upstream body, which the relay answers like any upstream failure — an SSE stream ends
with a final error event in its dialect (OpenAI ``data: {"error": …}``, Anthropic
``event: error``), a buffered response becomes a 503 error in the dialect, a raw body
already under way is closed (never left to look complete); a request still waiting for
upstream's headers gets a 503 error. Then the process exits.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp
from aiohttp import web

__all__ = ["INFLIGHT_KEY", "InFlight", "ShutdownCut", "Slot"]


class ShutdownCut(aiohttp.ClientPayloadError):
    """Raised from an upstream body read when the shutdown grace period is over."""

    def __init__(self) -> None:
        super().__init__("compaction-gate is shutting down")


@dataclass(eq=False, slots=True)
class Slot:
    """One request in flight: its handler task, and upstream's response once it came."""

    task: asyncio.Task[object] | None
    upstream: aiohttp.ClientResponse | None = None
    #: set by :meth:`InFlight.cut`: the request is being ended by the shutdown
    cut: bool = False


class InFlight:
    """The set of open :class:`Slot` objects of one app."""

    def __init__(self) -> None:
        self._open: set[Slot] = set()
        self._empty = asyncio.Event()
        self._empty.set()

    def __len__(self) -> int:
        return len(self._open)

    def enter(self) -> Slot:
        slot = Slot(asyncio.current_task())
        self._open.add(slot)
        self._empty.clear()
        return slot

    def leave(self, slot: Slot) -> None:
        self._open.discard(slot)
        if not self._open:
            self._empty.set()

    async def drain(self, timeout: float) -> bool:
        """Wait until nothing is in flight, at most ``timeout`` seconds; True if so."""
        try:
            await asyncio.wait_for(self._empty.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def cut(self) -> int:
        """End every request still in flight (see the module docstring); returns how
        many were cut."""
        n = 0
        for slot in list(self._open):
            if slot.cut:
                continue
            slot.cut = True
            n += 1
            up = slot.upstream
            if up is not None and not up.content.is_eof():
                up.content.set_exception(ShutdownCut())
            elif slot.task is not None:
                slot.task.cancel()
        return n


INFLIGHT_KEY: web.AppKey[InFlight] = web.AppKey("compaction_gate.inflight", InFlight)
