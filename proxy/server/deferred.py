"""Interceptor work deferred until the request is on its way upstream.

A :class:`~proxy.server.hooks.Decision` may carry ``after_send``: work that does not
change the request (tracking it), run while upstream works on the request instead of
before it is sent. :class:`AfterSend` owns that work's task:

- :meth:`AfterSend.body` wraps the request body in a payload that starts the work as
  soon as the HTTP client has handed the body to the connection, so the work never
  delays the request, it only fills time spent waiting for upstream (a request that
  fails before its body is written starts it when the failure is handled);
- :meth:`AfterSend.outcome` waits for it (shielded: a client that goes away does not
  cancel it) and checks the decision it returns;
- :meth:`AfterSend.abandon` lets it finish in the background when the handler is
  cancelled.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import BytesPayload

from proxy.server.hooks import Decision

__all__ = ["AfterSend", "merge"]

#: Tasks left to finish after their handler was cancelled (strong references).
_ORPHANS: set[asyncio.Task[Decision]] = set()


def _check(late: object) -> Decision:
    if not isinstance(late, Decision):
        raise TypeError(f"after_send returned {type(late).__name__}, not Decision")
    if late.body is not None or late.reject is not None or late.after_send is not None:
        raise TypeError("the Decision returned by after_send may set only conversation_id, headers and tap")
    return late


class _SignallingBody(BytesPayload):
    """A request body that calls ``on_written`` once it was handed to the connection
    (aiohttp writes a payload with ``write_with_length``, older releases ``write``)."""

    def __init__(self, value: bytes, on_written: Callable[[], object]) -> None:
        super().__init__(value)
        self._on_written = on_written

    async def write(self, writer: Any) -> None:
        await super().write(writer)
        self._on_written()

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        await super().write_with_length(writer, content_length)
        self._on_written()


class AfterSend:
    """The deferred work of one request (started at most once)."""

    def __init__(self, work: Callable[[], Awaitable[Decision]]) -> None:
        self._work = work
        self._task: asyncio.Task[Decision] | None = None

    def body(self, data: bytes) -> _SignallingBody | None:
        """What to send as the request body: ``data`` starting the work once written
        (with no body, the work starts now)."""
        if not data:
            self.start()
            return None
        return _SignallingBody(data, self.start)

    def start(self) -> asyncio.Task[Decision]:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(self._work))
        return self._task

    @staticmethod
    async def _run(work: Callable[[], Awaitable[Decision]]) -> Decision:
        return _check(await work())

    async def outcome(self) -> tuple[Decision | None, BaseException | None]:
        """``(decision, None)``, or ``(None, exception)`` if the work failed."""
        task = self.start()
        try:
            return await asyncio.shield(task), None
        except asyncio.CancelledError:
            if not task.done():
                raise  # this handler is being cancelled; the work goes on (see abandon)
            return None, asyncio.CancelledError()
        except Exception as exc:  # noqa: BLE001 - reported by the caller, never fatal
            return None, exc

    def abandon(self, on_done: Callable[[Decision], None], on_error: Callable[[BaseException], None]) -> None:
        """Let the work finish without us: then ``on_done(decision)``, or
        ``on_error(exception)`` if it failed."""
        task = self.start()
        _ORPHANS.add(task)

        def done(t: asyncio.Task[Decision]) -> None:
            _ORPHANS.discard(t)
            if t.cancelled():
                return
            exc = t.exception()
            if exc is not None:
                on_error(exc)
            else:
                on_done(t.result())

        task.add_done_callback(done)


def merge(decision: Decision, late: Decision) -> Decision:
    """``decision`` completed by what its ``after_send`` returned (checked by
    :func:`_check`; the server refuses a decision with both ``after_send`` and a tap)."""
    return dataclasses.replace(
        decision,
        conversation_id=late.conversation_id or decision.conversation_id,
        headers={**decision.headers, **late.headers} if late.headers else decision.headers,
        tap=late.tap or decision.tap,
        after_send=None,
    )
