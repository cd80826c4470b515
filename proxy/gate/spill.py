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
- In memory only: spilled regions do not survive a restart (documented limitation).
- Secrets found in the region are redacted before it is stored.

Not done: the optional ``recall_context`` tool (the proxy advertising a tool and resolving
its calls itself, re-calling upstream) is not implemented. The spill note tells the model
and the operator the handle and the ``GET /gate/spill/{handle}`` URL; an agent needs a
way to fetch it (a generic HTTP tool, or its operator).
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ..server.headers import credential, tenant_of

ANONYMOUS = "anonymous"
HANDLE_PREFIX = "spill_"


@dataclass(frozen=True, slots=True)
class SpillRecord:
    handle: str
    tenant: str
    conversation_id: str
    text: str
    created: float
    expires: float
    truncated: bool = False
    bindings: tuple[dict[str, Any], ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "handle": self.handle,
            "conversation": self.conversation_id,
            "created": self.created,
            "expires": self.expires,
            "truncated": self.truncated,
            "bindings": list(self.bindings),
            "text": self.text,
        }


class SpillStore:
    """Thread-safe in-memory spill store."""

    def __init__(self, *, max_records: int = 10_000, clock: Callable[[], float] = time.time) -> None:
        self._records: OrderedDict[str, SpillRecord] = OrderedDict()
        self._lock = threading.Lock()
        self.max_records = max_records
        self._clock = clock

    def put(
        self,
        tenant: str,
        conversation_id: str,
        text: str,
        *,
        ttl_seconds: int,
        max_bytes: int,
        bindings: tuple[dict[str, Any], ...] = (),
    ) -> SpillRecord:
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
        return rec

    def _evict(self, now: float) -> None:
        for h in [h for h, r in self._records.items() if r.expires <= now]:
            del self._records[h]
        while len(self._records) > self.max_records:
            self._records.popitem(last=False)

    def get(self, tenant: str, handle: str) -> SpillRecord | None:
        """The record if ``tenant`` owns it and it has not expired, else ``None``."""
        if not tenant or tenant == ANONYMOUS:
            return None
        with self._lock:
            rec = self._records.get(handle)
            if rec is None:
                return None
            if rec.expires <= self._clock():
                del self._records[handle]
                return None
        if not hmac.compare_digest(rec.tenant.encode(), tenant.encode()):
            return None
        return rec

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)


SPILL_STORE_KEY: web.AppKey[SpillStore] = web.AppKey("compaction_gate.spill_store", SpillStore)


def _not_found() -> web.Response:
    return web.json_response({"error": {"message": "no such spill handle", "type": "not_found"}}, status=404)


async def get_spill(request: web.Request) -> web.Response:
    store = request.app[SPILL_STORE_KEY]
    tenant = tenant_of(credential(request.headers))
    rec = store.get(tenant, request.match_info["handle"])
    if rec is None:
        return _not_found()
    resp = web.json_response(rec.to_json())
    resp.headers["cache-control"] = "no-store"
    return resp


def add_routes(app: web.Application, store: SpillStore) -> None:
    app[SPILL_STORE_KEY] = store
    app.router.add_get("/gate/spill/{handle}", get_spill)
