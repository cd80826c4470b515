"""A compact multimap from 64-bit integer keys to small integers (pure, no I/O).

The lineage index keeps one posting per tracked message digest and per indexed text
line: millions of entries once thousands of conversations are tracked. As a ``dict`` of
keys to conversation ids each entry costs 40–100 bytes (its slot, its share of a table
that doubles, the key object); here an entry is a 12-byte record (the key, then the
value) in a ``bytearray`` bucket chosen by the key's low bits, searched with C-level
``bytearray.find``.

- Keys are any integers, taken modulo 2**64 (Python string hashes: an index built from
  them lives as long as the process); values are ints in ``[0, 2**32)`` (the index
  numbers its conversations).
- A key holds each value once (adding it again is a no-op), as a set would.
- A key held with more than :data:`SPILL` values (a system prompt every conversation
  shares, an "ok") moves to an ordinary ``set`` of its own, so no bucket search walks it.
- Buckets are split one at a time as entries arrive (linear hashing: about
  :data:`LOAD` entries a bucket), so no insertion pauses to rehash everything, and a
  search reads a couple of hundred bytes whatever the size.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator

__all__ = ["LOAD", "SPILL", "Postings"]

_KEY_MASK = (1 << 64) - 1
#: Bytes of one record: the key (8, little-endian), then the value (4).
_REC = 12
#: Entries a bucket holds on average before one more bucket is split off.
LOAD = 32
#: Values beyond which a key leaves its bucket for a set of its own.
SPILL = 16


class Postings:
    """``key → {value, ...}``, compact (see the module docstring)."""

    __slots__ = ("_buckets", "_flat", "_level", "_many", "_size", "_split")

    def __init__(self) -> None:
        #: ``2**_level + _split`` buckets; bucket ``b < _split`` was split at this level
        self._buckets: list[bytearray] = [bytearray()]
        self._level = 0
        self._split = 0
        self._many: dict[int, set[int]] = {}
        #: (key, value) pairs held, and those of them in buckets
        self._size = 0
        self._flat = 0

    def __len__(self) -> int:
        return self._size

    def _bucket(self, k: int) -> bytearray:
        b = k & ((1 << self._level) - 1)
        if b < self._split:
            b = k & ((2 << self._level) - 1)
        return self._buckets[b]

    def add(self, key: int, value: int) -> bool:
        """Hold ``value`` under ``key``; ``False`` when it already was."""
        return bool(self.add_all((key,), value))

    def add_all(self, keys: Iterable[int], value: int) -> list[int]:
        """Hold ``value`` under each of ``keys``; the keys it was not held under yet."""
        return self._insert(keys, value, True)

    def extend_new(self, keys: Iterable[int], value: int) -> None:
        """Hold ``value`` under each of ``keys``, which must be distinct and not hold it
        yet (a conversation the index has just numbered): no search, only appends. A key
        this leaves with more than :data:`SPILL` values moves to its own set at its next
        :meth:`add_all`."""
        self._insert(keys, value, False)

    def _insert(self, keys: Iterable[int], value: int, search: bool) -> list[int]:
        """The hot path of a first-seen history: at most one ``find`` per key, the
        counters in locals."""
        out: list[int] = []
        many_of = self._many
        buckets = self._buckets
        tail = value.to_bytes(4, "little")
        low = (1 << self._level) - 1
        split = self._split
        flat, limit = self._flat, LOAD * len(buckets)
        added = 0
        for key in keys:
            k = key & _KEY_MASK
            if many_of and k in many_of:
                many = many_of[k]
                if value not in many:
                    many.add(value)
                    added += 1
                    out.append(key)
                continue
            b = k & low
            if b < split:
                b = k & (2 * low + 1)
            bucket = buckets[b]
            packed = k.to_bytes(8, "little")
            at = bucket.find(packed) if search else -1
            if at >= 0:
                held = 0
                while at >= 0:
                    if not at % _REC:
                        if bucket[at + 8 : at + _REC] == tail:
                            break
                        held += 1
                    at = bucket.find(packed, at + 1)
                if held >= SPILL:  # a long run (extend_new leaves them): its own set now
                    self._flat = flat
                    many = many_of[k] = set(self._take(bucket, packed))
                    flat = self._flat
                    if at < 0:
                        many.add(value)
                        added += 1
                        out.append(key)
                    continue
                if at >= 0:  # held already
                    continue
            bucket += packed
            bucket += tail
            flat += 1
            added += 1
            out.append(key)
            if flat > limit:
                self._flat = flat
                self._grow()
                low, split = (1 << self._level) - 1, self._split
                limit = LOAD * len(buckets)
        self._flat = flat
        self._size += added
        return out

    def discard(self, key: int, value: int) -> None:
        """Drop ``value`` from ``key`` (nothing when it is not held)."""
        k = key & _KEY_MASK
        many = self._many.get(k) if self._many else None
        if many is not None:
            if value in many:
                many.discard(value)
                self._size -= 1
                if not many:
                    del self._many[k]
            return
        bucket = self._bucket(k)
        packed = k.to_bytes(8, "little")
        at = bucket.find(packed)
        while at >= 0:
            if not at % _REC and int.from_bytes(bucket[at + 8 : at + _REC], "little") == value:
                bucket[at : at + _REC] = bucket[-_REC:]  # the last record takes its place
                del bucket[-_REC:]
                self._size -= 1
                self._flat -= 1
                return
            at = bucket.find(packed, at + 1)

    def get(self, key: int) -> Collection[int]:
        """The values held under ``key`` (empty when none)."""
        k = key & _KEY_MASK
        many = self._many.get(k) if self._many else None
        if many is not None:
            return many
        bucket = self._bucket(k)
        packed = k.to_bytes(8, "little")
        at = bucket.find(packed)
        if at < 0:
            return ()
        out = []
        while at >= 0:
            if not at % _REC:
                out.append(int.from_bytes(bucket[at + 8 : at + _REC], "little"))
            at = bucket.find(packed, at + 1)
        return out

    def _take(self, bucket: bytearray, packed: bytes) -> list[int]:
        """Remove every record of one key from its bucket; their values."""
        kept, taken = bytearray(), []
        for at in range(0, len(bucket), _REC):
            if bucket[at : at + 8] == packed:
                taken.append(int.from_bytes(bucket[at + 8 : at + _REC], "little"))
            else:
                kept += bucket[at : at + _REC]
        bucket[:] = kept
        self._flat -= len(taken)
        return taken

    def _grow(self) -> None:
        """Split bucket ``_split`` in two by the next bit of the key."""
        level, s = self._level, self._split
        old = self._buckets[s]
        byte, bit = level >> 3, 1 << (level & 7)
        stay, move = bytearray(), bytearray()
        for at in range(0, len(old), _REC):
            (move if old[at + byte] & bit else stay).extend(old[at : at + _REC])
        self._buckets[s] = stay
        self._buckets.append(move)  # index 2**level + s
        self._split += 1
        if self._split == 1 << level:
            self._level, self._split = level + 1, 0

    def items(self) -> Iterator[tuple[int, int]]:
        """Every ``(key, value)`` held (keys modulo 2**64), in no particular order."""
        for bucket in self._buckets:
            for at in range(0, len(bucket), _REC):
                yield int.from_bytes(bucket[at : at + 8], "little"), int.from_bytes(bucket[at + 8 : at + _REC], "little")
        for key, many in self._many.items():
            for v in many:
                yield key, v
