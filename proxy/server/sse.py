"""Incremental Server-Sent Events framing (split a byte stream into whole events).

Only framing, never parsing: each returned event is the exact byte span from the
upstream stream, including its terminating blank line, so concatenating all events
(plus :meth:`SSESplitter.flush`) reproduces the input byte-for-byte. Lines may end in
``\\r\\n``, ``\\n`` or ``\\r`` (WHATWG HTML §9.2.5); an event ends at an empty line.
"""

from __future__ import annotations

__all__ = ["SSESplitter"]


class SSESplitter:
    """Feed chunks with :meth:`feed`; get back the events completed so far."""

    __slots__ = ("_buf", "_line_start", "_scan")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan = 0  # next index to examine
        self._line_start = 0  # start index of the current (unterminated) line

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add ``chunk``; return every event that is now complete."""
        self._buf += chunk
        events: list[bytes] = []
        buf = self._buf
        i = self._scan
        n = len(buf)
        event_start = 0
        while i < n:
            # find the next line terminator
            lf = buf.find(b"\n", i)
            cr = buf.find(b"\r", i)
            if lf < 0 and cr < 0:
                i = n
                break
            if cr >= 0 and (lf < 0 or cr < lf):
                if cr + 1 >= n:
                    # a lone CR at the end may be the first half of CRLF: wait
                    i = cr
                    break
                end = cr + 2 if buf[cr + 1] == 0x0A else cr + 1
                term = cr
            else:
                end = lf + 1
                term = lf
            if term == self._line_start:
                # Empty line: the event is complete. A blank line with nothing
                # before it is emitted on its own so no byte is ever lost.
                events.append(bytes(buf[event_start:end]))
                event_start = end
            self._line_start = end
            i = end
        if event_start:
            del buf[:event_start]
            i -= event_start
            self._line_start -= event_start
        self._scan = i
        return events

    def flush(self) -> bytes:
        """End of stream: return any trailing bytes that did not form a full event."""
        rest = bytes(self._buf)
        self._buf.clear()
        self._scan = 0
        self._line_start = 0
        return rest

    @property
    def pending(self) -> int:
        """Number of buffered bytes not yet returned."""
        return len(self._buf)
