"""Spill store: a compacted-away region kept under an unguessable, tenant-scoped handle.

- Handles are ``spill_`` + :func:`secrets.token_urlsafe` (192 bits): unguessable, and they
  carry no tenant or conversation information.
- A record is bound to the tenant hash of the API key that created it. ``GET
  /gate/spill/{handle}`` serves it only to a request whose key hashes to the same tenant;
  anything else — wrong key, no key, unknown or expired handle — is the same 404, so a
  handle's existence never leaks. The anonymous tenant (no key) is never served.
- Bounded: records expire after the policy's TTL; the store keeps at most
  ``max_records`` (oldest evicted) and ``max_bytes`` per record (the region is cut, and
  says so).
- Durable when given a storage (:mod:`proxy.state.spill`; the served proxy puts a SQLite
  file beside its SQLite state, or uses its Redis store, see
  :func:`proxy.gate.wiring.build_gate`): every record is also written there, so a handle
  given to an agent still resolves after a restart — and from every replica — until it
  expires. The in-memory store (no storage) loses them on restart.
- Secrets found in the region are redacted before it is stored, in memory and on disk,
  with the gate's own detectors (:func:`proxy.core.redaction.redact_secrets`, with the
  policy's catalog when given): whatever the gate treats as a secret is never served
  back, capability handles (lock tokens, upload ids) are.

Reading: :meth:`SpillStore.get` answers from memory and storage it can read without
waiting (the SQLite file); :meth:`SpillStore.aget` also asks storage that must be awaited
(Redis) — the HTTP route uses it, and so should any other reader running on the loop.

Read back two ways: by the model, through the recall tool the gate offers and resolves
itself (:mod:`proxy.gate.recall`, with :meth:`SpillStore.get` — the same tenant check),
and by an operator or an HTTP tool at ``GET /gate/spill/{handle}``.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from ..core.identifiers.catalog import Catalog
from ..core.redaction import redact_secrets
from ..server.errors import gate_error
from ..server.headers import credential, tenant_of
from ..state.spill import SpillRecord, SpillStorage, SQLiteSpills

__all__ = ["ANONYMOUS", "HANDLE_PREFIX", "SpillRecord", "SpillStore", "add_routes"]

ANONYMOUS = "anonymous"
HANDLE_PREFIX = "spill_"


class SpillStore:
    """Thread-safe spill store: in memory, and in ``storage`` if given (``path``: a
    SQLite file). Records written to storage survive a restart; memory is then a cache
    of recent ones."""

    def __init__(
        self,
        *,
        max_records: int = 10_000,
        clock: Callable[[], float] = time.time,
        path: str | Path | None = None,
        storage: SpillStorage | None = None,
    ) -> None:
        self._records: OrderedDict[str, SpillRecord] = OrderedDict()
        self._lock = threading.Lock()
        self.max_records = max_records
        self._clock = clock
        self.storage: SpillStorage | None = storage if storage is not None else (
            SQLiteSpills(path) if path is not None else None
        )
        #: the SQLite file spills persist in, when they do
        self.path: Path | None = self.storage.path if isinstance(self.storage, SQLiteSpills) else None

    def close(self) -> None:
        if self.storage is not None:
            self.storage.close()

    async def flush(self) -> None:
        """Wait until every record put so far is durable (before the handle is told)."""
        if self.storage is not None:
            await self.storage.flush()

    def put(
        self,
        tenant: str,
        conversation_id: str,
        text: str,
        *,
        ttl_seconds: int,
        max_bytes: int,
        bindings: tuple[dict[str, Any], ...] = (),
        catalog: Catalog | None = None,
    ) -> SpillRecord:
        text = redact_secrets(text, catalog)
        raw = text.encode("utf-8", "surrogatepass")
        truncated = len(raw) > max_bytes
        if truncated:
            text = raw[:max_bytes].decode("utf-8", "ignore") + "\n[… truncated by compaction-gate]"
        now = self._clock()
        rec = SpillRecord(
            handle=HANDLE_PREFIX + secrets.token_urlsafe(24),
            tenant=tenant,
            conversation_id=conversation_id,
            text=text,
            created=now,
            expires=now + ttl_seconds,
            truncated=truncated,
            bindings=bindings,
        )
        with self._lock:
            self._records[rec.handle] = rec
            self._evict(now)
            if self.storage is not None:
                self.storage.put(rec, max_records=self.max_records, now=now)
        return rec

    def _evict(self, now: float) -> None:
        for h in [h for h, r in self._records.items() if r.expires <= now]:
            del self._records[h]
        while len(self._records) > self.max_records:
            self._records.popitem(last=False)

    def _owned(self, rec: SpillRecord | None, tenant: str) -> SpillRecord | None:
        if rec is None:
            return None
        if rec.expires <= self._clock():
            with self._lock:
                self._records.pop(rec.handle, None)
                if self.storage is not None:
                    self.storage.delete(rec.handle)
            return None
        if not hmac.compare_digest(rec.tenant.encode(), tenant.encode()):
            return None
        return rec

    def get(self, tenant: str, handle: str) -> SpillRecord | None:
        """The record if ``tenant`` owns it and it has not expired, else ``None`` (from
        memory and storage readable without waiting; see :meth:`aget`)."""
        if not tenant or tenant == ANONYMOUS:
            return None
        with self._lock:
            rec = self._records.get(handle)
            if rec is None and handle.startswith(HANDLE_PREFIX) and self.storage is not None:
                rec = self.storage.load(handle)
        return self._owned(rec, tenant)

    async def aget(self, tenant: str, handle: str) -> SpillRecord | None:
        """:meth:`get`, also asking storage that must be awaited (another replica's
        spills in Redis)."""
        rec = self.get(tenant, handle)
        if rec is not None or not tenant or tenant == ANONYMOUS or not handle.startswith(HANDLE_PREFIX):
            return rec
        if self.storage is None or not self.storage.remote:
            return None
        return self._owned(await self.storage.aload(handle, tenant), tenant)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)


SPILL_STORE_KEY: web.AppKey[SpillStore] = web.AppKey("compaction_gate.spill_store", SpillStore)


def _not_found() -> web.Response:
    return gate_error(404, "no such spill handle", "not_found")


async def get_spill(request: web.Request) -> web.Response:
    store = request.app[SPILL_STORE_KEY]
    tenant = tenant_of(credential(request.headers))
    rec = await store.aget(tenant, request.match_info["handle"])
    if rec is None:
        return _not_found()
    resp = web.json_response(rec.to_json())
    resp.headers["cache-control"] = "no-store"
    return resp


def add_routes(app: web.Application, store: SpillStore) -> None:
    app[SPILL_STORE_KEY] = store
    app.router.add_get("/gate/spill/{handle}", get_spill)
