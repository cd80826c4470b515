"""Pickling what was decoded from a body without its long strings (no I/O).

A worker process that decodes a 10 MB JSON body (``proxy.server.bodyparse``) or reply
(``proxy.gate.replytap``) sends back what it decoded; pickled whole, that is the 10 MB
text again: ~50 ms of pickling in the worker, a pipe of 10 MB, and an unpickling that
holds the server's GIL — and so its event loop — in one C call. The server holds the
body already. :func:`dumps` therefore sends every long string whose UTF-8 bytes appear
verbatim in the body (no JSON escape in it: base64, most long unbroken runs) as a
reference to that span, and :func:`loads` makes it from the body again (one UTF-8 decode,
no JSON). A string that occurs in the value several times, as one object, comes back
as one object (the digests computed ahead rely on it,
:func:`proxy.core.messages.remember_digests`). Any other string is pickled as usual:
the result is equal to the value either way.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

__all__ = ["MIN_CHARS", "ascii_spans", "dumps", "loads", "long_strings"]

#: What spans are made from: a body (``bytes``) or a worker's output (``bytearray``).
Buffer = bytes | bytearray

#: Strings from this many characters on travel as a span of the body when they can.
MIN_CHARS = 1 << 16


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, body: bytes) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.body = body
        self.spans: dict[int, tuple[int, int] | None] = {}
        self.keep: list[str] = []  # the strings looked up: their ids stay theirs
        self.ascii: list[tuple[int, int]] = []  # the spans of ASCII strings

    def persistent_id(self, obj: Any) -> tuple[int, int] | None:
        if type(obj) is not str or len(obj) < MIN_CHARS:
            return None
        key = id(obj)
        if key not in self.spans:
            self.keep.append(obj)
            span = self.spans[key] = _span(obj, self.body)
            if span is not None and obj.isascii():
                self.ascii.append(span)
        return self.spans[key]


def _span(text: str, body: bytes) -> tuple[int, int] | None:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: only ever written as an escape
        return None
    # a short head's candidates, each compared whole (memcmp): ``bytes.find`` of a 10 MB
    # needle costs ~0.1 s where this costs a few milliseconds
    head, n = data[:_HEAD], len(data)
    at = body.find(head)
    for _ in range(_TRIES):  # bounded: a body of near-misses is pickled as usual
        if at < 0:
            break
        if body.startswith(data, at):
            return at, at + n
        at = body.find(head, at + 1)
    return None


#: Bytes of a string's head searched for in the body before it is compared whole, and
#: how many such candidates are compared at most.
_HEAD = 64
_TRIES = 8


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, body: Buffer, made: dict[tuple[int, int], str] | None) -> None:
        super().__init__(file)
        self.body = body
        self.made: dict[tuple[int, int], str] = dict(made or {})

    def persistent_load(self, pid: Any) -> str:
        start, end = pid
        text = self.made.get((start, end))
        if text is None:
            # decoded from a view: slicing ``body`` first would copy the span once more
            text = self.made[(start, end)] = str(memoryview(self.body)[start:end], "utf-8")
        return text


class _Collector(pickle.Pickler):
    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.found: dict[int, str] = {}

    def persistent_id(self, obj: Any) -> int | None:
        if type(obj) is not str or len(obj) < MIN_CHARS:
            return None
        self.found.setdefault(id(obj), obj)
        return id(obj)  # not pickled: only looked for


def long_strings(value: Any) -> bytes:
    """The UTF-8 of every long string in ``value`` (each object once; those with a lone
    surrogate left out), one after the other: a body for :func:`dumps` when ``value``
    was not decoded from one (a stream's reply, assembled from its events)."""
    collector = _Collector(io.BytesIO())
    collector.dump(value)
    out = []
    for text in collector.found.values():
        try:
            out.append(text.encode("utf-8"))
        except UnicodeEncodeError:
            continue
    return b"".join(out)


def dumps(value: Any, body: bytes) -> bytes:
    """``value`` pickled, its long strings found verbatim in ``body`` as spans of it
    (and which of those spans are ASCII: :func:`ascii_spans`)."""
    buf = io.BytesIO()
    pickler = _Pickler(buf, body)
    pickler.dump(value)
    return pickle.dumps((tuple(pickler.ascii), buf.getvalue()), protocol=pickle.HIGHEST_PROTOCOL)


def ascii_spans(data: bytes) -> tuple[tuple[int, int], ...]:
    """The spans ``(start, end)`` of the body that :func:`dumps` gave for ASCII strings
    (whose UTF-8 is their text: a caller may make them itself, :func:`loads`'
    ``made``)."""
    spans, _ = pickle.loads(data)
    return spans  # type: ignore[no-any-return]


def loads(data: bytes, body: Buffer, made: dict[tuple[int, int], str] | None = None) -> Any:
    """What :func:`dumps` pickled, its spans made from the same ``body`` — or taken
    from ``made``, the strings of some spans made already (equal to their decoding)."""
    _, inner = pickle.loads(data)
    return _Unpickler(io.BytesIO(inner), body, made).load()
