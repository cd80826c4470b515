"""Large objects made without a copy of their own (issue 16), through CPython's C API.

A 10 MB ``bytes``, ``str`` or ``bytearray`` made by Python code is made in one C call
that holds the GIL for the whole copy — and for the kernel's faulting in of 2,560 fresh
pages, 7-18 ms on this project's 2-core machine: on the event loop, or in any thread of
the server, every other tenant's request waits for it. These make the object
uninitialised and give the address of its buffer, so that a caller can fill it a slice
at a time (:mod:`proxy.server.filled`) or hand the buffer to a call that copies without
the GIL (``os.pwrite``, :mod:`proxy.state.sharedmem`). A ``bytes`` or ``str`` made so is
written only before anyone else holds it (its hash is not computed yet); the objects
are otherwise ordinary.
"""

from __future__ import annotations

import ctypes

__all__ = ["SLICE", "AsciiText", "ascii_address", "bytes_address", "new_ascii", "new_bytearray", "new_bytes"]

_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.py_object
_new_bytes.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
_bytes_buffer = ctypes.pythonapi.PyBytes_AsString
_bytes_buffer.restype = ctypes.c_void_p
_bytes_buffer.argtypes = [ctypes.py_object]
_new_str = ctypes.pythonapi.PyUnicode_New
_new_str.restype = ctypes.py_object
_new_str.argtypes = [ctypes.c_ssize_t, ctypes.c_uint32]
_str_buffer = ctypes.pythonapi.PyUnicode_AsUTF8AndSize  # an ASCII str's UTF-8 is its own buffer
_str_buffer.restype = ctypes.c_void_p
_str_buffer.argtypes = [ctypes.py_object, ctypes.c_void_p]
_new_bytearray = ctypes.pythonapi.PyByteArray_FromStringAndSize
_new_bytearray.restype = ctypes.py_object
_new_bytearray.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]


def new_bytes(n: int) -> bytes:
    """A new ``bytes`` of ``n`` (at least 2: never a shared one) uninitialised bytes."""
    if n < 2:
        raise ValueError("only objects of 2 bytes or more are made uninitialised")
    return _new_bytes(None, n)  # type: ignore[no-any-return]


def bytes_address(b: bytes) -> int:
    """Where ``b``'s bytes are."""
    return _bytes_buffer(b)  # type: ignore[no-any-return]


def new_ascii(n: int) -> str:
    """A new compact ASCII ``str`` of ``n`` (at least 2) uninitialised characters: write
    only ASCII bytes into it (:func:`ascii_address`)."""
    if n < 2:
        raise ValueError("only objects of 2 characters or more are made uninitialised")
    return _new_str(n, 127)  # type: ignore[no-any-return]


def ascii_address(s: str) -> int:
    """Where an ASCII ``s``'s characters are (one byte each: its UTF-8, no copy made)."""
    if not s.isascii():
        raise ValueError("only an ASCII str's buffer is its UTF-8")
    return _str_buffer(s, None)  # type: ignore[no-any-return]


def new_bytearray(n: int) -> bytearray:
    """A new ``bytearray`` of ``n`` bytes, not zeroed first."""
    return _new_bytearray(None, n)  # type: ignore[no-any-return]


#: Bytes copied per :meth:`AsciiText.step` (about 0.1 ms with the new pages' faults;
#: 1 MiB steps took ~0.5 ms each on the loop in the sequential harness).
SLICE = 1 << 18


class AsciiText:
    """``str(body[start:end], "ascii")`` for bytes known to be ASCII, made a
    :data:`SLICE` at a time (:meth:`step`): decoded in one call, a 10 MB text is a 10 MB
    allocation faulted in at once (3-4 ms holding the GIL on a quiet core,
    ``bench.stall``'s longest loop step after the joins). Each slice is copied by
    ``memmove`` through ctypes, without the GIL. The ``str`` is written only
    before anyone else holds it (its hash not computed yet)."""

    __slots__ = ("_at", "_body", "_dst", "_n", "_start", "_text")

    def __init__(self, body: bytes | bytearray, start: int, end: int) -> None:
        self._body, self._start, self._n, self._at = body, start, end - start, 0
        self._text = new_ascii(self._n)
        self._dst = ascii_address(self._text)

    def step(self) -> str | None:
        """Copy the next slice; the text once it is whole."""
        at, body = self._at, self._body
        n = min(SLICE, self._n - at)
        if type(body) is bytes:
            ctypes.memmove(self._dst + at, bytes_address(body) + self._start + at, n)
        elif n:  # a bytearray: its buffer for this step only (it may not resize meanwhile)
            src = (ctypes.c_char * n).from_buffer(body, self._start + at)
            ctypes.memmove(self._dst + at, src, n)
            del src
        self._at = at + n
        return self._text if self._at >= self._n else None
