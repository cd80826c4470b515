"""Whether old messages only moved: the request still has every one of them, re-ordered,
re-spaced or re-rendered, so no content was lost.

A client may rebuild part of its history every turn (aider re-renders its setup messages,
the files in the chat as they are now, and moves its system reminder): the alignment in
:mod:`.transition` sees those messages gone from their place, and asks
:func:`only_moved` whether their content is still in the request before calling the
transition anything but an append. Separate because it compares message *texts* (up to
whitespace, or by role and first line), where the alignment compares digests only; the
keys it makes are bounded in the work they do on a long text and remembered by digest.
"""

from __future__ import annotations

import re

from .histtext import content_heads, content_keys
from .messages import Message, Snapshot

__all__ = ["only_moved"]

#: ``_content_key`` by message digest: histories are resent, their messages' keys are not
#: recomputed on every request that is not an append (bounded, oldest out first).
_KEYS: dict[str, tuple[str, str]] = {}
_MAX_KEYS = 1 << 16


def _content_key(m: Message) -> tuple[str, str]:
    """Role and text up to whitespace."""
    if not m.digest:
        return m.role, " ".join(m.text.split())
    key = _KEYS.get(m.digest)
    if key is None:
        if len(_KEYS) >= _MAX_KEYS:
            _KEYS.pop(next(iter(_KEYS), ""), None)
        key = _KEYS[m.digest] = (m.role, " ".join(m.text.split()))
    return key


def only_moved(before: Snapshot, after: Snapshot, lost_idx: set[int], agent: str | None) -> str | None:
    """A reason when no content was lost: every old message that is gone from its place
    (or changed) is still in the request — with the same role and the same text up to
    whitespace (re-ordered, re-spaced), or, for a message with no tool call or result, with
    the same first line and a similar length (re-rendered) — as aider does every turn with
    its setup messages (the files in the chat as they are now) and its system reminder.
    Not a compaction (``None`` otherwise, and whenever an agent's compaction marker was
    seen). A message's whole text up to whitespace (:func:`_content_key`, a pass over all
    of it) is made only when its digest or its :func:`_norm_head` could not tell: a client
    resending an earlier 10 MB request drops that request's reply, and keying both texts
    took 20-28 ms of the event loop per such request (issue 16)."""
    if not lost_idx or agent is not None:
        return None
    old_msgs, new_msgs = before.messages, after.messages
    # the request's contents, extended from its last request's (not a pass over the history)
    in_new = _Contents(after)
    fresh: list[Message] | None = None
    heads: set[tuple[str, str]] = set()
    for i in lost_idx:
        if not 0 <= i < len(old_msgs):
            continue
        m = old_msgs[i]
        if in_new.has(m):
            continue
        if m.tool_results or m.tool_calls:
            return None
        if fresh is None:
            # a re-rendered twin is a new message: one that was already in the history
            # (another pasted `I ran this command:` output, say) re-renders nothing
            in_old = _Contents(before)
            fresh = [n for n in new_msgs if not (n.tool_results or n.tool_calls) and not in_old.has(n)]
            heads = {_head_key(x) for x in fresh}
        if _head_key(m) not in heads:
            return None
        # a setup message re-rendered with fresh content (aider's "I have *added these
        # files to the chat*" carries the files as they are now): the same message, still
        # there — unless it shrank or grew a lot (a summary in its place)
        twin = next(n for n in fresh if _head_key(n) == _head_key(m))
        if not 0.5 <= (len(twin.text) + 1) / (len(m.text) + 1) <= 2.0:
            return None
    return "request extends the history (messages re-ordered, re-spaced or re-rendered; no content lost)"


class _Contents:
    """Whether a message's :func:`_content_key` is one of ``snapshot``'s messages': by
    digest (the same message), else by :func:`_norm_head` (a different head: not there),
    and only then by the keys themselves (each set made on first need, and extended from
    the last request's: :func:`~.histtext.content_keys`)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snap = snapshot
        self._digests: set[str] | None = None
        self._heads: frozenset[object] | None = None
        self._keys: frozenset[object] | None = None

    def has(self, m: Message) -> bool:
        snap = self._snap
        if m.digest:
            if self._digests is None:
                self._digests = set(snap.digests)
            if m.digest in self._digests:
                return True
        if self._heads is None:
            self._heads = content_heads(snap.digests, snap.messages, _norm_head)
        if _norm_head(m) not in self._heads:
            return False
        if self._keys is None:
            self._keys = content_keys(snap.digests, snap.messages, _content_key)
        return _content_key(m) in self._keys


#: Characters of a message's text up to whitespace that :func:`_norm_head` gives.
_NORM_HEAD = 120
#: Characters :func:`_norm_head` reads first (enough for :data:`_NORM_HEAD` of most texts).
_NORM_READ = 256


def _norm_head(m: Message) -> tuple[str, str]:
    """Role and the first :data:`_NORM_HEAD` characters of ``" ".join(m.text.split())``
    (the start of :func:`_content_key`'s text: two messages whose heads differ have
    different keys), reading :data:`_NORM_READ` characters first, then twice as many each
    time, up to :data:`_HEAD_READ` at a time (splitting a 4,096-character piece into words
    for 120 characters of them was most of this function's cost)."""
    text = m.text
    words: list[str] = []
    size = -1  # len(" ".join(words))
    glue = False  # the last word may go on in the next piece
    at = 0
    step = _NORM_READ
    while size < _NORM_HEAD and at < len(text):
        if not glue:  # a run of whitespace is skipped in one C call
            start = _NON_SPACE.search(text, at)
            if start is None:
                break
            at = start.start()
        piece = text[at : at + min(step, _HEAD_READ)]
        step *= 2
        got = piece.split()
        if got and glue and not piece[0].isspace():
            words[-1] += got[0]
            size += len(got[0])
            got = got[1:]
        for w in got:
            words.append(w)
            size += len(w) + 1
            if size >= _NORM_HEAD:
                break  # the words after these are cut off anyway (and the loop ends)
        glue = not piece[-1].isspace()
        at += len(piece)
    return m.role, " ".join(words)[:_NORM_HEAD]


#: Characters of a first line read at a time by :func:`_head_key`.
_HEAD_READ = 4096
_NON_SPACE = re.compile(r"\S")


def _head_key(m: Message) -> tuple[str, str]:
    """Role and first line of a message (how a re-rendered setup message is recognised):
    ``" ".join(text.strip().split("\\n", 1)[0].split())[:120]``, reading only as much of
    the first line as those 120 characters need, its end included (a 10 MB single-line
    text is neither copied nor searched whole on the event loop)."""
    text = m.text
    start = _NON_SPACE.search(text)
    if start is None:
        return m.role, ""
    i = at = start.start()
    n = len(text)
    while True:  # the first line's end looked for a piece at a time too
        stop = min(at + _HEAD_READ, n)
        nl = text.find("\n", at, stop)
        end = stop if nl < 0 else nl
        head = " ".join(text[i:end].split())
        if nl >= 0 or end >= n or len(head) >= 120:
            return m.role, head[:120]
        at = stop
