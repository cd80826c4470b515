"""common_prefix: the shared prefix length of two digest sequences."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.prefix import common_prefix

_seq = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=40)


def naive(a: list[str], b: list[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@given(_seq, _seq, _seq)
def test_common_prefix_equals_a_plain_scan(shared: list[str], a: list[str], b: list[str]) -> None:
    x, y = shared + a, shared + b
    assert common_prefix(tuple(x), tuple(y)) == common_prefix(x, y) == naive(x, y)
    assert common_prefix(tuple(x), tuple(y)) >= len(shared)


@given(_seq, _seq, _seq, st.integers(0, 50))
def test_a_known_shared_start_is_not_compared_again(shared: list[str], a: list[str], b: list[str], cut: int) -> None:
    x, y = shared + a, shared + b
    start = min(cut, len(shared))
    assert common_prefix(x, y, start) == naive(x, y)
