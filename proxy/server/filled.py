"""A large body made as it arrives, not joined at the end (issue 16).

Reading a 10 MB body (a request's, or a reply read whole) chunk by chunk and then
``b"".join``-ing the chunks makes the ``bytes`` object in one C call at the end: a
10 MB allocation whose 2,560 fresh pages the kernel faults in one at a time as the copy
touches them — measured on this project's 2-core machine, 7-18 ms holding the GIL, on
the event loop (``bench.stall``: the body's join and the reply's read were the loop's
longest steps under four 10 MB requests, 6-10 ms of loop CPU per request each).

When the length is known ahead (``Content-Length``, no content coding), a
:class:`Filling` allocates the ``bytes`` object once, uninitialised, and copies each
chunk into it as the chunk arrives (a few hundred microseconds each, the page faults
spread over the reading); :meth:`Filling.value` is the object once exactly the
announced bytes came. Any other outcome (more or fewer bytes than announced) is the
caller's to handle with the chunks it kept — the result is byte for byte
``b"".join(chunks)`` either way. The object is written only before anyone else holds
it (its hash is not computed yet): as far as Python code can tell, an ordinary ``bytes``.

The same holds for a long ASCII string made from a span of a body (what a worker
decoded comes back as spans, :mod:`proxy.core.bodyrefs`): :func:`ascii_texts_later`
makes it a slice per loop step
(:class:`proxy.state.rawmem.AsciiText`) instead of one 10 MB decode.
"""

from __future__ import annotations

import asyncio
import ctypes
from collections.abc import Iterable

from proxy.state import rawmem

__all__ = ["MAX_BYTES", "MIN_BYTES", "Collector", "Filling", "ascii_texts_later"]

#: Bodies from this many bytes on are filled as they arrive...
MIN_BYTES = 1 << 20
#: ...up to this many (a larger one is joined at the end, as before).
MAX_BYTES = 256 << 20



class Filling:
    """A ``bytes`` object of ``size`` bytes (at least :data:`MIN_BYTES`: never one of
    the interpreter's shared small objects), filled by :meth:`add`."""

    __slots__ = ("_addr", "_at", "_value", "size")

    def __init__(self, size: int) -> None:
        if size < MIN_BYTES:
            raise ValueError(f"a Filling is for bodies of {MIN_BYTES} bytes or more")
        self.size = size
        self._value: bytes | None = rawmem.new_bytes(size)
        self._addr = rawmem.bytes_address(self._value)
        self._at = 0

    def add(self, chunk: bytes) -> bool:
        """Copy ``chunk`` in after what came before; ``False`` (nothing copied) when it
        would exceed ``size`` (or is not a ``bytes``)."""
        n = len(chunk)
        if self._value is None or self._at + n > self.size or type(chunk) is not bytes:
            return False
        if n:
            ctypes.memmove(self._addr + self._at, chunk, n)
        self._at += n
        return True

    def value(self) -> bytes | None:
        """The body, once exactly ``size`` bytes came (else ``None``); handed out once."""
        if self._value is None or self._at != self.size:
            return None
        value, self._value = self._value, None
        return value

    def spill(self) -> bytes:
        """What was copied in so far, as a ``bytes`` of its own (the object is never
        handed out half-written); the filling is over."""
        value, self._value = self._value, None
        return b"" if value is None else value[: self._at]


class Collector:
    """The chunks of a body of ``expected`` bytes (``None``: unknown), as one ``bytes``
    (:meth:`result`): filled as they come when ``expected`` is from :data:`MIN_BYTES`
    to :data:`MAX_BYTES` (the object is made when the first chunk comes: a declared
    length alone allocates nothing), else — or once more or fewer bytes came — joined
    at the end."""

    __slots__ = ("_chunks", "_expected", "_filling")

    def __init__(self, expected: int | None) -> None:
        self._expected = expected if expected is not None and MIN_BYTES <= expected <= MAX_BYTES else None
        self._filling: Filling | None = None
        self._chunks: list[bytes] = []

    def add(self, chunk: bytes) -> None:
        if self._expected is not None:
            if self._filling is None:
                try:
                    self._filling = Filling(self._expected)
                except MemoryError:  # joined at the end instead
                    self._expected = None
            if self._filling is not None and self._filling.add(chunk):
                return
            self._stop()
        self._chunks.append(chunk)

    def _stop(self) -> None:
        if self._filling is not None:
            self._chunks = [self._filling.spill()]
        self._filling = self._expected = None

    def result(self) -> bytes:
        """Every chunk added, in order, as one ``bytes``."""
        if self._filling is not None:
            value = self._filling.value()
            if value is not None:
                return value
            self._stop()
        chunks = [c for c in self._chunks if c]
        if not chunks:
            return b""
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)  # one copy at most


def ascii_texts_later(
    body: bytes | bytearray, spans: Iterable[tuple[int, int]], made: dict[tuple[int, int], str]
) -> asyncio.Future[None]:
    """:class:`~proxy.state.rawmem.AsciiText` of each span of :data:`MIN_BYTES` or more (the spans
    :func:`proxy.core.bodyrefs.ascii_spans` gives) into ``made`` (``bodyrefs.loads``'
    argument), one slice per loop step from callbacks — no task, so a server stopping
    meanwhile leaves nothing pending behind — done when the future is."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    todo = [(a, b) for a, b in spans if b - a >= MIN_BYTES]
    making: list[rawmem.AsciiText] = []

    def step() -> None:
        if done.cancelled():
            return
        if not making:
            if not todo:
                done.set_result(None)
                return
            making.append(rawmem.AsciiText(body, *todo[0]))
        text = making[0].step()
        if text is not None:
            made[todo.pop(0)] = text
            making.clear()
        loop.call_soon(step)

    step()
    return done
