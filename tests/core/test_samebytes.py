"""``samebytes.agree`` is slice equality, whichever way it compares (issue 16)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import samebytes
from proxy.core.samebytes import NOGIL_BYTES, agree


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 3 * NOGIL_BYTES),
    m=st.integers(0, 3 * NOGIL_BYTES),
    flip=st.one_of(st.none(), st.integers(0, 3 * NOGIL_BYTES)),
    start=st.integers(0, 3 * NOGIL_BYTES),
    span=st.integers(0, 3 * NOGIL_BYTES),
)
def test_agree_is_slice_equality(n: int, m: int, flip: int | None, start: int, span: int) -> None:
    a = bytes(i % 251 for i in range(n))
    b = bytearray(i % 251 for i in range(m))
    if flip is not None and flip < m:
        b[flip] ^= 1
    b_ = bytes(b)
    end = start + span
    expected = end <= len(a) and end <= len(b_) and a[start:end] == b_[start:end]
    assert agree(a, b_, start, end) is expected


def test_a_long_span_is_compared_by_the_c_librarys_memcmp(monkeypatch: pytest.MonkeyPatch) -> None:
    """The path that leaves the GIL: a long span goes to ``memcmp`` (through ctypes,
    which releases the GIL for the call), a short one does not."""
    calls: list[int] = []
    real = samebytes._memcmp

    def counted(x: int, y: int, k: int) -> int:
        calls.append(k)
        return int(real(x, y, k))

    monkeypatch.setattr(samebytes, "_memcmp", counted)
    a = b"x" * (NOGIL_BYTES * 2) + b"y"
    assert agree(a, a[:-1] + b"z", 0, NOGIL_BYTES * 2)
    assert not agree(a, a[:-1] + b"z", 0, len(a))
    assert agree(a, a, 0, NOGIL_BYTES - 1)
    assert calls == [NOGIL_BYTES * 2, len(a)]
