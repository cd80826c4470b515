"""A compact multimap from 64-bit integer keys to small integers (pure, no I/O).

The lineage index keeps one posting per tracked message digest and per indexed text
line: millions of entries once thousands of conversations are tracked. As a ``dict`` of
keys to conversation ids each entry costs 60–100 bytes (its slot, its share of a table
that doubles, the key object); here an entry is 12 bytes — its key packed into a
``bytearray`` and its value into an ``array('i')`` — in one of a bounded number of
buckets chosen by the key's low bits, each searched with C-level ``bytearray.find``.

- Keys are any integers (taken modulo 2**64: Python string hashes, so an index built from
  them lives as long as the process); values are non-negative ints below 2**31 (the
  index numbers its conversations).
- A key holds each value once (adding it again is a no-op), as a set would.
- A key held with more than :data:`SPILL` values (a system prompt every conversation
  shares, an "ok") moves to an ordinary ``set`` of its own, so no bucket search walks it.
- Growing never rebuilds a table: a bucket's arrays grow by appending, so no insertion
  pauses for a rehash of everything.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Iterator

__all__ = ["SPILL", "Postings"]

#: Buckets (by the key's low bits): ~250 bytes of fixed cost each once used.
_BUCKET_BITS = 12
_BUCKET_MASK = (1 << _BUCKET_BITS) - 1
_KEY_MASK = (1 << 64) - 1
#: Values beyond which a key leaves its bucket for a set of its own.
SPILL = 16


def _packed(key: int) -> bytes:
    return (key & _KEY_MASK).to_bytes(8, "little")


class Postings:
    """``key → {value, ...}``, compact (see the module docstring)."""

    __slots__ = ("_buckets", "_many", "_size")

    def __init__(self) -> None:
        self._buckets: dict[int, tuple[bytearray, array[int]]] = {}
        self._many: dict[int, set[int]] = {}
        #: (key, value) pairs held
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, key: int, value: int) -> bool:
        """Hold ``value`` under ``key``; ``False`` when it already was."""
        many = self._many.get(key) if self._many else None
        if many is not None:
            if value in many:
                return False
            many.add(value)
            self._size += 1
            return True
        b = key & _BUCKET_MASK
        packed = _packed(key)
        bucket = self._buckets.get(b)
        if bucket is None:
            self._buckets[b] = (bytearray(packed), array("i", (value,)))
            self._size += 1
            return True
        keys, values = bucket
        at = keys.find(packed)
        held = 0
        while at >= 0:
            if not at & 7:
                if values[at >> 3] == value:
                    return False
                held += 1
            at = keys.find(packed, at + 1)
        self._size += 1
        if held >= SPILL:
            self._many[key] = {*self._take(bucket, b, packed), value}
            return True
        keys += packed
        values.append(value)
        return True

    def discard(self, key: int, value: int) -> None:
        """Drop ``value`` from ``key`` (nothing when it is not held)."""
        many = self._many.get(key) if self._many else None
        if many is not None:
            if value in many:
                many.discard(value)
                self._size -= 1
                if not many:
                    del self._many[key]
            return
        b = key & _BUCKET_MASK
        bucket = self._buckets.get(b)
        if bucket is None:
            return
        keys, values = bucket
        packed = _packed(key)
        at = keys.find(packed)
        while at >= 0:
            if not at & 7 and values[at >> 3] == value:
                self._size -= 1
                last = len(values) - 1
                if last == 0:
                    del self._buckets[b]
                    return
                i = at >> 3
                keys[at : at + 8] = keys[-8:]  # the last entry takes the freed place
                del keys[-8:]
                values[i] = values[last]
                values.pop()
                return
            at = keys.find(packed, at + 1)

    def get(self, key: int) -> Collection[int]:
        """The values held under ``key`` (empty when none)."""
        many = self._many.get(key) if self._many else None
        if many is not None:
            return many
        bucket = self._buckets.get(key & _BUCKET_MASK)
        if bucket is None:
            return ()
        keys, values = bucket
        packed = _packed(key)
        at = keys.find(packed)
        if at < 0:
            return ()
        out = []
        while at >= 0:
            if not at & 7:
                out.append(values[at >> 3])
            at = keys.find(packed, at + 1)
        return out

    def _take(self, bucket: tuple[bytearray, array[int]], b: int, packed: bytes) -> list[int]:
        """Remove every entry of one key from its bucket; their values."""
        keys, values = bucket
        kept_keys, kept_values, taken = bytearray(), array("i"), []
        for i, v in enumerate(values):
            if keys[8 * i : 8 * i + 8] == packed:
                taken.append(v)
            else:
                kept_keys += keys[8 * i : 8 * i + 8]
                kept_values.append(v)
        if kept_values:
            self._buckets[b] = (kept_keys, kept_values)
        else:
            del self._buckets[b]
        return taken

    def items(self) -> Iterator[tuple[int, int]]:
        """Every ``(key, value)`` held (keys modulo 2**64), in no particular order."""
        for keys, values in self._buckets.values():
            for i, v in enumerate(values):
                yield int.from_bytes(keys[8 * i : 8 * i + 8], "little"), v
        for key, many in self._many.items():
            for v in many:
                yield key & _KEY_MASK, v
