"""What a worker decoded travels without its long strings (proxy.core.bodyrefs): the
value comes back equal, long verbatim strings as spans of the body, one object per
object."""

from __future__ import annotations

import base64
import json
import os
import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import bodyrefs
from proxy.core.dialects import from_any

LONG = bodyrefs.MIN_CHARS


def test_long_verbatim_strings_travel_as_spans_and_come_back_as_one_object() -> None:
    blob = base64.b64encode(os.urandom(3 * LONG)).decode()
    run = "é" * LONG  # non-ASCII, written as UTF-8 (ensure_ascii=False)
    body = json.dumps({"messages": [{"role": "user", "content": blob}, {"role": "tool", "content": run}]},
                      ensure_ascii=False).encode()
    value = json.loads(body)
    msgs = from_any(value).messages
    shared = (value, msgs)  # the messages' texts are the value's very objects
    assert msgs[0].parts[0].text is value["messages"][0]["content"]

    data = bodyrefs.dumps(shared, body)
    assert len(data) < 4096 < len(pickle.dumps(shared))  # neither text was pickled
    back_value, back_msgs = bodyrefs.loads(data, body)
    assert back_value == value and back_msgs == msgs
    assert back_msgs[0].parts[0].text is back_value["messages"][0]["content"]
    assert back_msgs[1].parts[0].text is back_value["messages"][1]["content"]


def test_escaped_and_surrogate_strings_are_pickled_as_usual() -> None:
    lines = "line of a log\n" * (LONG // 10)  # JSON writes each newline as an escape
    lone = "\ud800" + "x" * LONG
    body = json.dumps({"a": lines, "b": lone}).encode()
    value = json.loads(body)
    data = bodyrefs.dumps(value, body)
    assert len(data) > len(lines)
    assert bodyrefs.loads(data, body) == value


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40)
    | st.builds(lambda c, n: c * n, st.characters(codec="utf-8"), st.sampled_from([LONG, LONG + 7])),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)


@settings(max_examples=40, deadline=None)
@given(value=json_values, ascii_only=st.booleans())
def test_any_decoded_body_comes_back_equal(value: object, ascii_only: bool) -> None:
    body = json.dumps(value, ensure_ascii=ascii_only).encode()
    decoded = json.loads(body)
    assert bodyrefs.loads(bodyrefs.dumps(decoded, body), body) == decoded


def test_a_body_of_near_misses_costs_bounded_comparisons_and_still_comes_back_equal() -> None:
    run = "a" * (4 * LONG)
    near = "a" * (2 * LONG) + "b"  # its head matches all along the run, its whole nowhere in it
    body = json.dumps([run, near]).encode()
    value = json.loads(body)
    assert bodyrefs._span(run, body) is not None
    # its first candidates all lie in the run: given up after a bounded number, pickled
    assert bodyrefs._span(near, body) is None
    assert bodyrefs.loads(bodyrefs.dumps(value, body), body) == value
