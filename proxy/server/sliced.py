"""Large bodies written a slice at a time (issue 16).

aiohttp writes a ``bytes`` body in one piece: on this Python (before 3.12.9 it joins
instead of ``writelines``) the headers and the 10 MB body are joined into a new object,
and what the socket did not take at once is sliced off and appended to the transport's
buffer — three 10 MB copies in single C calls holding the GIL, 9% of the event loop's GIL
time under ``bench.stall``'s load. A body of :data:`LARGE` bytes or more is therefore
sent as a :class:`SlicedBytesPayload`: :data:`SLICE` bytes per write, each followed by
aiohttp's drain (the loop serves others while the socket empties), the bytes on the wire
the same. That drain suspends only while the transport is paused, and a loopback socket
takes megabytes at once: without a yield of its own after every slice the whole body
still went out in one loop step (1.5-4.4 ms of the loop's CPU per step, measured with
``bench.stall``'s ``--callbacks`` hook; with the yield, at most ~0.5 ms).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import payload
from aiohttp.abc import AbstractStreamWriter

__all__ = ["LARGE", "SLICE", "SlicedBytesPayload", "body_payload"]

#: Bodies from this many bytes on are written a slice at a time.
LARGE = 1 << 20
#: Bytes per write.
SLICE = 1 << 18


class SlicedBytesPayload(payload.BytesPayload):
    """A ``bytes`` body that aiohttp writes :data:`SLICE` bytes at a time."""

    def __init__(self, value: bytes, **kwargs: Any) -> None:
        # BytesPayload's own __init__ warns that a large body "might lock the event loop":
        # this one is the remedy, so it takes Payload's
        payload.Payload.__init__(self, value, content_type=kwargs.pop("content_type", "application/octet-stream"),
                                 **kwargs)
        self._size = len(value)

    async def write(self, writer: AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: int | None) -> None:
        view = memoryview(self._value)
        if content_length is not None:
            view = view[:content_length]
        for at in range(0, len(view), SLICE):
            await writer.write(view[at : at + SLICE])
            await asyncio.sleep(0)  # one slice per loop step (see the module docstring)


def body_payload(body: bytes) -> bytes | SlicedBytesPayload:
    """``body`` as it is, or sliced when it is :data:`LARGE`."""
    return SlicedBytesPayload(body) if len(body) >= LARGE else body
