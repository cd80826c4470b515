"""What a history's messages say, kept per history and extended, not rebuilt.

An agent's next request is its last one plus a few messages. The analysis of a change of
the last turn (a replaced reply, an edit) needs two facts about the whole request — its
messages' text joined (is a lost value still visible verbatim?) and the set of their
contents up to whitespace (was a lost message only moved?) — and building either walks
every message in Python. So both are remembered per request, keyed by its message
digests, and the next request's are built from the longest remembered prefix (up to
:data:`REACH` messages back) plus its new messages: a C-level copy of the prefix's, and
Python work for the new messages only. Bounded: :data:`MAX_HISTORIES` histories, texts up
to :data:`MAX_CHARS` characters each (longer ones are built every time, not kept).

Pure functions of their arguments (the results equal building from scratch); the cache
is an optimisation only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar, cast

from .messages import TEXTUAL_KINDS, Message, Snapshot, tools_text

__all__ = ["content_heads", "content_keys", "is_long", "joined_text", "long_messages", "visible_text"]

#: How many trailing messages a request may add to a remembered one and still extend it.
REACH = 8
#: Remembered histories (per kind of fact).
MAX_HISTORIES = 64
#: Joined texts longer than this are not remembered.
MAX_CHARS = 1 << 20

T = TypeVar("T")


class _Prefixed:
    """Facts about message lists, by their digests, extended from a remembered prefix.

    Remembered by the list's length and last digest, with the whole digest tuple to
    compare: a look-up hashes those two values and compares the tuples (mostly the same
    string objects), where keying by the tuple hashed every digest of it for each length
    tried. Only lists whose every message has a digest are remembered."""

    def __init__(self) -> None:
        self._by: OrderedDict[tuple[int, str], tuple[tuple[str, ...], object]] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self,
        digests: tuple[str, ...],
        msgs: Sequence[Message],
        build: Callable[[Sequence[Message]], T],
        extend: Callable[[T, Sequence[Message]], T],
        keep: Callable[[T], bool],
    ) -> T:
        n = len(digests)
        if not n:
            return build(msgs)
        hit: object = None
        k = 0
        with self._lock:
            for k in range(min(REACH, n - 1) + 1):
                got = self._by.get((n - k, digests[n - k - 1]))
                if got is not None and got[0] == digests[: n - k]:
                    hit = got[1]
                    break
        # a message without a digest: nothing to key by (a remembered prefix has all of its)
        keyed = all(digests[n - k :] if hit is not None else digests)
        if hit is None:
            value = build(msgs)
        elif k:
            value = extend(cast(T, hit), msgs[n - k :])
        else:
            value = cast(T, hit)
        if keyed and keep(value):
            at = (n, digests[-1])
            with self._lock:
                self._by[at] = (digests, value)
                self._by.move_to_end(at)
                while len(self._by) > MAX_HISTORIES:
                    self._by.popitem(last=False)
        return value


_TEXTS = _Prefixed()
_KEYS = _Prefixed()
_HEADS = _Prefixed()


def _join(msgs: Sequence[Message]) -> str:
    return "\n".join(t for t in (m.text for m in msgs) if t)


def _extend_text(prefix: str, msgs: Sequence[Message]) -> str:
    more = _join(msgs)
    return prefix + "\n" + more if prefix and more else prefix or more


def joined_text(digests: tuple[str, ...], msgs: Sequence[Message]) -> str:
    """``"\\n".join`` of the non-empty texts of ``msgs`` (whose digests are ``digests``)."""
    return _TEXTS.get(digests, msgs, _join, _extend_text, lambda s: len(s) <= MAX_CHARS)


def _key_set(
    cache: _Prefixed, digests: tuple[str, ...], msgs: Sequence[Message], key: Callable[[Message], Hashable]
) -> frozenset[Hashable]:
    return cache.get(
        digests, msgs,
        lambda ms: frozenset(key(m) for m in ms),
        lambda s, ms: s | {key(m) for m in ms},
        lambda s: True,
    )


def content_keys(
    digests: tuple[str, ...], msgs: Sequence[Message], key: Callable[[Message], Hashable]
) -> frozenset[Hashable]:
    """``{key(m) for m in msgs}`` (``key`` must depend on a message's content only, the
    same function on every call)."""
    return _key_set(_KEYS, digests, msgs, key)


def content_heads(
    digests: tuple[str, ...], msgs: Sequence[Message], head: Callable[[Message], Hashable]
) -> frozenset[Hashable]:
    """:func:`content_keys` for a second function of a message's content (``head``, the
    same function on every call), remembered apart from the first's."""
    return _key_set(_HEADS, digests, msgs, head)


_LONG: dict[int, _Prefixed] = {}


def is_long(m: Message, min_chars: int) -> bool:
    """Whether ``m`` has a textual part of ``min_chars`` characters or more (a message
    :func:`long_messages` names): a question about one message, for a caller that needs
    it of a few (the remembered set of a history is found by a prefix of it, and a
    previous history — the last request plus its reply — is often no prefix of the next)."""
    return any(p.kind in TEXTUAL_KINDS and len(p.text) >= min_chars for p in m.parts)


def long_messages(digests: tuple[str, ...], msgs: Sequence[Message], min_chars: int) -> frozenset[str]:
    """The digests of the messages of ``msgs`` (whose digests are ``digests``) with a
    textual part of ``min_chars`` characters or more (usually none: a request's next
    one is answered from its new messages)."""

    def build(ms: Sequence[Message]) -> frozenset[str]:
        return frozenset(m.digest for m in ms if is_long(m, min_chars))

    cache = _LONG.get(min_chars) or _LONG.setdefault(min_chars, _Prefixed())
    return cache.get(digests, msgs, build, lambda s, ms: s | build(ms), lambda s: True)


def visible_text(snapshot: Snapshot) -> str:
    """:meth:`Snapshot.visible_text`, its messages' part from :func:`joined_text`."""
    chunks = (snapshot.system, joined_text(snapshot.digests, snapshot.messages), tools_text(snapshot.tools))
    return "\n".join(c for c in chunks if c)
