"""The lineage index: what is known of each conversation, and its postings (pure, no I/O).

:func:`proxy.core.lineage.match` decides which known conversation a request belongs to;
this module holds what it reads — a :class:`History` per known conversation, the
:class:`Probe` a request is matched as, and the :class:`LineageIndex` that keeps the
histories with their digest, text-line, system-prompt and head postings per namespace
(and answers the candidate lookups the matcher makes) — plus :func:`extends_history`, the
"starts with the known last request" test both the head index and the matcher apply.
It is separate from the matcher because it is the state: the tracker owns one index and
mutates it through :meth:`LineageIndex.upsert`, :meth:`LineageIndex.add_lines` and
:meth:`LineageIndex.remove`, while the matcher only reads it.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .postings import Postings
from .prefix import common_prefix

__all__ = [
    "History",
    "LineageIndex",
    "Probe",
    "extends_history",
]

#: Digests shared by more conversations than this carry no identity ("ok", placeholders).
MAX_POSTINGS = 64
#: Candidates fully compared per request.
MAX_CANDIDATES = 8
#: Conversations sharing one head beyond which the head index is not used (the request
#: then goes through the sampled postings, as every non-extending request does).
MAX_HEAD_SHARE = 256
#: Messages leaving a history's tail up to which upsert checks each against the new
#: history instead of diffing whole sets.
_SMALL_TAIL = 8


@dataclass(frozen=True, slots=True)
class History:
    """What the index knows of one conversation.

    ``digests`` is the last request's messages followed by the recorded reply (if any);
    ``request_len`` is how many of them the last request itself sent.
    """

    conversation_id: str
    namespace: str
    system_hash: str
    digests: tuple[str, ...]
    request_len: int
    last_seen: float = 0.0


@dataclass(frozen=True, slots=True)
class Probe:
    """One request to match.

    ``summarize_hint``: the caller recognised a summarization instruction (agent marker
    or generic heuristic) in the request. ``text_lines``: fingerprints of the informative
    lines of the request's text, given only for short requests (a history pasted into one
    message); see :func:`~.lineage.line_fingerprints`.
    """

    namespace: str
    system_hash: str
    digests: tuple[str, ...]
    summarize_hint: bool = False
    text_lines: frozenset[int] = frozenset()
    #: An explicit session scope: with no structural match, a conversation of the scope
    #: with the same system prompt is taken as compacted (head fully replaced).
    scoped: bool = False
    #: The request carries a known post-compaction marker ("This session is being
    #: continued ..."): a fork becomes ``compacted``, and with no structural match the
    #: latest conversation with the same system prompt is taken as compacted.
    continuation_hint: bool = False
    #: Provenance: the request's first ``reused`` digests are, by construction, those of
    #: the last request of conversation ``reused_from`` (the incremental normaliser
    #: reused its parsed messages), so that it extends it needs no comparison.
    reused_from: str | None = None
    reused: int = 0
    #: Whether the request's message with this digest is commonplace (see
    #: :func:`~.lineage.commonplace`): such messages alone are no evidence that the request
    #: continues a conversation they end. ``None``: every message counts.
    common: Callable[[str], bool] | None = None


# --------------------------------------------------------------------------- the index


@dataclass
class _NsIndex:
    #: hash of a digest → the conversations (by number) whose history holds it; line
    #: fingerprint → the conversations that showed that line (compact: these hold an
    #: entry per tracked message, :mod:`proxy.core.postings`)
    postings: Postings = field(default_factory=Postings)
    lines: Postings = field(default_factory=Postings)
    by_system: dict[str, set[str]] = field(default_factory=dict)
    #: first (up to) two digests of a conversation's last request → conversations
    heads: dict[tuple[str, ...], set[str]] = field(default_factory=dict)


def _head(h: History) -> tuple[str, ...]:
    return h.digests[: min(2, h.request_len)]


class LineageIndex:
    """Known histories with digest → conversation postings, per namespace.

    Plain in-memory data with no I/O; the tracker owns one and mutates it only through
    :meth:`upsert`, :meth:`add_lines` and :meth:`remove`. Postings hold conversations
    by a number of the index's own (reused once a conversation is removed) and digests
    by their string hash: a hash shared by two digests only adds a candidate, which is
    then compared digest by digest.
    """

    def __init__(self) -> None:
        self._hist: dict[str, History] = {}
        self._ns: dict[str, _NsIndex] = {}
        #: per conversation, the line fingerprints it added (each once; for remove())
        self._conv_lines: dict[str, array[int]] = {}
        #: conversation id ↔ number (postings hold numbers: 4 bytes, not an object)
        self._num: dict[str, int] = {}
        self._ids: list[str] = []
        self._free: list[int] = []

    def __len__(self) -> int:
        return len(self._hist)

    def __contains__(self, conversation_id: object) -> bool:
        return conversation_id in self._hist

    def get(self, conversation_id: str) -> History | None:
        return self._hist.get(conversation_id)

    def histories(self) -> Iterable[History]:
        return self._hist.values()

    def namespace_of(self, conversation_id: str) -> str | None:
        h = self._hist.get(conversation_id)
        return h.namespace if h else None

    def postings_of(self, namespace: str) -> dict[str, dict[int, frozenset[str]]]:
        """The namespace's postings and line postings as plain data (for checks)."""
        ns = self._ns.get(namespace)
        out: dict[str, dict[int, frozenset[str]]] = {}
        for name in ("postings", "lines"):
            acc: dict[int, set[str]] = {}
            for key, n in (getattr(ns, name).items() if ns is not None else ()):
                acc.setdefault(key, set()).add(self._ids[n])
            out[name] = {k: frozenset(v) for k, v in acc.items()}
        return out

    def _ns_of(self, namespace: str) -> _NsIndex:
        ns = self._ns.get(namespace)
        if ns is None:  # not setdefault(): that would build an index per call
            ns = self._ns[namespace] = _NsIndex()
        return ns

    def _number(self, cid: str) -> int:
        n = self._num.get(cid)
        if n is None:
            if self._free:
                n = self._free.pop()
                self._ids[n] = cid
            else:
                n = len(self._ids)
                self._ids.append(cid)
            self._num[cid] = n
        return n

    def _cids(self, nums: Iterable[int]) -> Iterable[str]:
        ids = self._ids
        return (ids[n] for n in nums)

    def upsert(self, h: History, same_prefix: int = 0) -> None:
        """Insert or replace a conversation's history. Changing the last few messages
        costs O(changed messages) in Python (plus C-level scans); a rewrite costs
        O(history). ``same_prefix``: how many leading messages the caller knows are
        unchanged (not compared again)."""
        old = self._hist.get(h.conversation_id)
        ns = self._ns_of(h.namespace)
        cid = h.conversation_id
        if old is not None and old.namespace != h.namespace:
            self.remove(cid)
            old = None
        added: Iterable[str]
        removed: Iterable[str] = ()
        num = self._number(cid)
        if old is None:
            ns.postings.extend_new(map(hash, set(h.digests)), num)  # a new number: no search
            added = ()
        else:
            # usually a few messages replaced at the end (a reply the client did not
            # resend, a new turn): work on the differing tails, scanning the new history
            # (in C) for each digest that left the tail
            p = common_prefix(old.digests, h.digests, same_prefix)
            gone = old.digests[p:]
            added = h.digests[p:]
            if len(gone) <= _SMALL_TAIL:
                removed = [d for d in set(gone) if d not in h.digests]
            else:
                new_set, old_set = set(h.digests), set(old.digests)
                added, removed = new_set - old_set, old_set - new_set
        if added:
            ns.postings.add_all(map(hash, added), num)
        unpost = ns.postings.discard
        for d in removed:
            unpost(hash(d), num)
        if old is None or old.system_hash != h.system_hash:
            if old is not None:
                self._discard(ns.by_system, old.system_hash, cid)
            ns.by_system.setdefault(h.system_hash, set()).add(cid)
        head = _head(h)
        if old is None or _head(old) != head:
            if old is not None:
                self._discard(ns.heads, _head(old), cid)
            if head:
                ns.heads.setdefault(head, set()).add(cid)
        self._hist[cid] = h

    def add_lines(self, conversation_id: str, fingerprints: Iterable[int]) -> None:
        """Record text-line fingerprints seen in a conversation (for pasted-history side
        requests). Lines are kept for the life of the conversation."""
        h = self._hist.get(conversation_id)
        if h is None:
            return
        ns = self._ns_of(h.namespace)
        mine = self._conv_lines.get(conversation_id)
        if mine is None:
            mine = self._conv_lines[conversation_id] = array("q")
        num = self._num[conversation_id]
        if mine:
            mine.extend(ns.lines.add_all(fingerprints, num))
        else:  # its first lines: none is held for it yet, no search
            fresh = dict.fromkeys(fingerprints)
            ns.lines.extend_new(fresh, num)
            mine.extend(fresh)

    def remove(self, conversation_id: str) -> None:
        h = self._hist.pop(conversation_id, None)
        if h is None:
            return
        num = self._num.pop(conversation_id)
        self._free.append(num)
        ns = self._ns.get(h.namespace)
        lines = self._conv_lines.pop(conversation_id, ())
        if ns is None:
            return
        for d in set(h.digests):
            ns.postings.discard(hash(d), num)
        for fp in lines:
            ns.lines.discard(fp, num)
        self._discard(ns.by_system, h.system_hash, conversation_id)
        self._discard(ns.heads, _head(h), conversation_id)
        if not len(ns.postings) and not ns.by_system and not len(ns.lines):
            del self._ns[h.namespace]

    @staticmethod
    def _discard(d: dict[Any, set[str]], key: object, cid: str) -> None:
        s = d.get(key)
        if s is not None:
            s.discard(cid)
            if not s:
                del d[key]

    # -- read side used by match()

    def _extended(self, probe: Probe) -> list[History] | None:
        """Every known history ``probe`` extends, found through the head index; ``None``
        when a head is shared by too many conversations to scan (use the postings)."""
        ns = self._ns.get(probe.namespace)
        if ns is None:
            return []
        r = probe.digests
        out: list[History] = []
        for key in (r[:2], r[:1]) if len(r) >= 2 else (r[:1],):
            ids = ns.heads.get(key)
            if not ids:
                continue
            if len(ids) > MAX_HEAD_SHARE:
                return None
            hist = self._hist
            out.extend(h for h in (hist[c] for c in ids) if extends_history(r, h, probe))
        return out

    def _candidates(self, probe: Probe) -> list[History]:
        ns = self._ns.get(probe.namespace)
        if ns is None:
            return []
        hits: dict[str, int] = {}
        postings = ns.postings
        for d in set(_sample(probe.digests)):
            s = postings.get(hash(d))
            if s and len(s) <= MAX_POSTINGS:
                for cid in self._cids(s):
                    hits[cid] = hits.get(cid, 0) + 1
        if not hits:
            return []
        if len(hits) == 1:
            return [self._hist[next(iter(hits))]]
        ranked = sorted(hits.items(), key=lambda kv: (kv[1], self._hist[kv[0]].last_seen), reverse=True)
        return [self._hist[cid] for cid, _ in ranked[:MAX_CANDIDATES]]

    def _line_candidate(self, probe: Probe) -> tuple[History, int] | None:
        ns = self._ns.get(probe.namespace)
        if ns is None or not probe.text_lines:
            return None
        hits: dict[str, int] = {}
        for fp in probe.text_lines:
            s = ns.lines.get(fp)
            if s and len(s) <= MAX_POSTINGS:
                for cid in self._cids(s):
                    hits[cid] = hits.get(cid, 0) + 1
        if not hits:
            return None
        cid, n = max(hits.items(), key=lambda kv: (kv[1], self._hist[kv[0]].last_seen))
        return self._hist[cid], n

    def _latest(self, probe: Probe) -> History | None:
        """The most recently seen conversation of the probe's namespace."""
        ns = self._ns.get(probe.namespace)
        if ns is None:
            return None
        ids = {c for s in ns.by_system.values() for c in s}
        return max((self._hist[c] for c in ids), key=lambda h: h.last_seen) if ids else None

    def _latest_with_system(self, probe: Probe) -> History | None:
        ns = self._ns.get(probe.namespace)
        if ns is None:
            return None
        ids = ns.by_system.get(probe.system_hash)
        if not ids:
            return None
        if len(ids) == 1 or not probe.text_lines:
            return max((self._hist[c] for c in ids), key=lambda h: h.last_seen)
        # Several conversations share the system prompt (two agents of one kind, one
        # tenant): the one whose lines the request repeats (a kept message, a quoted
        # line) is the one it continues; only without such evidence the latest seen.
        hits = dict.fromkeys(ids, 0)
        for fp in probe.text_lines:
            for cid in self._cids(ns.lines.get(fp)):
                if cid in hits:
                    hits[cid] += 1
        return max((self._hist[c] for c in ids), key=lambda h: (hits[h.conversation_id], h.last_seen))


def _sample(digests: tuple[str, ...]) -> Iterable[str]:
    """A bounded sample: the head (extensions), the tail (kept tails after compaction)
    and an even stride through the middle (head truncation keeping a long middle)."""
    n = len(digests)
    if n <= 96:
        return digests
    stride = max(1, n // 32)
    return digests[:8] + digests[-56:] + digests[8:-56:stride]


def extends_history(r: tuple[str, ...], h: History, probe: Probe | None = None) -> bool:
    """Does ``r`` start with the known history's last request? Known from ``probe``'s
    provenance, else compared (ends first: a cheap rejection of other conversations
    before the C-level slice comparison)."""
    L = h.request_len
    hd = h.digests
    if len(r) < L:
        return False
    if probe is not None and probe.reused_from == h.conversation_id and probe.reused == L:
        return True
    return L == 0 or (r[0] == hd[0] and r[L - 1] == hd[L - 1] and r[:L] == hd[:L])
