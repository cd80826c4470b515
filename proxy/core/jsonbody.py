"""Incremental parsing of JSON request bodies (pure, no I/O).

Agents resend their whole history on every request, so the body of request *n+1* is,
byte for byte, the body of request *n* up to the end of its message array, followed by
a few new messages and the remaining top-level keys. :class:`BodyCache` exploits that:
the first time a body is parsed it walks the top-level object with the C scanner of
:mod:`json`, one top-level value and one element of the message array (``messages`` or
``input``) at a time, recording where each element ends. The next body of the same
scope is compared with recent ones at those recorded offsets (string slice equality,
memcmp speed); the longest common prefix that ends on an element boundary is reused —
the parsed top-level values before the array and the parsed elements — and only the new
tail and the remaining top-level keys are decoded. Comparisons are made on the raw bytes
(``memcmp``, no copy; a long span without the GIL, :mod:`proxy.core.samebytes`) and only
the tail is decoded from UTF-8, so a request costs O(new bytes) Python work plus one
memcmp of the shared prefix.

Contract: :meth:`BodyCache.loads` is exactly ``json.loads(raw)`` — the same value (equal,
same key order) or the same exception. Reuse is sound because JSON parsing is a left to
right function of the text: two texts with the same prefix are in the same parser state
at the end of it (and a prefix ending after an element ends on an ASCII delimiter, so
decoding the tail on its own yields the same characters). A reused element whose token could have continued in the new text (a
number ``12`` followed by ``3``) is not followed by ``,``/``]`` and makes the walk bail
out. Anything unusual — not UTF-8, not an object, a syntax error, a small body — goes to
``json.loads`` itself. The one intended difference: documents nested deeper than the
interpreter's recursion limit, which ``json.loads`` refuses with ``RecursionError``, may
parse here (each array element is decoded from depth 0).

Sharing: values reused from a cached body are the *same objects* in every result that
reuses them (that is what makes them free). Callers must treat results as read-only
(copy-on-write, as :mod:`proxy.core.interventions` does). Top-level dicts and the message
list itself are fresh for every call, so ``body["messages"] = [...]`` or
``list(body["messages"]).append(...)`` are safe; mutating a message dict in place is not.

Thread-safe (a lock around each call): the server shares one cache per process, and
tests run servers on several event loops.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from proxy.core.samebytes import agree

__all__ = ["ARRAY_KEYS", "PER_TENANT", "BodyCache", "ParseStats", "Plan", "decode_part", "walk"]

#: Top-level keys whose array value is parsed element by element (the message history).
ARRAY_KEYS: frozenset[str] = frozenset({"messages", "input"})

#: json.decoder.WHITESPACE (always matches, possibly empty)
_ws = cast("Callable[[str, int], re.Match[str]]", re.compile(r"[ \t\n\r]*").match)
#: the C scanner with json.loads' defaults: (value, end) or StopIteration
_scan_once: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_scanstring: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_detect_encoding = json.detect_encoding


class _Bail(Exception):
    """The incremental walk met something it does not handle: use ``json.loads``."""


#: Bytes before a cached body's last element end that :meth:`BodyCache._best` compares
#: first.
TAIL_CHECK = 64


@dataclass(slots=True, eq=False)
class _Entry:
    """One parsed body: its bytes and where (byte offsets) its array elements end."""

    scope: str
    raw: bytes
    head: tuple[tuple[str, Any], ...]  # top-level pairs before the array, in order
    key: str  # the array's key
    open: int  # byte offset just after the array's "["
    #: byte offset just after each element (an array: slicing it copies machine words,
    #: with no reference counting over a long history)
    ends: array[int]
    items: tuple[Any, ...]  # the parsed elements
    #: where its last element ends (``bound(len(ends))``), and the bytes just before it
    #: (:data:`TAIL_CHECK`): what :meth:`BodyCache._best` tests each cached body by
    end: int = field(init=False)
    tail: bytes = field(init=False)

    def __post_init__(self) -> None:
        self.end = self.bound(len(self.ends))
        self.tail = self.raw[max(0, self.end - TAIL_CHECK) : self.end]

    def bound(self, k: int) -> int:
        """Byte offset up to which the first ``k`` elements (and the head) lie."""
        return self.ends[k - 1] if k else self.open


@dataclass
class ParseStats:
    """Counters (for tests and benchmarks): bodies parsed incrementally from a cached
    prefix (``hits``), walked from scratch (``walks``), handed to ``json.loads``
    (``fallbacks``: small or unusual bodies), and array elements reused/decoded."""

    hits: int = 0
    walks: int = 0
    fallbacks: int = 0
    reused: int = 0
    decoded: int = 0


def _array_rest(s: str, i: int, after_element: bool, ends: list[int], items: list[Any]) -> int:
    """Parse array elements from ``i`` (just after ``[``, or just after an element),
    appending to ``items``/``ends`` (character offsets); returns the offset just after
    ``]``."""
    i = _ws(s, i).end()
    c = s[i : i + 1]
    if c == "]":
        return i + 1
    if after_element:
        if c != ",":
            raise _Bail
        i = _ws(s, i + 1).end()
    while True:
        try:
            v, i = _scan_once(s, i)
        except StopIteration:
            raise _Bail from None
        items.append(v)
        ends.append(i)
        i = _ws(s, i).end()
        c = s[i : i + 1]
        if c == "]":
            return i + 1
        if c != ",":
            raise _Bail
        i = _ws(s, i + 1).end()


def _pair(s: str, i: int) -> tuple[str, int]:
    """Read ``"key" :`` at ``i``; return the key and the offset of its value."""
    if s[i : i + 1] != '"':
        raise _Bail
    key, i = _scanstring(s, i + 1, True)
    i = _ws(s, i).end()
    if s[i : i + 1] != ":":
        raise _Bail
    return key, _ws(s, i + 1).end()


def _object_rest(s: str, i: int, pairs: list[tuple[str, Any]]) -> None:
    """After a top-level value ending at ``i``: the remaining pairs up to ``}`` and
    nothing but whitespace after it."""
    while True:
        i = _ws(s, i).end()
        c = s[i : i + 1]
        if c == "}":
            break
        if c != ",":
            raise _Bail
        key, i = _pair(s, _ws(s, i + 1).end())
        try:
            v, i = _scan_once(s, i)
        except StopIteration:
            raise _Bail from None
        pairs.append((key, v))
    if _ws(s, i + 1).end() != len(s):
        raise _Bail


def _byte_offsets(s: str, base: int, offsets: list[int], nbytes: int) -> list[int]:
    """Byte offsets (from ``base``) of increasing character offsets into ``s``, the
    UTF-8 decoding of ``nbytes`` bytes."""
    if len(s) == nbytes:  # ASCII: one byte per character
        return [base + c for c in offsets] if base else offsets
    out: list[int] = []
    pos, prev = base, 0
    for c in offsets:
        pos += len(s[prev:c].encode("utf-8", "surrogatepass"))
        prev = c
        out.append(pos)
    return out


#: What a walk finds besides the value: the top-level pairs before the array, its key,
#: the byte offset just after its ``[``, the byte offsets just after each element, and
#: the elements (no memoryview: it crosses to a worker process, see :func:`decode_part`).
_Walked = tuple[tuple[tuple[str, Any], ...], str, int, list[int], list[Any]]
#: What decoding a cached body's tail finds: its new elements, the byte offsets just
#: after each, the top-level pairs after the array.
_Tail = tuple[list[Any], list[int], list[tuple[str, Any]]]


def _walk_parts(raw: bytes) -> tuple[dict[str, Any], _Walked | None]:
    """:func:`walk`'s work, its entry's fields as plain values."""
    s = raw.decode("utf-8", "surrogatepass")
    i = _ws(s, 0).end()
    if s[i : i + 1] != "{":
        raise _Bail
    i = _ws(s, i + 1).end()
    if s[i : i + 1] == "}":
        if _ws(s, i + 1).end() != len(s):
            raise _Bail
        return {}, None
    head: list[tuple[str, Any]] = []
    while True:
        key, i = _pair(s, i)
        if key in ARRAY_KEYS and s[i : i + 1] == "[":
            start = i + 1
            ends: list[int] = []
            items: list[Any] = []
            i = _array_rest(s, start, False, ends, items)
            pairs = head + [(key, items)]
            _object_rest(s, i, pairs)
            offsets = _byte_offsets(s, 0, [start, *ends], len(raw))
            return dict(pairs), (tuple(head), key, offsets[0], offsets[1:], items)
        try:
            v, i = _scan_once(s, i)
        except StopIteration:
            raise _Bail from None
        head.append((key, v))
        i = _ws(s, i).end()
        c = s[i : i + 1]
        if c == "}":
            if _ws(s, i + 1).end() != len(s):
                raise _Bail
            return dict(head), None
        if c != ",":
            raise _Bail
        i = _ws(s, i + 1).end()


def _entry(scope: str, raw: bytes, walked: _Walked) -> _Entry:
    head, key, open_, ends, items = walked
    return _Entry(scope, raw, head, key, open_, array("q", ends), tuple(items))


def walk(raw: bytes, scope: str = "") -> tuple[dict[str, Any], _Entry | None]:
    """Parse ``raw`` (a UTF-8 JSON object) from scratch, element by element. Returns
    the value and, when it has an array under one of :data:`ARRAY_KEYS`, the entry that
    lets later bodies reuse it. Raises :class:`_Bail` on anything unusual (and the
    decoder's own errors)."""
    value, walked = _walk_parts(raw)
    return value, _entry(scope, raw, walked) if walked is not None else None


def _tail_parts(tail: bytes, b: int, after_element: bool) -> _Tail:
    """Decode ``tail``, the bytes of a body from byte offset ``b`` on (just after its
    array's ``[`` or one of its elements)."""
    text = tail.decode("utf-8", "surrogatepass")
    ends: list[int] = []
    items: list[Any] = []
    i = _array_rest(text, 0, after_element, ends, items)
    rest: list[tuple[str, Any]] = []
    _object_rest(text, i, rest)
    return items, _byte_offsets(text, b, ends, len(tail)), rest


def _resumed(raw: bytes, base: _Entry, k: int, tail: _Tail) -> tuple[dict[str, Any], _Entry]:
    """The value and entry of ``raw``: ``base``'s first ``k`` elements, then ``tail``."""
    new_items, new_ends, rest = tail
    items = list(base.items) if k == len(base.items) else list(base.items[:k])
    items.extend(new_items)
    pairs = list(base.head)
    pairs.append((base.key, items))
    pairs.extend(rest)
    ends = base.ends[:k]
    ends.extend(new_ends)
    return dict(pairs), _Entry(base.scope, raw, base.head, base.key, base.open, ends, tuple(items))


def _resume(raw: bytes, base: _Entry, k: int) -> tuple[dict[str, Any], _Entry]:
    """Parse ``raw``, whose bytes up to ``base.bound(k)`` equal ``base.raw``'s: only the
    rest is decoded."""
    b = base.bound(k)
    return _resumed(raw, base, k, _tail_parts(raw[b:], b, k > 0))


def _reusable(raw: bytes, e: _Entry) -> int:
    """The largest ``k`` such that ``raw`` and ``e.raw`` agree up to ``e.bound(k)``;
    ``-1`` if they differ before the array starts."""
    if not agree(raw, e.raw, 0, e.open):
        return -1
    lo, hi = 0, len(e.ends) + 1  # agree up to bound(lo); disagree up to bound(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        a, b = e.bound(lo), e.bound(mid)
        if agree(raw, e.raw, a, b):
            lo = mid
        else:
            hi = mid
    return lo


#: Conversations in flight per tenant whose last request a cache keeps by default (this
#: one's bodies, :class:`~proxy.gate.normalize.IncrementalNormalizer`'s items): a tenant
#: with more agents than that has every request parsed and normalised whole.
PER_TENANT = 128


@dataclass(slots=True, eq=False)
class Plan:
    """What :meth:`BodyCache.loads` of ``raw`` would decode: everything (``base`` is
    ``None``: a walk from scratch, or ``json.loads`` when ``walk`` is false), or the
    tail past the first ``k`` elements of ``base``, a cached body it shares them with.
    ``pending`` is the number of bytes to decode. See :meth:`BodyCache.plan`."""

    raw: bytes
    scope: str
    base: _Entry | None
    k: int
    walk: bool

    @property
    def pending(self) -> int:
        return len(self.raw) - (self.base.bound(self.k) if self.base is not None else 0)

    def part(self) -> tuple[bytes, int, str]:
        """The arguments of :func:`decode_part` for this plan."""
        if self.base is None:
            return self.raw, 0, "walk" if self.walk else "loads"
        b = self.base.bound(self.k)
        return self.raw[b:], b, "tail" if self.k else "tail0"


#: What :func:`decode_part` returns: ``(how, what)``.
Decoded = tuple[str, Any]


def decode_part(data: bytes, b: int, mode: str) -> Decoded:
    """The decoding :meth:`BodyCache.loads` would do, as a function of plain values
    (pure; run where the caller likes, e.g. in a worker process, and handed to
    :meth:`BodyCache.finish`). ``mode``: ``"walk"`` (the whole body, from scratch),
    ``"tail"``/``"tail0"`` (a body's bytes from offset ``b`` on, after an element / just
    after the array's ``[``), ``"loads"`` (``json.loads``). Never raises: ``("error",
    exc)`` is ``json.loads``' own exception, ``("bail", None)`` a tail the incremental
    walk does not handle (then the whole body goes to ``json.loads``)."""
    try:
        if mode in ("tail", "tail0"):
            try:
                return "tail", _tail_parts(data, b, mode == "tail")
            except Exception:  # noqa: BLE001 - _Bail, a syntax error...: json.loads decides
                return "bail", None
        if mode == "walk":
            try:
                return "walk", _walk_parts(data)
            except Exception:  # noqa: BLE001 - as in BodyCache._loads
                pass
        return "value", json.loads(data)
    except UnicodeDecodeError as exc:
        # a codec updates the one exception object from error to error (its error
        # handler passed the earlier ones) but not its ``args``, which pickling uses:
        # rebuilt from its fields, it crosses a process boundary as it was raised
        return "error", UnicodeDecodeError(exc.encoding, exc.object, exc.start, exc.end, exc.reason)
    except Exception as exc:  # noqa: BLE001 - json.loads' canonical error, handed back
        return "error", exc


class BodyCache:
    """Recent parsed bodies per scope (the tenant: bodies are never compared across
    tenants, so timing reveals nothing about another tenant's requests).

    ``min_size``: smaller bodies go straight to ``json.loads``. ``max_per_scope`` and
    ``max_bytes`` bound the cache (least recently used dropped first); a body that
    extends a cached one replaces it. One entry per conversation in flight: a tenant
    running more agents than ``max_per_scope`` would have every body parsed whole (at
    16, 32 agents on one key each paid a full parse of their 100-message history, ~20%
    of the request's CPU); ``max_bytes`` is what bounds the memory.
    """

    def __init__(self, *, min_size: int = 4096, max_per_scope: int = PER_TENANT, max_bytes: int = 64 << 20) -> None:
        self.min_size = min_size
        self.max_per_scope = max_per_scope
        self.max_bytes = max_bytes
        self.stats = ParseStats()
        self._scopes: dict[str, list[_Entry]] = {}  # most recent last
        self._lru: OrderedDict[int, _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._lru)

    def clear(self) -> None:
        with self._lock:
            self._scopes.clear()
            self._lru.clear()
            self._bytes = 0

    def loads(self, raw: bytes, scope: str = "") -> Any:
        """``json.loads(raw)``, reusing the parse of a recent body of ``scope``."""
        if len(raw) < self.min_size or type(raw) is not bytes or _detect_encoding(raw) != "utf-8":
            self.stats.fallbacks += 1
            return json.loads(raw)
        with self._lock:
            return self._loads(raw, scope)

    def plan(self, raw: bytes, scope: str = "") -> Plan:
        """What :meth:`loads` would decode (cheap: comparisons of bytes). A caller that
        wants the decoding elsewhere (a large body, off the event loop) runs
        :func:`decode_part` on ``plan.part()`` there, then :meth:`finish`: together
        exactly ``loads(raw, scope)``."""
        if len(raw) < self.min_size or type(raw) is not bytes or _detect_encoding(raw) != "utf-8":
            return Plan(raw, scope, None, 0, walk=False)
        with self._lock:
            try:
                base, k = self._best(raw, scope)
            except Exception:  # noqa: BLE001 - as in _loads: json.loads decides
                return Plan(raw, scope, None, 0, walk=False)
        return Plan(raw, scope, base, k, walk=True)

    def finish(self, plan: Plan, decoded: Decoded) -> Any:
        """The value of ``json.loads(plan.raw)`` from :func:`decode_part`'s result (raises
        its exception), the cache updated as :meth:`loads` would. Not for ``("bail",
        None)``: the caller then decodes ``(plan.raw, 0, "loads")`` and finishes with
        that."""
        how, what = decoded
        assert how != "bail", "decode the whole body with mode 'loads'"
        with self._lock:
            if how == "error":
                self.stats.fallbacks += 1
                raise what
            if how == "value":
                self.stats.fallbacks += 1
                return what
            if how == "tail":
                assert plan.base is not None
                value, entry = _resumed(plan.raw, plan.base, plan.k, what)
                self.stats.hits += 1
                self.stats.reused += plan.k
                self.stats.decoded += len(entry.ends) - plan.k
                self._add(entry, replaces=plan.base if plan.k == len(plan.base.ends) else None)
                return value
            value, walked = what
            self.stats.walks += 1
            if walked is not None:
                entry = _entry(plan.scope, plan.raw, walked)
                self.stats.decoded += len(entry.ends)
                self._add(entry)
            return value

    def _loads(self, raw: bytes, scope: str) -> Any:
        try:
            base, k = self._best(raw, scope)
            if base is not None:
                value, entry = _resume(raw, base, k)
                self.stats.hits += 1
                self.stats.reused += k
                self.stats.decoded += len(entry.ends) - k
                self._add(entry, replaces=base if k == len(base.ends) else None)
                return value
            value, new = walk(raw, scope)
        except Exception:  # noqa: BLE001 - _Bail, a syntax error, a too-deep nesting...
            self.stats.fallbacks += 1
            return json.loads(raw)  # the canonical value, or the canonical error
        self.stats.walks += 1
        if new is not None:
            self.stats.decoded += len(new.ends)
            self._add(new)
        return value

    def _best(self, raw: bytes, scope: str) -> tuple[_Entry | None, int]:
        entries = self._scopes.get(scope)
        if not entries:
            return None, 0
        best: _Entry | None = None
        best_k = -1
        size = len(raw)
        for e in reversed(entries):  # a body extending a cached one: the common case
            # agrees with it up to the end of its last element? The bytes just before that
            # end first (one C call per cached body, 128 per tenant): another conversation's
            # body differs there at once, where the whole prefix could agree for tens of
            # kilobytes (the system prompt and tools a team's agents share)
            n, t = len(e.ends), e.end - len(e.tail)
            if n > best_k and e.end < size and raw.startswith(e.tail, t) and agree(raw, e.raw, 0, t):
                best, best_k = e, n
        if best is not None:
            return best, best_k
        tried = 0
        for e in reversed(entries):  # edited or forked history: the longest shared prefix
            if tried >= 2:
                break
            if not agree(raw, e.raw, 0, e.bound(1)):
                continue
            tried += 1
            k = _reusable(raw, e)
            if k > best_k:
                best, best_k = e, k
        if best is None or best_k < 1:
            return None, 0
        self._lru.move_to_end(id(best))
        return best, best_k

    def _add(self, entry: _Entry, replaces: _Entry | None = None) -> None:
        if replaces is not None:
            self._drop(replaces)
        entries = self._scopes.setdefault(entry.scope, [])
        entries.append(entry)
        self._lru[id(entry)] = entry
        self._bytes += len(entry.raw)
        while len(entries) > self.max_per_scope:
            self._drop(entries[0])
        while self._bytes > self.max_bytes and self._lru:
            self._drop(next(iter(self._lru.values())))

    def _drop(self, entry: _Entry) -> None:
        if self._lru.pop(id(entry), None) is None:
            return
        self._bytes -= len(entry.raw)
        entries = self._scopes.get(entry.scope)
        if entries is not None:
            with contextlib.suppress(ValueError):
                entries.remove(entry)
            if not entries:
                del self._scopes[entry.scope]
