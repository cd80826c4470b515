"""Incremental normalisation: reuse the messages of the previous request.

Agents resend their whole history on every request. Normalising and hashing 1,000
messages per request would make the tracker's cost grow with the history, so the
normaliser remembers, per conversation, the parsed items of its last request and their
:class:`~proxy.core.messages.Message` objects. When a new body's items start with those
items (a C-level ``==`` over the parsed JSON, far cheaper than re-normalising), only the
new items are normalised. Which conversation's last request a body extends is found by
object identity first: the server's incremental JSON parse
(:class:`proxy.core.jsonbody.BodyCache`) reuses the parsed objects of a byte-identical
prefix, so the body's items include the very objects of that request's items, and a
look-up by the identity of an item finds it without comparing the body with every
conversation of the namespace; bodies parsed otherwise fall back to comparing.

Contract: the result is always identical (same messages, same digests, same system and
tools) to ``proxy.core.dialects.from_body(api, body)`` — the fast path is an
optimisation only (tested against the full path).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core.dialects import from_anthropic, from_body, openai_chat_tail, openai_responses_tail
from proxy.core.jsonbody import PER_TENANT
from proxy.core.messages import Message, Snapshot, tools_text
from proxy.core.volatile import stable_system

__all__ = ["IncrementalNormalizer", "Normalized", "text_hash"]


def text_hash(text: str) -> str:
    """Short content hash of a system prompt or tool list ("" for empty text)."""
    if not text:
        return ""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


@dataclass(frozen=True, slots=True)
class Normalized:
    """A normalised request: the snapshot, its message digests, content hashes of the
    system prompt and tools, and how many leading messages were reused from the last
    remembered request of conversation ``reused_from``."""

    snapshot: Snapshot
    system_hash: str
    tools_hash: str
    reused: int
    reused_from: str | None = None

    @property
    def digests(self) -> tuple[str, ...]:
        return self.snapshot.digests


@dataclass(slots=True)
class _Entry:
    api: str
    items: list[Any]
    system_raw: Any
    tools_raw: Any
    norm: Normalized
    #: id() of the last item when remembered (its key in the identity index; kept so a
    #: later change to the list cannot strand the index entry)
    last_id: int | None = None


#: Strings longer than this are summarised by :func:`_sig`.
_SIG_CHARS = 64


def _sig(item: Any) -> Any:
    """A bounded summary of a parsed JSON item that two equal items always share (equal
    under ``==``): long strings by their length and three short samples, lists by their
    length and first elements, objects key by key. Comparing summaries first rejects,
    without a pass over it, an item that differs from another only deep inside a long
    text — two 10 MB texts alike up to their end cost a 10 MB ``memcmp`` (issue 16)."""
    if isinstance(item, str):
        n = len(item)
        if n <= _SIG_CHARS:
            return item
        return n, item[:8], item[n // 2 : n // 2 + 8], item[-8:]
    if isinstance(item, dict):
        return tuple(sorted((k, _sig(v)) for k, v in item.items() if isinstance(k, str))), len(item)
    if isinstance(item, list):
        return len(item), tuple(_sig(v) for v in item[:4])
    return item


def _items(api: str, body: Mapping[str, Any]) -> list[Any] | None:
    raw = body.get("input") if api == "responses" else body.get("messages")
    return raw if isinstance(raw, list) else None


def _system_raw(api: str, body: Mapping[str, Any]) -> Any:
    if api == "messages":
        return body.get("system")
    if api == "responses":
        return body.get("instructions")
    return None  # chat: the system prompt is inside the items


def _tail_messages(api: str, items: list[Any]) -> tuple[Message, ...]:
    """Normalise items that follow at least one non-system message."""
    if not items:
        return ()
    if api == "chat":
        return openai_chat_tail(items)
    if api == "responses":
        return openai_responses_tail(items)
    return from_anthropic({"messages": items}).messages


class _SigIndex:
    """One namespace's remembered entries by what a body that extends one must share
    with it: the API, the summary (:func:`_sig`) of its first item, its length ``k`` and
    the summary of its last item. A body no remembered request's identity matches (a
    new conversation, a resend parsed anew) then costs one look-up per distinct length
    among the entries that share its first item, not a pass over every entry of the
    namespace (128 of them: ~25 µs per new one-message conversation, ~60 µs for a
    100-message one). An entry's summaries are computed once, when a body is first
    compared after it was remembered (``pending`` until then); lists keep the order in
    which entries were remembered."""

    __slots__ = ("firsts", "keys", "pending", "where")

    def __init__(self) -> None:
        #: (api, first item's summary) -> {k: how many entries}
        self.firsts: dict[tuple[str, Any], dict[int, int]] = {}
        #: (api, first item's summary, k, last item's summary) -> keys, oldest first
        self.keys: dict[tuple[str, Any, int, Any], list[str]] = {}
        #: keys remembered since the last comparison, in that order (not indexed yet)
        self.pending: dict[str, None] = {}
        #: key -> where it is indexed
        self.where: dict[str, tuple[str, Any, int, Any]] = {}

    def add(self, key: str) -> None:
        self.remove(key)
        self.pending[key] = None

    def remove(self, key: str) -> None:
        self.pending.pop(key, None)
        at = self.where.pop(key, None)
        if at is None:
            return
        keys = self.keys[at]
        keys.remove(key)
        if not keys:
            del self.keys[at]
        counts = self.firsts[at[:2]]
        counts[at[2]] -= 1
        if not counts[at[2]]:
            del counts[at[2]]
            if not counts:
                del self.firsts[at[:2]]

    def settle(self, bucket: Mapping[str, _Entry]) -> None:
        """Index the entries remembered since the last comparison (an entry without
        items or messages is never reused, and is not indexed)."""
        for key in self.pending:
            e = bucket.get(key)
            k = len(e.items) if e is not None else 0
            if e is None or k == 0 or not e.norm.snapshot.messages:
                continue
            first = _sig(e.items[0])
            at = (e.api, first, k, first if k == 1 else _sig(e.items[k - 1]))
            self.keys.setdefault(at, []).append(key)
            self.where[key] = at
            counts = self.firsts.setdefault(at[:2], {})
            counts[k] = counts.get(k, 0) + 1
        self.pending.clear()


class IncrementalNormalizer:
    """Per-namespace cache of recent requests' parsed items and messages.

    ``max_per_namespace`` bounds how many conversations of one namespace are tried;
    ``max_entries`` bounds the whole cache (least recently used dropped first). One entry
    per conversation in flight, as many as the body cache keeps per tenant
    (:data:`~proxy.core.jsonbody.PER_TENANT`): a namespace with more agents than the bound
    had every request of every agent normalised whole (at 64, 128 agents on one key cost
    1.95 ms of CPU per request instead of ~1.0).
    """

    def __init__(self, max_per_namespace: int = PER_TENANT, max_entries: int = 4096) -> None:
        self._by_ns: dict[str, OrderedDict[str, _Entry]] = {}
        #: per namespace: id() of each entry's last item → the keys of those entries (an
        #: entry holds its items, so an id is never reused while it is listed)
        self._by_last: dict[str, dict[int, list[str]]] = {}
        #: per namespace: the entries by what an extending body shares with them
        self._by_sig: dict[str, _SigIndex] = {}
        self._lru: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.max_per_namespace = max_per_namespace
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0

    def _full(self, api: str, body: Mapping[str, Any]) -> Normalized:
        snap = from_body(api, body)
        return Normalized(
            snap,
            text_hash(stable_system(snap.system)),
            text_hash(tools_text(snap.tools)),
            0,
        )

    def normalize(self, namespace: str, api: str, body: Mapping[str, Any]) -> Normalized:
        """Normalise ``body`` of ``api`` (``chat``, ``messages``, ``responses``).
        Raises :class:`~proxy.core.messages.MessageFormatError` on malformed bodies."""
        items = _items(api, body)
        bucket = self._by_ns.get(namespace)
        best: _Entry | None = None
        best_key: str | None = None
        if items is not None and bucket:
            best, best_key = self._by_identity(namespace, bucket, api, items)
            if best is None:
                best, best_key = _by_comparison(bucket, self._by_sig[namespace], api, items)
        if best is None:
            self.misses += 1
            return self._full(api, body)
        self.hits += 1
        assert items is not None
        prev = best.norm
        k = len(best.items)
        new_msgs = _tail_messages(api, items[k:])
        system, system_hash = prev.snapshot.system, prev.system_hash
        sys_raw = _system_raw(api, body)
        if api != "chat" and sys_raw != best.system_raw:
            probe = self._full(api, {**body, "messages": [], "input": []})
            system, system_hash = probe.snapshot.system, probe.system_hash
        tools, tools_hash = prev.snapshot.tools, prev.tools_hash
        tools_raw = body.get("tools") or body.get("functions")
        if tools_raw != best.tools_raw:
            probe = self._full("chat", {"messages": [], "tools": tools_raw} if tools_raw else {"messages": []})
            tools, tools_hash = probe.snapshot.tools, probe.tools_hash
        model = body.get("model") if isinstance(body.get("model"), str) else None
        digests = prev.digests + tuple(m.digest for m in new_msgs)
        snap = Snapshot(prev.snapshot.dialect, system, prev.snapshot.messages + new_msgs, tools, model).with_digests(digests)
        snap.extending(prev.snapshot)
        return Normalized(snap, system_hash, tools_hash, len(prev.snapshot.messages), best_key)

    def _by_identity(
        self, namespace: str, bucket: OrderedDict[str, _Entry], api: str, items: list[Any]
    ) -> tuple[_Entry | None, str | None]:
        """The remembered request with the longest items that ``items`` starts with,
        found through the identity of its last item (items scanned from the end: an
        extension's match is a few new items back)."""
        last = self._by_last.get(namespace)
        if not last:
            return None, None
        get = last.get
        for i in range(len(items) - 1, -1, -1):
            keys = get(id(items[i]))
            if keys is None:
                continue
            k = i + 1
            for key in keys:
                e = bucket.get(key)
                if e is not None and e.api == api and len(e.items) == k and e.norm.snapshot.messages and items[:k] == e.items:
                    return e, key
        return None, None

    def _link(self, namespace: str, key: str, e: _Entry) -> None:
        if e.items:
            e.last_id = id(e.items[-1])
            self._by_last.setdefault(namespace, {}).setdefault(e.last_id, []).append(key)

    def _unlink(self, namespace: str, key: str, e: _Entry) -> None:
        last = self._by_last.get(namespace)
        ident = e.last_id
        if last is None or ident is None:
            return
        keys = last.get(ident)
        if keys is not None and key in keys:
            keys.remove(key)
            if not keys:
                del last[ident]
                if not last:
                    del self._by_last[namespace]

    def remember(self, namespace: str, key: str, api: str, body: Mapping[str, Any], norm: Normalized) -> None:
        """Remember ``body`` as the latest request of conversation ``key``."""
        items = _items(api, body)
        if items is None:
            return
        bucket = self._by_ns.get(namespace)
        if bucket is None:
            bucket = self._by_ns[namespace] = OrderedDict()
        old_entry = bucket.get(key)
        if old_entry is not None:
            self._unlink(namespace, key, old_entry)
        entry = _Entry(api, items, _system_raw(api, body), body.get("tools") or body.get("functions"), norm)
        bucket[key] = entry
        bucket.move_to_end(key)
        self._link(namespace, key, entry)
        index = self._by_sig.get(namespace)
        if index is None:
            index = self._by_sig[namespace] = _SigIndex()
        index.add(key)
        self._lru[(namespace, key)] = None
        self._lru.move_to_end((namespace, key))
        while len(bucket) > self.max_per_namespace:
            old, gone = bucket.popitem(last=False)
            self._unlink(namespace, old, gone)
            index.remove(old)
            self._lru.pop((namespace, old), None)
        while len(self._lru) > self.max_entries:
            (ns, old), _ = self._lru.popitem(last=False)
            self._drop(ns, old)

    def forget(self, namespace: str, key: str) -> None:
        self._drop(namespace, key)
        self._lru.pop((namespace, key), None)

    def _drop(self, namespace: str, key: str) -> None:
        b = self._by_ns.get(namespace)
        if b is None:
            return
        e = b.pop(key, None)
        if e is not None:
            self._unlink(namespace, key, e)
            self._by_sig[namespace].remove(key)
        if not b:
            del self._by_ns[namespace]
            del self._by_sig[namespace]


def _by_comparison(
    bucket: Mapping[str, _Entry], index: _SigIndex, api: str, items: list[Any]
) -> tuple[_Entry | None, str | None]:
    """The remembered request with the longest items that ``items`` starts with (the
    most recently remembered of equally long ones), found through ``index`` (the
    bucket's :class:`_SigIndex`) and confirmed by comparing (C-level ``==`` over the
    parsed JSON, each item once, ends first)."""
    index.settle(bucket)
    n = len(items)
    if not n:
        return None, None
    first = _sig(items[0])
    lengths = index.firsts.get((api, first))
    if not lengths:
        return None, None
    for k in sorted((k for k in lengths if k <= n), reverse=True):
        keys = index.keys.get((api, first, k, first if k == 1 else _sig(items[k - 1])))
        for key in reversed(keys or ()):
            e = bucket[key]
            # each item compared once (ends first): a resent request's 10 MB text is one
            # C-level comparison of ~1 ms on the loop, and was three (issue 16)
            if items[0] != e.items[0] or (k > 1 and items[k - 1] != e.items[k - 1]):
                continue
            if k > 2 and items[1 : k - 1] != e.items[1 : k - 1]:
                continue
            return e, key
    return None, None
