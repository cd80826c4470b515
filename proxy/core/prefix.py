"""The common prefix of two digest sequences, found with C-level slice comparisons."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["common_prefix"]


def common_prefix(a: Sequence[str], b: Sequence[str], start: int = 0) -> int:
    """Length of the common prefix of ``a`` and ``b``, given that they agree on their
    first ``start`` elements (only the rest is compared: on a long history, every
    element a slice copies is an object touched). One tuple comparison in the common
    case (one extends the other), two when only the last element differs (a replaced
    reply), else a binary search over slices whose comparisons add up to O(n) element
    checks, all in C."""
    ta = a if isinstance(a, tuple) else tuple(a)
    tb = b if isinstance(b, tuple) else tuple(b)
    n = min(len(ta), len(tb))
    lo = min(start, n)
    if ta[lo:n] == tb[lo:n]:
        return n
    # only the last one differs (a replaced, edited or regenerated last turn): one more
    # comparison instead of a search
    if ta[lo : n - 1] == tb[lo : n - 1]:
        return n - 1
    hi = n - 1  # ta[:lo] == tb[:lo], ta[:hi] != tb[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ta[lo:mid] == tb[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo
