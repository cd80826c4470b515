"""Where spilled regions persist (the gate's :class:`~proxy.gate.spill.SpillStore` keeps a
cache of recent ones in memory and serves ``GET /gate/spill/{handle}``).

A record is immutable once written and expires at ``expires``; it is written already
redacted (the gate's spill store redacts before it builds the record). Implementations:
:class:`SQLiteSpills` (a file beside the SQLite state, written at once, in the request)
and the Redis store's (:meth:`proxy.state.redis.RedisStore.spills`, written with the
request's other state and flushed before the request is forwarded).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SQLiteSpills", "SpillRecord", "SpillStorage", "spill_from_row", "spill_row"]


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


def spill_row(rec: SpillRecord) -> dict[str, Any]:
    """What is stored: the served JSON plus the owning tenant's hash."""
    return {**rec.to_json(), "tenant": rec.tenant}


def spill_from_row(d: dict[str, Any]) -> SpillRecord:
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


class SpillStorage(ABC):
    """Persistence of spill records (see the module docstring)."""

    #: Reads must be awaited (:meth:`aload`); :meth:`load` answers ``None``.
    remote: bool = False

    @abstractmethod
    def put(self, rec: SpillRecord, *, max_records: int, now: float) -> None:
        """Store ``rec`` (keeping at most ``max_records``, dropping expired ones)."""

    def load(self, handle: str) -> SpillRecord | None:
        """A stored record, when it can be read without waiting (else ``None``; see
        :meth:`aload`)."""
        return None

    async def aload(self, handle: str, tenant: str) -> SpillRecord | None:
        """A stored record of ``tenant`` (stores that scope keys by tenant need it)."""
        return self.load(handle)

    def delete(self, handle: str) -> None:  # noqa: B027 - optional
        """Forget an expired record."""

    async def flush(self) -> None:  # noqa: B027 - optional
        """Wait until every record put so far is durable."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release resources."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS spills (
    handle TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    created REAL NOT NULL,
    expires REAL NOT NULL,
    body TEXT NOT NULL
)
"""


class SQLiteSpills(SpillStorage):
    """Spills in a SQLite file (WAL: several processes may share it), written at once.
    Spills are rare (a destructive compaction under a ``spill`` policy)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _conn(self) -> sqlite3.Connection:
        """The database, opened on first use (caller holds the lock)."""
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA busy_timeout=5000")
            db.execute(_SCHEMA)
            self._db = db
        return self._db

    def put(self, rec: SpillRecord, *, max_records: int, now: float) -> None:
        with self._lock:
            db = self._conn()
            db.execute(
                "INSERT OR REPLACE INTO spills(handle, tenant, created, expires, body) VALUES(?, ?, ?, ?, ?)",
                (rec.handle, rec.tenant, rec.created, rec.expires, json.dumps(spill_row(rec))),
            )
            db.execute("DELETE FROM spills WHERE expires <= ?", (now,))
            db.execute(
                "DELETE FROM spills WHERE handle IN (SELECT handle FROM spills ORDER BY created DESC, rowid DESC"
                " LIMIT -1 OFFSET ?)",
                (max_records,),
            )

    def load(self, handle: str) -> SpillRecord | None:
        with self._lock:
            row = self._conn().execute("SELECT body FROM spills WHERE handle = ?", (handle,)).fetchone()
        if row is None:
            return None
        try:
            return spill_from_row(json.loads(row[0]))
        except (ValueError, TypeError, KeyError):
            return None

    def delete(self, handle: str) -> None:
        with self._lock:
            self._conn().execute("DELETE FROM spills WHERE handle = ?", (handle,))

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
