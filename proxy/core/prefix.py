"""The common prefix of two digest sequences, found with C-level slice comparisons."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["common_prefix"]


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the common prefix of ``a`` and ``b``. One tuple comparison in the
    common case (one extends the other), else a binary search over slices whose
    comparisons add up to O(n) element checks, all in C."""
    ta = a if isinstance(a, tuple) else tuple(a)
    tb = b if isinstance(b, tuple) else tuple(b)
    n = min(len(ta), len(tb))
    if ta[:n] == tb[:n]:
        return n
    lo, hi = 0, n  # ta[:lo] == tb[:lo], ta[:hi] != tb[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ta[lo:mid] == tb[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo
