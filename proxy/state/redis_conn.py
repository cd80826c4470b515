"""The Redis store's connection to Redis and its health: the base of
:class:`~proxy.state.redis.RedisStore`, apart from what the store sends (the shared
protocol, its keys and values), because it is what :mod:`proxy.state.redis_pipeline`
works with.

The client is ``redis.asyncio``. Calls made in the same event-loop step go to Redis in
one batch (a request's sync and another's commit share a round trip), written on the
store's own connection in one write, the next batch before the last is answered
(:mod:`proxy.state.redis_pipeline`, which gives the ordering rules). A connection
that fails while the store was reachable is tried once more, with every batch it left
unanswered, on a new connection (after a Redis restart every pooled connection is dead; a commit sent
twice is refused by its own compare-and-set); otherwise a connection failure marks the
store unavailable (:class:`~proxy.state.protocol.StateUnavailable`, raised at once) for a
backoff that doubles from 0.1 s to 5 s; the first call after it tries again (a new
connection), and success marks it available and runs the ``recovered`` callbacks. The
URL's password never appears in what the store says about itself (:attr:`describe`),
in its errors or in logs.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from proxy.state import redis_scripts as lua
from proxy.state.protocol import StateUnavailable
from proxy.state.redis_pipeline import Pipeline
from proxy.state.redis_values import reply_text
from proxy.state.store import SharedStore

__all__ = ["BACKOFF_FIRST", "BACKOFF_MAX", "RedisConnection", "redact_url"]

log = logging.getLogger("proxy.state.redis")

BACKOFF_FIRST = 0.1
BACKOFF_MAX = 5.0


def redact_url(url: str) -> str:
    """``url`` without its credentials (``redis://host:port/db``)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "redis://?"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{port}{parts.path}"


class RedisConnection(SharedStore):
    """The connection to the Redis at ``url`` and whether it is reachable (see the
    module docstring); ``timeout``: seconds to connect and per call."""

    def __init__(self, url: str, *, timeout: float) -> None:
        self._url = url
        self.describe = f"redis at {redact_url(url)}"
        self.timeout = timeout
        self._client: Any = None
        #: the connection the batches are written on (:mod:`proxy.state.redis_pipeline`)
        self._conn: Any = None
        self._shas: dict[str, str] = {}
        self._pipe = Pipeline(self)
        self.available = True
        self._retry_at = 0.0
        self._backoff = BACKOFF_FIRST
        self.last_error = ""
        #: called (on the loop) when the store becomes reachable again after a failure
        self.recovered: list[Callable[[], None]] = []
        #: called with the error when the store becomes unreachable
        self.lost: list[Callable[[StateUnavailable], None]] = []

    # -- connection and health

    def _make_client(self) -> Any:
        from redis.asyncio import Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        return Redis.from_url(
            self._url,
            socket_timeout=self.timeout,
            socket_connect_timeout=self.timeout,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            health_check_interval=0,
            decode_responses=False,
        )

    async def open(self) -> None:
        """Connect and load the scripts; a Redis that is down does not stop the start
        (requests fail open until it is back)."""
        if self._client is None:
            try:
                self._client = self._make_client()
            except ValueError as exc:  # a malformed URL: say so without quoting it
                raise StateUnavailable(f"invalid redis URL ({exc.__class__.__name__})", "error") from None
        with contextlib.suppress(StateUnavailable):
            await self.ping()

    async def close(self) -> None:
        await self.flush()
        client, self._client = self._client, None
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.disconnect()
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()

    async def ping(self) -> None:
        await self._call("PING")

    def _check_available(self) -> None:
        if self._client is None:
            raise StateUnavailable(f"{self.describe}: not open", "unreachable")
        if not self.available and time.monotonic() < self._retry_at:
            raise StateUnavailable(f"{self.describe} unreachable ({self.last_error}); retrying", "unreachable")

    def _went_down(self, exc: BaseException) -> StateUnavailable:
        from redis import exceptions as rx

        reason = "timeout" if isinstance(exc, (rx.TimeoutError, TimeoutError)) else "unreachable"
        self.last_error = exc.__class__.__name__
        first = self.available
        self.available = False
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(BACKOFF_MAX, self._backoff * 2)
        self._shas.clear()  # a restarted Redis has no scripts
        err = StateUnavailable(f"{self.describe} unreachable ({self.last_error})", reason)
        if first:
            log.warning("state: %s unreachable (%s); failing open until it is back", self.describe, self.last_error)
            for fn in list(self.lost):
                with contextlib.suppress(Exception):
                    fn(err)
        return err

    def _came_up(self) -> None:
        self._backoff = BACKOFF_FIRST
        if self.available:
            return
        self.available = True
        log.warning("state: %s reachable again", self.describe)
        for fn in list(self.recovered):
            try:
                fn()
            except Exception:
                log.exception("state: recovery callback failed")

    async def _load_scripts(self) -> None:
        names = {"COMMIT": lua.COMMIT, "SIDE": lua.SIDE, "SYNC": lua.SYNC, "LIST": lua.LIST, "SWEEP": lua.SWEEP}
        for name, text in names.items():
            self._shas[name] = reply_text(await self._client.script_load(text))

    def _expand(self, c: tuple[Any, ...]) -> tuple[Any, ...]:
        if c[0] == "SCRIPT":
            _, name, keys, args = c
            return ("EVALSHA", self._shas[name], len(keys), *keys, *args)
        return c

    async def _call(self, *command: Any) -> Any:
        return await self._pipe.submit(*command)

    async def _script(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return await self._pipe.submit("SCRIPT", name, tuple(keys), tuple(args))
