"""How the Redis store's calls reach Redis (:mod:`proxy.state.redis`): batches of
commands written on the store's own connection, pipelined.

Everything submitted in one event-loop step goes in one batch, written in one write
(several plain reads in one batch go in a ``MULTI``/``EXEC`` transaction, so they see
one state; a script is atomic on its own). The next batch is written as soon as it is
submitted, before the batches already written are answered (up to
:data:`PIPELINE_DEPTH` unanswered): Redis answers one connection's commands in the
order they were written, so a request's sync no longer waits for another request's
commit to come back before it is even sent. Ordering rules:

- every call has a sequence number; batches are written in that order, and a call
  that has to be sent again (after a connection failure, a script Redis no longer
  knows) goes back into the queue at its place, before every later call: on one
  connection, in the order submitted;
- a connection that fails while the store was reachable takes every unanswered batch
  with it: they are sent once more, in order, on a new connection (a commit that did
  run the first time is refused by its own compare-and-set); a second failure, or a
  timeout (each batch is answered within ``timeout`` of being written), marks the
  store unavailable and fails every unanswered call;
- a caller that needs the outcome of a call before its next one awaits it, as before:
  a conversation's commit is never in flight together with a later one of the same
  conversation (:mod:`proxy.gate.replica_sync` waits its turn).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from proxy.state.protocol import StateUnavailable

if TYPE_CHECKING:
    from proxy.state.redis_conn import RedisConnection

__all__ = ["PIPELINE_DEPTH", "Call", "Flight", "Pipeline", "_pack"]

#: Batches written and not yet answered, at most (more wait, and go in one batch).
PIPELINE_DEPTH = 4

def _pack(args: Sequence[Any]) -> bytes:
    """One command in the RESP wire format (as redis-py's encoder writes its arguments:
    text as UTF-8, numbers by ``repr``)."""
    from redis.exceptions import DataError

    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            b = a.encode("utf-8")
        elif isinstance(a, bytes):
            b = a
        elif isinstance(a, (int, float)) and not isinstance(a, bool):
            b = repr(a).encode()
        else:
            raise DataError(f"cannot send a {type(a).__name__}")
        out += (b"$%d\r\n" % len(b), b, b"\r\n")
    return b"".join(out)


class Call:
    __slots__ = ("command", "fut", "seq", "tries")

    def __init__(self, command: tuple[Any, ...], fut: asyncio.Future[Any], seq: int) -> None:
        self.command, self.fut, self.seq, self.tries = command, fut, seq, 0


class Flight:
    """A batch written and not yet answered: its calls, whether they went in a
    transaction, the connection and when it must be answered by."""

    __slots__ = ("calls", "conn", "deadline", "multi")

    def __init__(self, calls: list[Call], multi: bool, conn: Any, deadline: float) -> None:
        self.calls, self.multi, self.conn, self.deadline = calls, multi, conn, deadline


class Pipeline:
    """Runs the store's calls in pipelined batches (see the module docstring)."""

    def __init__(self, store: RedisConnection) -> None:
        self.store = store
        self._queue: list[Call] = []
        self._seq = itertools.count()
        self._task: asyncio.Task[None] | None = None  # the writer
        self._reader: asyncio.Task[None] | None = None
        self._flights: deque[Flight] = deque()
        #: the most batches that were unanswered at once (what tests look at)
        self.deepest = 0

    def submit(self, *command: Any) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append(Call(command, fut, next(self._seq)))
        self._wake()
        return fut

    def unsent(self, fut: asyncio.Future[Any]) -> bool:
        """Whether the call of ``fut`` is still waiting to be written."""
        return any(c.fut is fut for c in self._queue)

    async def idle(self) -> None:
        """Return when every call submitted so far is answered (or failed)."""
        while True:
            calls = [*self._queue, *(c for f in self._flights for c in f.calls)]
            futs = [c.fut for c in calls if not c.fut.done()]
            if not futs:
                return
            await asyncio.gather(*futs, return_exceptions=True)

    def _wake(self) -> None:
        if self._task is None and self._queue and len(self._flights) < PIPELINE_DEPTH:
            self._task = asyncio.get_running_loop().create_task(self._write())

    def _requeue(self, calls: list[Call]) -> None:
        """Put ``calls`` back at their place in the queue (by sequence number)."""
        self._queue = sorted(self._queue + calls, key=lambda c: c.seq)
        self._wake()

    @staticmethod
    def _fail(calls: Sequence[Call], exc: BaseException) -> None:
        for c in calls:
            if not c.fut.done():
                c.fut.set_exception(exc)

    async def _write(self) -> None:
        try:
            while self._queue and len(self._flights) < PIPELINE_DEPTH:
                batch, self._queue = self._queue, []
                await self._send(batch)
        finally:
            self._task = None

    async def _send(self, batch: list[Call]) -> None:
        from redis import exceptions as rx

        store = self.store
        conn: Any = None
        try:
            store._check_available()
            conn = await self._connection()
            calls, multi, data = self._packed(batch)
            if not calls:
                return
            await conn.send_packed_command(data, check_health=False)
        except StateUnavailable as exc:
            self._fail(batch, exc)
            return
        except (rx.ConnectionError, rx.TimeoutError, OSError) as exc:
            self._connection_failed(conn, [c for c in batch if not c.fut.done()], exc)
            return
        except rx.RedisError as exc:
            self._fail(batch, StateUnavailable(f"redis refused a command: {exc.__class__.__name__}", "error"))
            return
        if conn is not store._conn:  # the connection failed while this was written
            self._connection_failed(conn, calls, rx.ConnectionError("connection replaced"))
            return
        self._flights.append(Flight(calls, multi, conn, time.monotonic() + store.timeout))
        self.deepest = max(self.deepest, len(self._flights))
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _connection(self) -> Any:
        """The store's own connection, connected, with the scripts loaded."""
        store = self.store
        if not store._shas:
            await store._load_scripts()
        conn = store._conn
        if conn is None:
            pool = store._client.connection_pool
            conn = store._conn = pool.connection_class(**{**pool.connection_kwargs, "socket_timeout": None})
        if not conn.is_connected:
            await conn.connect()
        return conn

    def _packed(self, batch: list[Call]) -> tuple[list[Call], bool, list[bytes]]:
        """The calls of ``batch`` that could be encoded (the others fail at once),
        whether they go in a transaction, and their bytes."""
        from redis import exceptions as rx

        store = self.store
        calls: list[Call] = []
        data: list[bytes] = []
        for c in batch:
            try:
                data.append(_pack(store._expand(c.command)))
                calls.append(c)
            except (UnicodeEncodeError, rx.DataError) as exc:
                self._fail([c], StateUnavailable(f"redis refused a command: {exc.__class__.__name__}", "error"))
        # MULTI/EXEC: the reads of one batch see one state (a record's meta, history and
        # events read together never mix two commits of another replica)
        multi = sum(1 for c in calls if c.command[0] != "SCRIPT") > 1
        if multi:
            data = [_pack(("MULTI",)), *data, _pack(("EXEC",))]
        return calls, multi, data

    def _connection_failed(self, conn: Any, calls: list[Call], exc: BaseException) -> None:
        """The connection ``conn`` (``None``: the store's) failed with ``calls``
        unanswered — and, when it is the store's connection, every batch in flight: send
        them all once more on a new connection if the store was reachable and none was
        sent again already, else call the store down. (A connection already replaced
        takes only ``calls`` with it: the batches in flight are on the new one.)"""
        store = self.store
        lost = list(calls)
        if conn is None or conn is store._conn:
            store._conn = None
            lost = [c for f in self._flights for c in f.calls] + lost
            self._flights.clear()
        lost = [c for c in lost if not c.fut.done()]
        if store.available and not any(c.tries for c in lost):
            for c in lost:
                c.tries += 1
            self._requeue(lost)
            return
        self._fail(lost, store._went_down(exc))
        self._wake()  # what waited for room is refused now

    async def _read(self) -> None:
        from redis import exceptions as rx

        try:
            while self._flights:
                f = self._flights[0]
                try:
                    async with asyncio.timeout(max(0.0, f.deadline - time.monotonic())):
                        results = await self._replies(f)
                except TimeoutError:
                    await f.conn.disconnect(nowait=True)
                    if self._head(f):
                        if f.conn is self.store._conn:
                            self.store._conn = None
                        lost = [c for fl in self._flights for c in fl.calls]
                        self._flights.clear()
                        self._fail(lost, self.store._went_down(rx.TimeoutError("redis did not answer in time")))
                    self._wake()  # what waited for room is refused now (the store is down)
                    continue
                except (rx.ConnectionError, OSError) as exc:
                    if self._head(f):
                        self._connection_failed(f.conn, [], exc)
                    continue
                if self._head(f):
                    self._flights.popleft()
                else:  # taken out by a failure of its connection, and answered after all
                    done = {id(c) for c in f.calls}
                    self._queue = [c for c in self._queue if id(c) not in done]
                self._resolve(f, results)
                self._wake()
        finally:
            self._reader = None

    def _head(self, f: Flight) -> bool:
        """Whether ``f`` is still the oldest batch in flight (not taken out by a
        failure of its connection while its answer was read)."""
        return bool(self._flights) and self._flights[0] is f

    async def _replies(self, f: Flight) -> list[Any]:
        """The replies to ``f``'s calls, in order (an error reply as its exception)."""
        from redis import exceptions as rx

        async def one() -> Any:
            try:
                return await f.conn.read_response(disable_decoding=True, timeout=math.inf)
            except rx.ResponseError as exc:
                return exc

        if not f.multi:
            return [await one() for _ in f.calls]
        await one()  # OK to MULTI
        queued = [await one() for _ in f.calls]
        done = await one()
        if isinstance(done, Exception) or any(isinstance(q, Exception) for q in queued):
            err = done if isinstance(done, Exception) else next(q for q in queued if isinstance(q, Exception))
            return [err] * len(f.calls)  # the transaction was refused as a whole
        return list(done)

    def _resolve(self, f: Flight, results: list[Any]) -> None:
        from redis import exceptions as rx

        store = self.store
        store._came_up()
        again: list[Call] = []
        for c, r in zip(f.calls, results, strict=True):
            if c.fut.done():
                continue
            if isinstance(r, rx.NoScriptError) and not c.tries:
                store._shas.clear()  # loaded again before the next write
                c.tries += 1
                again.append(c)
            elif isinstance(r, Exception):
                c.fut.set_exception(StateUnavailable(f"redis refused a command: {r.__class__.__name__}", "error"))
            else:
                c.fut.set_result(r)
        if again:
            self._requeue(again)
