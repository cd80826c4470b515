"""Redis store: the shared state of several replicas (``state.backend: redis``).

Implements the shared-store protocol (:mod:`proxy.state.protocol`) with one Lua script
per atomic step (:mod:`proxy.state.redis_scripts`, which also documents the key layout):
a commit is a compare-and-set on the conversation's etag, so two replicas changing one
conversation at once never lose an update, and every reply Redis acknowledged is a
committed write that any replica's next read sees. Keys are namespaced by
``state.key_prefix`` and scoped by tenant hash; a conversation's keys expire
``ttl_seconds`` after its last commit; the store-wide ones are capped and swept.

How it talks to Redis (one connection, pipelined batches; failing open, with a
backoff, while Redis is down) is its base, :class:`~proxy.state.redis_conn.RedisConnection`;
what it sends and reads, as values, is :mod:`proxy.state.redis_values`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from proxy.core.messages import Message
from proxy.state.protocol import (
    Changed,
    Commit,
    Committed,
    SideWrite,
    StateUnavailable,
    Synced,
)
from proxy.state.records import (
    ConversationRecord,
    GateEvent,
    StoredMessages,
    TimelineEntry,
    message_from_json,
)
from proxy.state.redis_conn import RedisConnection
from proxy.state.redis_values import (
    append_groups,
    key_hash,
    record_of_fields,
    reply_text,
    stats_args,
)
from proxy.state.spill import SpillRecord, SpillStorage, spill_from_row, spill_row

__all__ = ["RedisStore"]

#: Conversations per page of a first sync of a namespace.
SYNC_PAGE = 200
#: Messages serialised off the event loop beyond this many characters in one write.
THREAD_TEXT = 64 * 1024
#: Digests of messages this process's commits stored, remembered per conversation (the
#: most recent, at most so many in all and per conversation): a message its commit
#: stored in a conversation's message hash is not redacted, encoded nor sent again in
#: that conversation's later commits — the same tool result or the same short user turn
#: ("continue") again, a fork's prefix (the shared SQLite store's ``STORED_DIGESTS``,
#: per conversation here: Redis keeps messages per conversation). The
#: memory of a conversation is dropped when a sync brings another process's change of
#: it, when a commit of it is refused or its outcome unknown, when the store goes down;
#: a commit that creates the conversation sends every message (its keys may have been
#: deleted and made again). A conversation's message hash is deleted only with the
#: conversation, after which a commit expecting its etag is refused.
STORED_DIGESTS = 16384
STORED_PER_CONVERSATION = 256


class _SharedSync:
    """A sync in progress, which a caller of the same sync may join while its first
    page is not written yet (:meth:`RedisStore.sync`)."""

    __slots__ = ("first", "result")

    def __init__(self, result: asyncio.Future[Synced]) -> None:
        self.result = result
        self.first: asyncio.Future[Any] | None = None


class RedisStore(RedisConnection):
    """A shared store in Redis at ``url`` (``redis://[:password@]host:port/db``,
    ``rediss://`` for TLS). ``ttl_seconds``: a conversation's keys expire that long
    after its last commit; ``max_timeline``/``max_events``: kept per conversation;
    ``max_log``: the store-wide event log; ``timeout``: seconds to connect and per
    call."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "cg",
        ttl_seconds: float = 7 * 24 * 3600.0,
        max_timeline: int = 1000,
        max_events: int = 1000,
        max_log: int = 5000,
        timeout: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(url, timeout=timeout)
        self.prefix = prefix
        self.ttl = max(1, int(ttl_seconds))
        self.max_timeline = max_timeline
        self.max_events = max_events
        self.max_log = max_log
        self.clock = clock
        #: see :data:`STORED_DIGESTS`: conversation id -> digests, and how many in all (the
        #: loop's thread only)
        self._stored: OrderedDict[str, OrderedDict[str, None]] = OrderedDict()
        self._stored_n = 0
        #: syncs in progress, by (tenant, namespace, cursor, bodies)
        self._syncing: dict[tuple[str, str, int, int], _SharedSync] = {}
        self._spills = RedisSpills(self)

    # -- connection and health (the rest is the base's)

    async def flush(self) -> None:
        await self._spills.flush()
        await self._pipe.idle()

    def _went_down(self, exc: BaseException) -> StateUnavailable:
        """The base's, having first forgotten which messages were stored
        (:data:`STORED_DIGESTS`): a restarted Redis, without persistence, has not them."""
        self._stored.clear()
        self._stored_n = 0
        return super()._went_down(exc)

    # -- keys

    def _t(self, tenant: str) -> str:
        return f"{self.prefix}:t:{tenant}"

    def _c(self, tenant: str, cid: str) -> str:
        return f"{self._t(tenant)}:c:{key_hash(cid)}"

    def _ns(self, tenant: str, namespace: str) -> str:
        return f"{self._t(tenant)}:n:{key_hash(namespace)}"

    # -- the shared protocol

    async def sync(
        self,
        tenant: str,
        namespace: str,
        cursor: int,
        *,
        reload: Iterable[str] = (),
        bodies: int = 256,
        known: Mapping[str, str] | None = None,
    ) -> Synced:
        again = list(reload)
        key = (tenant, namespace, cursor, bodies)
        shared = self._syncing.get(key)
        if shared is not None and not again and (shared.first is None or self._pipe.unsent(shared.first)):
            # the same sync, not written yet: Redis runs it after this call was made, so its
            # answer is as recent as this call's own would be (the caller's own commits it
            # leaves out, ``known``, are a no-op to adopt)
            try:
                return await asyncio.shield(shared.result)
            except asyncio.CancelledError:
                if not shared.result.cancelled():
                    raise  # this caller was cancelled
                # the first caller was: sync on its own
        entry = _SharedSync(asyncio.get_running_loop().create_future())
        self._syncing[key] = entry
        try:
            synced = await self._sync(tenant, namespace, cursor, again, bodies, known, entry)
        except asyncio.CancelledError:
            entry.result.cancel()
            raise
        except BaseException as exc:
            entry.result.set_exception(exc)
            entry.result.exception()  # retrieved: nobody may have joined
            raise
        finally:
            if self._syncing.get(key) is entry:
                del self._syncing[key]
        entry.result.set_result(synced)
        return synced

    async def _sync(
        self,
        tenant: str,
        namespace: str,
        cursor: int,
        again: list[str],
        bodies: int,
        known: Mapping[str, str] | None,
        entry: _SharedSync,
    ) -> Synced:
        ns = self._ns(tenant, namespace)
        changed: list[Changed] = []
        after = cursor
        pairs = [x for kv in list((known or {}).items()) for x in kv]
        while True:
            fut = self._pipe.submit(
                "SCRIPT",
                "SYNC",
                (ns, ns + ":v"),
                (cursor, after, bodies, SYNC_PAGE, self._t(tenant) + ":c:", len(pairs) // 2, *pairs, *again),
            )
            if entry.first is None:
                entry.first = fut
            raw = await fut
            full, again = {reply_text(c) for c in again}, []
            next_cursor, more, entries = int(raw[0]), bool(raw[1]), raw[2]
            for cid, ver, meta, etag, evseq, stats, keep, tail, got in entries:
                if known is not None and reply_text(cid) not in full and known.get(reply_text(cid)) == reply_text(etag):
                    # held by the caller by now (its own commit acknowledged after the
                    # script's arguments were made, or a change an earlier sync brought)
                    continue
                rec = record_of_fields(meta, etag, evseq, stats)
                digests = tuple(reply_text(d) for d in tail)
                msgs: Mapping[str, Message] | None = None
                if digests and len(got) == len(digests) and all(b is not None for b in got):
                    msgs = StoredMessages(dict(zip(digests, got, strict=True)))  # parsed when read
                elif not digests:
                    msgs = {}
                if rec.id != reply_text(cid):
                    rec.id = reply_text(cid)
                self._forget_stored(rec.id)  # changed elsewhere (or made again)
                changed.append(Changed(rec, int(keep), digests, msgs, int(float(reply_text(ver)))))
            if not more:
                return Synced(next_cursor, tuple(changed))
            after = next_cursor  # the next page; every page is computed against ``cursor``

    def _commit_args(self, c: Commit) -> list[Any]:
        args: list[Any] = [
            c.conversation_id, c.expect or "", c.etag, ConversationRecord.meta_dict_to_json(c.meta), repr(c.last_seen),
            c.keep, self.ttl, self.max_timeline, self.max_events, self.max_log, c.tenant,
            f"{self.prefix}:t:", f":c:{key_hash(c.conversation_id)}", *stats_args(c.stats),
        ]  # fmt: skip
        args.append(len(c.append))
        args.extend(c.append)
        append_groups(args, c.messages, c.blobs, c.timeline, c.events, c.log)
        return args

    async def commit(self, change: Commit) -> Committed:
        cid = change.conversation_id
        stored = self._stored.get(cid) if change.expect else None
        if stored and any(m.digest in stored for m in change.messages):
            change = replace(change, messages=tuple(m for m in change.messages if m.digest not in stored))
        try:
            res = await self._commit(change)
        except BaseException:
            self._forget_stored(cid)
            raise
        if not res.ok:
            self._forget_stored(cid)
        elif change.messages:
            self._remember_stored(cid, change.messages)
        return res

    def _remember_stored(self, cid: str, messages: Iterable[Message]) -> None:
        mine = self._stored.get(cid)
        if mine is None:
            mine = self._stored[cid] = OrderedDict()
        self._stored.move_to_end(cid)
        self._stored_n -= len(mine)
        for m in messages:
            mine[m.digest] = None
            mine.move_to_end(m.digest)
        while len(mine) > STORED_PER_CONVERSATION:
            mine.popitem(last=False)
        self._stored_n += len(mine)
        while self._stored_n > STORED_DIGESTS and len(self._stored) > 1:
            self._stored_n -= len(self._stored.popitem(last=False)[1])

    def _forget_stored(self, cid: str) -> None:
        self._stored_n -= len(self._stored.pop(cid, ()))

    async def _commit(self, change: Commit) -> Committed:
        t, cid = change.tenant, change.conversation_id
        base = self._c(t, cid)
        ns = self._ns(t, change.namespace)
        keys = (
            f"{self.prefix}:ids", f"{self.prefix}:convs", f"{self._t(t)}:convs", ns, ns + ":v",
            base, base + ":h", base + ":m", base + ":t", base + ":e", f"{self.prefix}:evid", f"{self.prefix}:log",
        )  # fmt: skip
        if sum(len(p.text) for m in change.messages for p in m.parts) > THREAD_TEXT:
            args = await asyncio.to_thread(self._commit_args, change)  # redacting large texts: off the loop
        else:
            args = self._commit_args(change)
        r = await self._script("COMMIT", keys, args)
        if not int(r[0]):
            return Committed(False, reply_text(r[1]))
        return Committed(True, "", int(r[2]), int(r[3]))

    def _side_call(self, w: SideWrite) -> asyncio.Future[Any]:
        cid = w.conversation_id
        base = self._c(w.tenant, cid) if cid is not None else f"{self.prefix}:none"
        keys = (base, base + ":m", base + ":t", base + ":e", f"{self.prefix}:evid", f"{self.prefix}:log")
        args: list[Any] = [
            "1" if cid is not None else "0", self.max_timeline, self.max_events, self.max_log, *stats_args(w.stats)
        ]
        append_groups(args, w.messages, (), w.timeline, w.events, w.log)
        return self._pipe.submit("SCRIPT", "SIDE", keys, tuple(args))

    async def side(self, writes: Iterable[SideWrite]) -> None:
        futs = [self._side_call(w) for w in writes]
        if futs:
            await asyncio.gather(*futs)

    async def read_conversation(self, conversation_id: str, max_timeline: int = 1000) -> ConversationRecord | None:
        owner = await self._call("HGET", f"{self.prefix}:ids", conversation_id)
        if owner is None:
            return None
        base = self._c(reply_text(owner), conversation_id)
        f, digests, tl, ev = await asyncio.gather(
            self._call("HMGET", base, "meta", "etag", "ev", "st"),
            self._call("LRANGE", base + ":h", 0, -1),
            self._call("HGETALL", base + ":t"),
            self._call("HGETALL", base + ":e"),
        )
        if f[0] is None:
            return None
        rec = record_of_fields(*f)
        rec.digests = tuple(reply_text(d) for d in digests)
        entries = sorted((int(k), reply_text(v)) for k, v in tl.items())[-max_timeline:]
        rec.timeline = [TimelineEntry.from_json(v) for _, v in entries]
        events = []
        for k, v in sorted((int(k), reply_text(v)) for k, v in ev.items()):
            e = GateEvent.from_json(v)
            e.seq = k
            events.append(e)
        rec.events = events
        return rec

    async def recent_conversations(self, *, tenant: str | None = None, limit: int = 200) -> tuple[int, list[ConversationRecord]]:
        zset = f"{self._t(tenant)}:convs" if tenant is not None else f"{self.prefix}:convs"
        raw = await self._script("LIST", (zset, f"{self.prefix}:ids"), (limit, f"{self.prefix}:t:"))
        recs = []
        for cid, meta, etag, evseq, stats in raw[1]:
            rec = record_of_fields(meta, etag, evseq, stats)
            rec.id = reply_text(cid)
            recs.append(rec)
        return int(raw[0]), recs

    async def conversation_messages(self, rec: ConversationRecord, digests: Iterable[str]) -> dict[str, Message]:
        wanted = list(dict.fromkeys(digests))
        base = self._c(rec.tenant, rec.id) + ":m"
        parts = await asyncio.gather(*[self._call("HMGET", base, *wanted[i : i + 1000]) for i in range(0, len(wanted), 1000)])
        out: dict[str, Message] = {}
        flat = [b for part in parts for b in part]
        for d, body in zip(wanted, flat, strict=True):
            if body is not None:
                out[d] = message_from_json(reply_text(body))
        return out

    async def conversation_blobs(self, rec: ConversationRecord, keys: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        got = await self._call("HMGET", self._c(rec.tenant, rec.id) + ":m", *["b:" + k for k in wanted])
        return {k: reply_text(v) for k, v in zip(wanted, got, strict=True) if v is not None}

    async def log(
        self,
        *,
        since: int = 0,
        limit: int = 100,
        conversation: str | None = None,
        action: str | None = None,
        kind: str | None = None,
    ) -> list[dict[str, Any]]:
        top = int(await self._call("GET", f"{self.prefix}:evid") or 0)
        first = max(since + 1, top - self.max_log + 1, 1)
        ids = list(range(first, top + 1))
        parts = await asyncio.gather(
            *[self._call("HMGET", f"{self.prefix}:log", *ids[i : i + 1000]) for i in range(0, len(ids), 1000)]
        )
        out: list[dict[str, Any]] = []
        for i, body in zip(ids, (b for p in parts for b in p), strict=True):
            if body is None:
                continue
            e = json.loads(reply_text(body))
            if (
                (conversation is None or e.get("conversation") == conversation)
                and (action is None or e.get("action") == action)
                and (kind is None or e.get("kind") == kind)
            ):
                out.append({"id": i, **e})
        return out[-limit:]

    async def sweep(self, now: float, ttl_seconds: float, max_conversations: int) -> int:
        n = await self._script(
            "SWEEP", (f"{self.prefix}:convs", f"{self.prefix}:ids"), (now - ttl_seconds, max_conversations, f"{self.prefix}:t:", 500)
        )
        return int(n)

    def spills(self) -> RedisSpills:
        """The spill storage of this store (records under the owning tenant's keys)."""
        return self._spills

    # -- the sole-store API: a shared store is never written or loaded that way

    async def load_messages(self, digests: Iterable[str]) -> dict[str, Message]:
        raise NotImplementedError("a Redis store loads messages per conversation: use history()")

    async def load_blobs(self, keys: Iterable[str]) -> dict[str, str]:
        raise NotImplementedError("a Redis store loads blobs per conversation: use blobs()")


class RedisSpills(SpillStorage):
    """Spill records as Redis strings under the owning tenant's keys, expiring with the
    record. Puts are sent at once and awaited by :meth:`flush` (the gate flushes before
    it forwards the request that tells the model the handle)."""

    remote = True

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self._pending: list[asyncio.Future[Any]] = []

    def _key(self, tenant: str, handle: str) -> str:
        return f"{self.store._t(tenant)}:s:{handle}"

    def put(self, rec: SpillRecord, *, max_records: int, now: float) -> None:
        ttl = max(1, int(rec.expires - now))
        fut = self.store._pipe.submit("SET", self._key(rec.tenant, rec.handle), json.dumps(spill_row(rec)), "EX", ttl)
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # failures surface in flush()
        self._pending.append(fut)

    async def flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending:
            await asyncio.gather(*pending)

    async def aload(self, handle: str, tenant: str) -> SpillRecord | None:
        body = await self.store._call("GET", self._key(tenant, handle))
        if body is None:
            return None
        try:
            return spill_from_row(json.loads(reply_text(body)))
        except (ValueError, TypeError, KeyError):
            return None
