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
- Durable when given a path (the served proxy puts it beside its SQLite state, see
  :func:`proxy.gate.wiring.build_gate`): every record is also written to a SQLite file,
  so a handle given to an agent still resolves after a restart, until it expires. The
  in-memory store (``path=None``) loses them on restart. Spills are rare (one per compaction
  under a ``spill`` policy), so the write is made at once, in the request.
- Secrets found in the region are redacted before it is stored, in memory and on disk,
  with the gate's own detectors (:func:`proxy.core.redaction.redact_secrets`, with the
  policy's catalog when given): whatever the gate treats as a secret is never served
  back, capability handles (lock tokens, upload ids) are.

Read back two ways: by the model, through the recall tool the gate offers and resolves
itself (:mod:`proxy.gate.recall`, with :meth:`SpillStore.get` — the same tenant check),
and by an operator or an HTTP tool at ``GET /gate/spill/{handle}``.
"""

from __future__ import annotations

import hmac
import json
import secrets
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from ..core.identifiers.catalog import Catalog
from ..core.redaction import redact_secrets
from ..server.errors import gate_error
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


_SCHEMA = """
CREATE TABLE IF NOT EXISTS spills (
    handle TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    created REAL NOT NULL,
    expires REAL NOT NULL,
    body TEXT NOT NULL
)
"""


class SpillStore:
    """Thread-safe spill store: in memory, and in the SQLite file ``path`` if given
    (records written there survive a restart; memory is then a cache of recent ones)."""

    def __init__(
        self,
        *,
        max_records: int = 10_000,
        clock: Callable[[], float] = time.time,
        path: str | Path | None = None,
    ) -> None:
        self._records: OrderedDict[str, SpillRecord] = OrderedDict()
        self._lock = threading.Lock()
        self.max_records = max_records
        self._clock = clock
        self.path = Path(path) if path is not None else None
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection | None:
        """The database (opened on first use; caller holds the lock)."""
        if self.path is None:
            return None
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(_SCHEMA)
            self._db = db
        return self._db

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

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
            db = self._conn()
            if db is not None:
                db.execute(
                    "INSERT OR REPLACE INTO spills(handle, tenant, created, expires, body) VALUES(?, ?, ?, ?, ?)",
                    (rec.handle, rec.tenant, rec.created, rec.expires, json.dumps(_row(rec))),
                )
                db.execute("DELETE FROM spills WHERE expires <= ?", (now,))
                db.execute(
                    "DELETE FROM spills WHERE handle IN (SELECT handle FROM spills ORDER BY created DESC, rowid DESC"
                    " LIMIT -1 OFFSET ?)",
                    (self.max_records,),
                )
        return rec

    def _evict(self, now: float) -> None:
        for h in [h for h, r in self._records.items() if r.expires <= now]:
            del self._records[h]
        while len(self._records) > self.max_records:
            self._records.popitem(last=False)

    def _load(self, handle: str) -> SpillRecord | None:
        """A record written by an earlier run (caller holds the lock)."""
        db = self._conn()
        if db is None:
            return None
        row = db.execute("SELECT body FROM spills WHERE handle = ?", (handle,)).fetchone()
        if row is None:
            return None
        try:
            return _from_row(json.loads(row[0]))
        except (ValueError, TypeError, KeyError):
            return None

    def get(self, tenant: str, handle: str) -> SpillRecord | None:
        """The record if ``tenant`` owns it and it has not expired, else ``None``."""
        if not tenant or tenant == ANONYMOUS:
            return None
        with self._lock:
            rec = self._records.get(handle)
            if rec is None and handle.startswith(HANDLE_PREFIX):
                rec = self._load(handle)
            if rec is None:
                return None
            if rec.expires <= self._clock():
                self._records.pop(handle, None)
                db = self._conn()
                if db is not None:
                    db.execute("DELETE FROM spills WHERE handle = ?", (handle,))
                return None
        if not hmac.compare_digest(rec.tenant.encode(), tenant.encode()):
            return None
        return rec

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)


def _row(rec: SpillRecord) -> dict[str, Any]:
    """What is stored: the served JSON plus the owning tenant's hash."""
    return {**rec.to_json(), "tenant": rec.tenant}


def _from_row(d: dict[str, Any]) -> SpillRecord:
    return SpillRecord(
        handle=d["handle"],
        tenant=d["tenant"],
        conversation_id=d["conversation"],
        text=d["text"],
        created=float(d["created"]),
        expires=float(d["expires"]),
        truncated=bool(d["truncated"]),
        bindings=tuple(d["bindings"]),
    )


SPILL_STORE_KEY: web.AppKey[SpillStore] = web.AppKey("compaction_gate.spill_store", SpillStore)


def _not_found() -> web.Response:
    return gate_error(404, "no such spill handle", "not_found")


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
