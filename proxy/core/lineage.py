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

The histories, the probe and the index they are matched through are
:mod:`proxy.core.lineage_index`; this module holds the decision, and the evidence a
caller puts in a probe beside its digests (:func:`line_fingerprints`, :func:`commonplace`).

Contracts:
- :func:`match` and :func:`relate` are pure functions of a
  :class:`~.lineage_index.LineageIndex` (plain in-memory data, mutated only through its
  own methods) and a :class:`~.lineage_index.Probe`.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from .lineage_index import History, LineageIndex, Probe, extends_history
from .messages import Message
from .prefix import common_prefix

__all__ = [
    "Match",
    "Relation",
    "match",
    "relate",
]

Relation = Literal["extend", "compacted", "side_request", "fork", "new"]

#: Relations that make a request part of an existing conversation.
SAME_CONVERSATION: frozenset[str] = frozenset({"extend", "compacted", "side_request"})

_RANK: dict[str, int] = {"extend": 4, "compacted": 3, "fork": 2, "new": 0}

#: Pasted-history side requests need at least this many known lines ...
MIN_LINE_HITS = 3
#: ... and, without a summarize hint, this share of the probe's lines.
MIN_LINE_SHARE = 0.5


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




def _extension(h: History, probe: Probe) -> Match:
    """The match of ``probe`` extending ``h`` (its shared prefix is compared only past
    ``h``'s last request, which ``probe`` starts with)."""
    return Match(h.conversation_id, "extend", prefix_len=common_prefix(probe.digests, h.digests, h.request_len))


def _evaluate(h: History, probe: Probe) -> Match:
    r = probe.digests
    L = h.request_len
    if extends_history(r, h, probe):
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
                extended = [h for h in candidates if extends_history(r, h, probe)]
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
