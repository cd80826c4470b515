"""Comparing long runs of bytes without holding the GIL (issue 16).

``bytes.startswith`` compares with ``memcmp`` but holds the GIL throughout: comparing a
new 10 MB request body with a cached one that it matches up to its end (agents resend
their history; ``bench.stall``'s bodies differ only in their last bytes) is ~1-4 ms
during which no other thread of the server runs Python — on the event loop, every
other tenant's request waits. :func:`agree` calls the C library's ``memcmp`` through
``ctypes``, which releases the GIL for the call, for spans of :data:`NOGIL_BYTES` or
more: run in a thread, the comparison leaves the loop free. Pure (no I/O).
"""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["NOGIL_BYTES", "agree"]

#: Spans from this many bytes on are compared without the GIL (below it, the call's own
#: cost is more than the comparison's).
NOGIL_BYTES = 1 << 16

_memcmp: Any
try:
    _memcmp = ctypes.CDLL(None).memcmp
    _memcmp.restype = ctypes.c_int
    _memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
except (OSError, AttributeError, TypeError):  # no C library to call (not a POSIX system)
    _memcmp = None
_address = ctypes.pythonapi.PyBytes_AsString
_address.restype = ctypes.c_void_p
_address.argtypes = [ctypes.py_object]


def agree(a: bytes, b: bytes, start: int, end: int) -> bool:
    """Whether ``a[start:end] == b[start:end]`` and both are at least ``end`` long
    (``a.startswith(b[start:end], start)`` for ``end <= len(b)``), without copying."""
    if start < 0 or end > len(a) or end > len(b):
        return False
    if end - start < NOGIL_BYTES or _memcmp is None or type(a) is not bytes or type(b) is not bytes:
        return a.startswith(memoryview(b)[start:end], start)
    return bool(_memcmp(_address(a) + start, _address(b) + start, end - start) == 0)
