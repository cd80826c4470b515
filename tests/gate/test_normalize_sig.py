"""The summary ``_by_comparison`` compares before whole items (issue 16) never tells two
equal items apart — so it only ever skips comparisons that would have failed — and it
does tell apart texts alike up to their last characters."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.gate.normalize import _sig


def _nested(inner: Any) -> Any:
    # a named function, not a lambda: hypothesis describes a lambda by reading its source,
    # which raced with other tests' threads reading linecache ("dictionary changed size")
    return st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=6), inner, max_size=5)


JSON: Any = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=200),
    _nested,
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(a=JSON, b=JSON)
def test_equal_items_have_equal_summaries(a: Any, b: Any) -> None:
    assert _sig(a) == _sig(copy.deepcopy(a))  # the same value, other objects
    if isinstance(a, dict):  # key order does not make a dict unequal
        assert _sig(a) == _sig(dict(reversed(list(a.items()))))
    if a == b:
        assert _sig(a) == _sig(b)


def test_texts_alike_but_for_their_end_differ_in_summary() -> None:
    run = "a" * (1 << 20)
    one = {"role": "user", "content": run + "0000001"}
    two = {"role": "user", "content": run + "0000002"}
    assert _sig(one) != _sig(two)
