"""The tap that records a tracked request's reply (:class:`TrackingTap`).

It depends on the tracker only through :class:`ReplySink` (``later`` and
``record_reply``), so the tracker can hand out taps without the tap's module importing
the tracker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from proxy.core import bodyrefs
from proxy.core.responses import Reply, StreamAssembler, reply_from_json
from proxy.gate.background import in_daemon_thread, in_loop
from proxy.gate.observation import Observation
from proxy.server import filled
from proxy.server.sse import SSESplitter
from proxy.state import offload, sharedmem

__all__ = ["ASSEMBLE_BYTES", "OFFLOAD_BYTES", "ReplySink", "TrackingTap"]

log = logging.getLogger("proxy.gate.tracker")
T = TypeVar("T")


class ReplySink(Protocol):
    """Where a :class:`TrackingTap` records the reply (the tracker)."""

    @property
    def shared(self) -> bool: ...

    def later(
        self, fn: Callable[[], None], conversation_id: str | None = None, after: asyncio.Future[Any] | None = None
    ) -> None: ...

    def record_counted(self, obs: Observation, reply: Reply | None, status: str = "ok") -> None: ...

    async def acknowledge(self, obs: Observation) -> None: ...


#: JSON replies from this many bytes on are parsed in the request path's worker process
#: (:func:`proxy.state.offload.run`): ``json.loads`` of a 10 MB reply holds the GIL for
#: ~25 ms, and its messages' digests are as long again.
OFFLOAD_BYTES = 1 << 20

#: Stream bytes a :class:`TrackingTap` keeps unparsed: past them the events kept are
#: parsed at once (~1-2 ms of work), so that the reply of a 10 MB stream is not parsed in
#: one piece of ~0.5 s when it ends — unless the stream goes to the worker process
#: (:data:`MAX_KEPT_BYTES`).
ASSEMBLE_BYTES = 1 << 18

#: A stream longer than :data:`ASSEMBLE_BYTES` keeps its events unparsed, up to this many
#: bytes, and is assembled in the request path's worker process when it ends: parsing
#: a 10 MB stream's events on the loop, even a bounded piece at a time, was a fifth of
#: the loop's GIL time under ``bench.stall``'s load (issue 16). Past this size (or where
#: no worker can run) the events kept are parsed here after all, as they come.
MAX_KEPT_BYTES = 64 << 20


class TrackingTap:
    """Records the reply of one request. Never raises, never changes a response:
    ``observe_only`` (the server may feed it a JSON reply right after sending it, see
    :class:`proxy.server.hooks.ResponseTap`). What it is fed is only kept: SSE events are
    passed through unchanged and immediately, and the reply is parsed or reassembled from
    them, and recorded, once the event loop is quiet
    (:meth:`~proxy.gate.tracker.Tracker.later`) — a long stream's events are parsed as they
    come, :data:`ASSEMBLE_BYTES` at a time.

    With a shared store the tap ``settles``: the server awaits :meth:`settle` before the
    response ends, and the reply is recorded and committed by then — so the client's
    next request, whichever replica it reaches, sees it. The server then feeds a JSON
    reply before sending it rather than after."""

    observe_only = True

    def __init__(self, tracker: ReplySink, obs: Observation) -> None:
        self.tracker = tracker
        self.obs = obs
        self._events: list[bytes] = []
        self._pending = 0
        self._asm: StreamAssembler | None = None
        #: the stream's events are kept whole, for the worker (see MAX_KEPT_BYTES)
        self._keep: bool | None = None
        self._done = False
        self.settles = tracker.shared

    async def settle(self) -> None:
        await self.tracker.acknowledge(self.obs)

    def _record(
        self, reply: Callable[[], Reply | None], status: str, after: asyncio.Future[Any] | None = None
    ) -> None:
        if self._done:
            return
        self._done = True
        tracker, obs = self.tracker, self.obs

        def record() -> None:
            try:
                got, got_status = reply(), status
            except Exception:  # a stream that cannot be reassembled: recorded as such
                log.exception("tracker: could not reassemble the reply")
                got, got_status = None, "tap_error"
            tracker.record_counted(obs, got, got_status)

        try:
            tracker.later(record, obs.conversation_id, after)
        except Exception:  # observing must never break the response
            log.exception("tracker: could not record reply")

    def feed_json(self, status: int, body: bytes) -> bytes:
        api = self.obs.api
        if not 200 <= status < 300:
            self._record(lambda: None, f"http_{status}")
            return body

        parsing = _parse_elsewhere(api, body)
        made: dict[tuple[int, int], str] = {}

        def reply() -> Reply | None:
            pickled = _worker_result(parsing) if parsing is not None else None
            if pickled is None:  # no worker, or drained before it was done (or it failed): here
                return _reply_of(api, body)[0]
            return bodyrefs.loads(pickled, body, made)[0]  # type: ignore[no-any-return]

        self._record(reply, "ok", _prepared(parsing, lambda p: (p, body), made) if parsing is not None else None)
        return body

    def feed_event(self, raw_event: bytes) -> list[bytes]:
        self._events.append(raw_event)
        self._pending += len(raw_event)
        if self._pending > ASSEMBLE_BYTES:
            if self._keep is None:
                self._keep = _can_offload()
            if not self._keep or self._pending > MAX_KEPT_BYTES:
                self._keep = False
                self._assemble()  # a long stream is parsed as it goes, a bounded piece at a time
        return [raw_event]

    def _assemble(self) -> StreamAssembler:
        asm = self._asm = self._asm or StreamAssembler(self.obs.api)
        for raw in self._events:
            try:  # noqa: SIM105 - per SSE event: a plain try is cheaper than suppress()
                asm.feed(raw)
            except Exception:  # noqa: BLE001 - a malformed event is skipped, as it streamed
                pass
        self._events = []
        self._pending = 0
        return asm

    def _assembled(self) -> Reply | None:
        return self._assemble().result()

    def finish(self) -> list[bytes]:
        if self._keep and self._asm is None:  # a long stream, its events kept whole: the worker's
            self._finish_elsewhere("ok")
            return []
        if self._asm is None:  # a short stream: assembled when it is recorded
            self._record(self._assembled, "ok")
            return []
        # a long one: its last events, its text joined and hashed (~20 ms for 10 MB,
        # most of it without the GIL) in a worker thread; recorded once that is done
        lock = threading.Lock()
        made: list[Reply | None] = []

        def assemble() -> None:
            with lock:
                if not made:
                    made.append(self._assembled())

        def reply() -> Reply | None:
            assemble()  # done in the thread already (or, drained before it was, now)
            return made[0]

        self._record(reply, "ok", _in_thread(assemble))  # at the loop's priority: a drain may wait for it
        return []

    def _finish_elsewhere(self, status: str) -> None:
        """The kept events assembled in the worker, the reply recorded with ``status``
        once it is done (a stream cut short, ``status`` not ``ok``: what arrived, or
        nothing — never an error)."""
        events = self._events
        here = self._assembled if status == "ok" else self._assembled_or_none
        parsing = offload.submit(_stream_elsewhere, self.obs.api, sharedmem.Joined(events),
                                 out=sum(map(len, events)))
        if parsing is None:  # no worker after all
            self._record(here, status)
            return

        made: dict[tuple[int, int], str] = {}

        def reply() -> Reply | None:
            done = _worker_result(parsing)
            if done is None:  # drained before the worker was done (or it failed): here
                return here()
            pickled, texts = done
            if pickled:
                return bodyrefs.loads(pickled, texts, made)[0]  # type: ignore[no-any-return]
            if status != "ok":
                return None
            raise ValueError("the stream's events could not be assembled")

        self._record(reply, status, _prepared(parsing, lambda d: d, made))

    def _assembled_or_none(self) -> Reply | None:
        try:
            return self._assembled()
        except Exception:  # noqa: BLE001 - cut short mid-event: nothing usable
            return None

    def closed(self, reason: str) -> None:
        if self._keep and self._asm is None:
            self._finish_elsewhere(reason)
            return
        self._record(self._assembled_or_none, reason)


def _reply_of(api: str, body: bytes) -> tuple[Reply | None]:
    """The reply a JSON body holds (``None``: not JSON, too deep, not a reply); never
    raises (it may run in the worker process, see :func:`_parse_elsewhere`)."""
    try:
        return (reply_from_json(api, json.loads(body)),)
    except Exception:  # noqa: BLE001 - not JSON, too deep, ...: no reply to record
        return (None,)


def _worker_result(parsing: Future[T]) -> T | None:
    """What the worker made, if it is done with it; else ``None``, and the worker's part
    is cancelled (the caller does the work itself)."""
    if parsing.done() and not parsing.cancelled() and parsing.exception() is None:
        return parsing.result()
    parsing.cancel()
    return None


def _awaitable(parsing: Future[Any]) -> asyncio.Future[Any]:
    """The worker's future on the loop, for the record to wait for. Its failure is the
    record's to handle (it parses here then): marked as seen, so asyncio never logs it
    as an exception nobody retrieved."""
    fut = asyncio.wrap_future(parsing)
    fut.add_done_callback(lambda f: f.cancelled() or f.exception())
    return fut


def _prepared(
    parsing: Future[T], pickled_of: Callable[[T], tuple[bytes, bytes | bytearray]], made: dict[tuple[int, int], str]
) -> asyncio.Future[Any]:
    """:func:`_awaitable`, and once the worker is done, the long ASCII strings of what it
    pickled made into ``made`` a slice at a time (:func:`proxy.server.filled.ascii_texts_later`):
    the record's ``bodyrefs.loads`` then decodes none of them in one step. Its failure
    is the worker's (the record parses here then)."""
    worker = _awaitable(parsing)
    out: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    out.add_done_callback(lambda f: f.cancelled() or f.exception())

    def settle(f: asyncio.Future[Any]) -> None:
        error = None if f.cancelled() else f.exception()
        if out.done():
            return
        if error is None:
            out.set_result(None)
        else:
            out.set_exception(error)

    def worked(f: asyncio.Future[Any]) -> None:
        if f.cancelled() or f.exception() is not None:
            settle(f)
            return
        try:
            pickled, body = pickled_of(f.result())
            spans = bodyrefs.ascii_spans(pickled) if pickled else ()
        except Exception as exc:  # noqa: BLE001 - the record decodes it itself (and fails there)
            out.set_exception(exc)
            return
        filled.ascii_texts_later(body, spans, made).add_done_callback(settle)

    worker.add_done_callback(worked)
    return out


def _can_offload() -> bool:
    """Whether a long stream can be assembled in the worker: there is an event loop and
    a worker can run here."""
    return in_loop() and offload.can_offload()


def _stream_elsewhere(api: str, raw: bytes) -> tuple[bytes, bytes]:
    """In the worker: the reply of a stream's events (``raw``: them all, as they came),
    pickled with its long strings as spans of the second item — those strings' UTF-8,
    one after the other — which comes back through shared memory
    (:mod:`proxy.state.sharedmem`). Never raises: for a stream that cannot be assembled
    both are empty."""
    try:
        asm = StreamAssembler(api)
        for event in SSESplitter().feed(raw):
            try:  # noqa: SIM105 - per SSE event, as TrackingTap._assemble
                asm.feed(event)
            except Exception:  # noqa: BLE001 - a malformed event is skipped, as it streamed
                pass
        got: tuple[Reply | None] = (asm.result(),)
    except Exception:  # noqa: BLE001 - nothing usable
        return b"", b""
    texts = bodyrefs.long_strings(got)
    return bodyrefs.dumps(got, texts), texts


def _in_thread(fn: Callable[[], None]) -> asyncio.Future[Any] | None:
    """``fn`` in a background thread (its future), or ``None`` outside an event loop."""
    return in_daemon_thread(fn) if in_loop() else None


def _reply_elsewhere(api: str, body: bytes) -> bytes:
    """In the worker: :func:`_reply_of`, pickled with its long strings as spans of
    ``body`` (:mod:`proxy.core.bodyrefs`)."""
    return bodyrefs.dumps(_reply_of(api, body), body)


def _parse_elsewhere(api: str, body: bytes) -> Future[bytes] | None:
    """A large reply parsed in the request path's worker process (a future of the
    worker's, done as soon as the worker is: a drain that comes after it uses it,
    :func:`proxy.core.bodyrefs.loads` with the same ``body``); ``None`` for a small
    one, outside an event loop, or when no worker can run."""
    if len(body) < OFFLOAD_BYTES or not in_loop():
        return None
    return offload.submit(_reply_elsewhere, api, body)
