"""How the Redis store's calls reach Redis (:mod:`proxy.state.redis`): batches of
commands written on the store's own connection."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from proxy.state.protocol import StateUnavailable

if TYPE_CHECKING:
    from proxy.state.redis import RedisStore

__all__ = ["_Pipeline", "_pack"]


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


class _Pipeline:
    """Runs the store's calls in pipelines: everything submitted while one is in flight
    goes in the next (see the module docstring)."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self._queue: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._task: asyncio.Task[None] | None = None

    def submit(self, *command: Any) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._queue.append((command, fut))
        if self._task is None:
            self._task = loop.create_task(self._run())
        return fut

    async def _run(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                await self._execute(batch)
        finally:
            self._task = None

    async def _execute(self, batch: list[tuple[tuple[Any, ...], asyncio.Future[Any]]]) -> None:
        from redis import exceptions as rx

        store = self.store
        try:
            store._check_available()
            try:
                results = await self._send([c for c, _ in batch])
            except (rx.ConnectionError, OSError):
                if not store.available:
                    raise
                # the pooled connection may be one a restarted Redis closed: one more
                # try, on a new connection, before calling the store down
                results = await self._send([c for c, _ in batch])
            if any(isinstance(r, rx.NoScriptError) for r in results):
                await store._load_scripts()
                redo = [i for i, r in enumerate(results) if isinstance(r, rx.NoScriptError)]
                again = await self._send([batch[i][0] for i in redo])
                for i, r in zip(redo, again, strict=True):
                    results[i] = r
        except StateUnavailable as exc:
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            return
        except (rx.ConnectionError, rx.TimeoutError, OSError) as exc:
            err = store._went_down(exc)
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(err)
            return
        except rx.RedisError as exc:  # e.g. a transaction Redis refused as a whole
            refused = StateUnavailable(
                f"redis refused a command: {exc.__class__.__name__}", "error"
            )
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(refused)
            return
        store._came_up()
        for (_, fut), r in zip(batch, results, strict=True):
            if fut.done():
                continue
            if isinstance(r, Exception):
                fut.set_exception(
                    StateUnavailable(f"redis refused a command: {r.__class__.__name__}", "error")
                )
            else:
                fut.set_result(r)

    async def _send(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        store = self.store
        if not store._shas:
            await store._load_scripts()
        if sum(1 for c in commands if c[0] != "SCRIPT") > 1:
            # MULTI/EXEC: the reads of one batch see one state (a record's meta, history
            # and events read together never mix two commits of another replica); a
            # script is atomic on its own
            pipe = store._client.pipeline(transaction=True)
            for c in commands:
                pipe.execute_command(*store._expand(c))
            return list(await pipe.execute(raise_on_error=False))
        return await self._send_plain(commands)

    async def _send_plain(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Send ``commands`` in one write on the store's own connection and read their
        replies (one timeout for the whole batch): redis-py's pipeline builds, encodes
        and times out every command on its own, which cost more CPU per request than
        the gate's own bookkeeping of it."""
        from redis import exceptions as rx

        store = self.store
        conn = store._conn
        if conn is None:
            pool = store._client.connection_pool
            conn = store._conn = pool.connection_class(
                **{**pool.connection_kwargs, "socket_timeout": None}
            )
        results: list[Any] = [None] * len(commands)
        data: list[bytes] = []
        sent: list[int] = []
        for i, c in enumerate(commands):
            try:
                data.append(_pack(store._expand(c)))
                sent.append(i)
            except (UnicodeEncodeError, rx.DataError) as exc:
                results[i] = rx.DataError(exc.__class__.__name__)
        if not sent:
            return results
        try:
            async with asyncio.timeout(store.timeout):
                await conn.send_packed_command(data, check_health=False)
                for i in sent:
                    try:
                        results[i] = await conn.read_response(
                            disable_decoding=True, timeout=math.inf
                        )
                    except rx.ResponseError as exc:
                        results[i] = exc
        except TimeoutError:
            await conn.disconnect(nowait=True)
            raise rx.TimeoutError("redis did not answer in time") from None
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        return results
