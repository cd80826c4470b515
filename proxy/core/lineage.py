"""Conversation matching by message-hash lineage (pure, no I/O).

Agents rarely send a conversation id, and compaction replaces exactly the head of the
history a naive fingerprint would use. So a request is matched to a known conversation by
the *lineage* of its message digests (:attr:`proxy.core.messages.Message.digest`):

- ``extend``      the request starts with everything the last request of a known
                  conversation sent (possibly followed by the recorded reply and new
                  messages): it continues that conversation.
- ``compacted``   the request does not extend it, but keeps a verbatim block of the
                  known history that reaches the end of its last request (head replaced
                  by a summary, head dropped, or messages masked in place): same
                  conversation, compacted.
- ``side_request`` a summarization call about a known conversation (its history plus a
                  summarize instruction, or the history pasted as text into a message):
                  attached to that conversation, which it does not advance.
- ``fork``        shares a prefix with a known conversation, then diverges with no kept
                  tail: a *new* conversation whose ``parent_id`` is the other one.
- ``new``         nothing in common with any known conversation of the namespace.

Everything is scoped by a *namespace* (the tenant hash, optionally joined with an explicit
session id): conversations of different namespaces never match.

Contracts:
- :func:`match` and :func:`relate` are pure functions of a :class:`LineageIndex` (plain
  in-memory data, mutated only through its own methods) and a :class:`Probe`.
- A request that extends a known history (the common case: an agent's next turn) is
  found through a head index (the first two digests of each known last request → the
  conversations), so it costs O(conversations sharing that head), independent of the
  history's length.
- Otherwise candidate lookup goes through a digest → conversations posting list, over a
  bounded sample of the request's digests, so matching costs O(sample + candidates ×
  history compare), never O(all conversations × history). Comparisons of digest tuples
  are done with C-level tuple slicing where possible.
- Extending a known history never yields a new conversation (property-tested).
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .messages import Message
from .postings import Postings
from .prefix import common_prefix

__all__ = [
    "History",
    "LineageIndex",
    "Match",
    "Probe",
    "Relation",
    "match",
    "relate",
]

Relation = Literal["extend", "compacted", "side_request", "fork", "new"]

#: Relations that make a request part of an existing conversation.
SAME_CONVERSATION: frozenset[str] = frozenset({"extend", "compacted", "side_request"})

_RANK: dict[str, int] = {"extend": 4, "compacted": 3, "fork": 2, "new": 0}

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
#: Pasted-history side requests need at least this many known lines ...
MIN_LINE_HITS = 3
#: ... and, without a summarize hint, this share of the probe's lines.
MIN_LINE_SHARE = 0.5


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
    message); see :func:`line_fingerprints`.
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
    #: :func:`commonplace`): such messages alone are no evidence that the request
    #: continues a conversation they end. ``None``: every message counts.
    common: Callable[[str], bool] | None = None


@dataclass(frozen=True, slots=True)
class Match:
    """The decision for one request.

    ``conversation_id`` is ``None`` for a new conversation (``new`` and ``fork``).
    ``prefix_len``: leading messages shared with the known history. ``suffix_len``: length
    of the verbatim block of the known history kept after a replaced or dropped head
    (``compacted``). ``dropped``: messages of the known history's last request absent from
    the request (``compacted``). ``parent_id``: the conversation a ``fork`` branched from.
    """

    conversation_id: str | None
    relation: Relation
    prefix_len: int = 0
    suffix_len: int = 0
    dropped: int = 0
    parent_id: str | None = None
    line_hits: int = 0


NEW = Match(None, "new")


# --------------------------------------------------------------------------- text lines


_LABEL = re.compile(r"^[\w .()\[\]#/-]{1,32}:\s+")
#: Lines longer than this are fingerprinted by their ends and length (bounded cost).
_LONG_LINE = 4096
#: A text longer than twice this many characters is fingerprinted by the lines of its
#: first and last ``_LONG_TEXT`` characters only (at most ``_LONG_TEXT_LINES`` of them).
_LONG_TEXT = 1 << 16
_LONG_TEXT_LINES = 512


def line_fingerprints(text: str, min_len: int = 12, max_lines: int | None = None) -> frozenset[int]:
    """Fingerprints of the informative lines of ``text`` (stripped, at least ``min_len``
    characters), plus the same lines without a leading speaker label (``Human: ...``,
    ``tool (bash): ...``) so that a transcript pasted as text matches the original
    messages. ``max_lines`` keeps only the first and last lines of long texts.

    Fingerprints are Python string hashes: stable within a process only, so an index
    built from them must be rebuilt (not persisted) — which the tracker does on load.
    """
    out: set[int] = set()
    if len(text) > 2 * _LONG_TEXT:
        # megabytes of text: its first and last lines only, without splitting it all
        half = (max_lines or _LONG_TEXT_LINES) // 2
        lines = text[:_LONG_TEXT].splitlines()[:half] + text[-_LONG_TEXT:].splitlines()[-half:]
    else:
        lines = text.splitlines()
    if max_lines is not None and len(lines) > max_lines:
        half = max_lines // 2
        lines = lines[:half] + lines[-half:]
    for raw in lines:
        if len(raw) > _LONG_LINE:
            # a line of megabytes (base64, minified JSON): its ends and length identify it
            # well enough, at a bounded cost
            out.add(hash((len(raw), raw[: _LONG_LINE // 2], raw[-_LONG_LINE // 2 :])))
            continue
        line = raw.strip()
        if len(line) < min_len:
            continue
        out.add(hash(line))
        m = _LABEL.match(line)
        if m is not None:
            rest = line[m.end() :].strip()
            if len(rest) >= min_len:
                out.add(hash(rest))
    return frozenset(out)


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
            out.extend(h for h in (hist[c] for c in ids) if _extends(r, h, probe))
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


# --------------------------------------------------------------------------- comparison


def _kept_tail(h: History, r: tuple[str, ...], start: int) -> tuple[int, int]:
    """The longest verbatim block ``r[i:i+k] == h.digests[j:j+k]`` (``i >= start``) that
    reaches the end of the known last request (``j + k >= request_len``).

    Returns ``(k, j)``; ``(0, 0)`` when there is none."""
    hd = h.digests
    pos: dict[str, int] = {}
    for idx, d in enumerate(hd):
        pos.setdefault(d, idx)
    best_k, best_j = 0, 0
    i, n, m = start, len(r), len(hd)
    while i < n:
        j = pos.get(r[i])
        if j is None:
            i += 1
            continue
        k = 1
        while i + k < n and j + k < m and r[i + k] == hd[j + k]:
            k += 1
        if j + k >= h.request_len and k > best_k:
            best_k, best_j = k, j
        i += k
    return best_k, best_j


#: A message of at most this many characters, without digits or tool calls, is
#: commonplace: many conversations hold it verbatim ("yes", "continue", "ok, go on").
COMMONPLACE_CHARS = 48


def commonplace(msgs: Sequence[Message]) -> Callable[[str], bool]:
    """Of the digests of ``msgs``, which are of commonplace messages: short texts with no
    digit and no tool call or result — what any two conversations of one agent may
    both hold verbatim, so that sharing one proves nothing about where a request
    belongs. The map of ``msgs`` by digest is built on the first question (a request
    that extends a known conversation never asks)."""
    by: dict[str, Message] = {}

    def common(digest: str) -> bool:
        if not by:
            by.update((m.digest, m) for m in msgs)
        m = by.get(digest)
        if m is None or len(m.parts) != 1 or m.parts[0].kind != "text":
            return False
        text = m.parts[0].text
        return len(text) <= COMMONPLACE_CHARS and not any(c.isdigit() for c in text)

    return common


def _extends(r: tuple[str, ...], h: History, probe: Probe | None = None) -> bool:
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


def _extension(h: History, probe: Probe) -> Match:
    """The match of ``probe`` extending ``h`` (its shared prefix is compared only past
    ``h``'s last request, which ``probe`` starts with)."""
    return Match(h.conversation_id, "extend", prefix_len=common_prefix(probe.digests, h.digests, h.request_len))


def _evaluate(h: History, probe: Probe) -> Match:
    r = probe.digests
    L = h.request_len
    if _extends(r, h, probe):
        return _extension(h, probe)
    lcp = common_prefix(r, h.digests)
    k, j = _kept_tail(h, r, lcp)
    if (k and not lcp and probe.common is not None and not (probe.continuation_hint or probe.scoped)
            and all(map(probe.common, h.digests[j : j + k]))):
        # nothing in common but messages any conversation could hold ("yes"); a request
        # that says it continues a compacted conversation (or names its session) is one,
        # and such a tail still tells which
        k = 0
    if k and (k >= 2 or lcp >= 1 or probe.system_hash == h.system_hash):
        dropped = max(0, min(j, L) - lcp)
        return Match(h.conversation_id, "compacted", prefix_len=lcp, suffix_len=k, dropped=dropped)
    if lcp >= 1:
        return Match(None, "fork", prefix_len=lcp, parent_id=h.conversation_id)
    return NEW


def _better(a: Match, b: Match, ha: History, hb: History, probe: Probe) -> bool:
    """Is ``a`` (on ``ha``) a better explanation than ``b`` (on ``hb``)?"""
    ka = (_RANK[a.relation], a.prefix_len + a.suffix_len, ha.system_hash == probe.system_hash, ha.last_seen)
    kb = (_RANK[b.relation], b.prefix_len + b.suffix_len, hb.system_hash == probe.system_hash, hb.last_seen)
    return ka > kb


def _as_side_request(m: Match, h: History) -> Match:
    return Match(h.conversation_id, "side_request", prefix_len=m.prefix_len, suffix_len=m.suffix_len)


def match(index: LineageIndex, probe: Probe) -> Match:
    """Find the conversation ``probe`` belongs to, within its namespace.

    Order of preference: extend > compacted > fork > new; ties go to the longer
    matched run, then the same system prompt, then the most recently seen. With
    ``summarize_hint`` any structural match (extend, compacted or fork) becomes a
    ``side_request`` on that conversation; a short request whose text lines cover a
    known conversation is a ``side_request`` too (history pasted as text).
    """
    best: Match = NEW
    best_h: History | None = None
    r = probe.digests
    if r:
        # Extensions first (an extension outranks every other relation): through the
        # head index, or, when a head is too widely shared, the cheap C-level check
        # over the sampled candidates.
        extended = index._extended(probe)
        candidates: list[History] = []
        if not extended:
            candidates = index._candidates(probe)
            if extended is None:
                extended = [h for h in candidates if _extends(r, h, probe)]
        for h in extended:
            m = _extension(h, probe)
            if best_h is None or _better(m, best, h, best_h, probe):
                best, best_h = m, h
        # the O(history) compaction analysis only runs when nothing extends
        if best_h is None:
            for h in candidates:
                m = _evaluate(h, probe)
                if best_h is None or _better(m, best, h, best_h, probe):
                    best, best_h = m, h
    if best_h is not None and best.relation != "new":
        if probe.summarize_hint:
            return _as_side_request(best, best_h)
        if best.relation != "fork":
            return best
    lc = index._line_candidate(probe)
    if lc is not None:
        h, n = lc
        if n >= MIN_LINE_HITS and (probe.summarize_hint or n >= MIN_LINE_SHARE * len(probe.text_lines)):
            return Match(h.conversation_id, "side_request", line_hits=n)
    if best_h is not None and best.relation == "fork":
        if probe.continuation_hint:
            return Match(best_h.conversation_id, "compacted", prefix_len=best.prefix_len,
                         dropped=max(0, best_h.request_len - best.prefix_len))
        return best
    if probe.scoped or probe.continuation_hint:
        same = index._latest_with_system(probe)
        if same is None and probe.scoped and probe.continuation_hint:
            # The client's own session id, and the request says it continues a compacted
            # conversation: the same conversation whatever became of its system prompt,
            # tools or head (Claude Code rewrites its system prompt at compaction).
            same = index._latest(probe)
        if same is not None:
            if probe.summarize_hint:
                return Match(same.conversation_id, "side_request")
            return Match(same.conversation_id, "compacted", dropped=same.request_len)
    return NEW


def relate(h: History | None, probe: Probe) -> Match:
    """Relate ``probe`` to one given history (an explicitly identified conversation):
    ``extend``, ``compacted`` (anything that does not extend it — head replaced, dropped
    or rewritten), ``side_request`` (with a summarize hint) or ``new`` (no history)."""
    if h is None:
        return NEW
    # the conversation is named: a commonplace kept tail needs no proving
    m = _evaluate(h, probe if probe.common is None else replace(probe, common=None))
    if probe.summarize_hint:
        return _as_side_request(m, h)
    if m.relation == "extend" or m.relation == "compacted":
        return m
    return Match(h.conversation_id, "compacted", prefix_len=m.prefix_len, dropped=max(0, h.request_len - m.prefix_len))
