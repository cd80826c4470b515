"""The summary ``_by_comparison`` compares before whole items (issue 16) never tells two
equal items apart — so it only ever skips comparisons that would have failed — and it
does tell apart texts alike up to their last characters."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.gate.normalize import _sig
from tests.support.counting import Counted


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


def test_a_resent_request_compares_each_remembered_item_once() -> None:
    # a resend: equal items, other objects (a 10 MB text compared is ~1 ms of the loop)
    from collections import OrderedDict

    from proxy.core.dialects import from_body
    from proxy.gate.normalize import Normalized, _by_comparison, _Entry, _SigIndex

    for k in (1, 2, 3, 5):
        old = [Counted(role="user", content=f"turn {i} " + "x" * 100) for i in range(k)]
        snap = from_body("chat", {"messages": [dict(m) for m in old]})
        assert snap is not None
        bucket = OrderedDict(a=_Entry("chat", old, None, None, Normalized(snap, "", "", 0)))
        index = _SigIndex()
        index.add("a")
        for new in ([Counted(m) for m in old], [Counted(m) for m in old] + [Counted(role="user", content="more")]):
            Counted.compared = 0
            best, key = _by_comparison(bucket, index, "chat", new)
            assert best is bucket["a"]
            assert key == "a"
            assert Counted.compared == k  # each once, not the ends twice
        changed = [Counted(m) for m in old]
        changed[k // 2] = Counted(role="user", content="edited")
        Counted.compared = 0
        assert _by_comparison(bucket, index, "chat", changed)[0] is None
        assert Counted.compared <= k
