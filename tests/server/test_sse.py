"""SSE framing: events are exact byte spans, whatever the chunking."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.server.sse import SSESplitter

LINE = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=20
).map(lambda s: s.encode())
NEWLINE = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    events = []
    for _ in range(draw(st.integers(0, 6))):
        nl = draw(NEWLINE)
        lines = draw(st.lists(LINE.filter(bool), min_size=1, max_size=4))
        events.append(b"".join(line + nl for line in lines) + nl)
    return b"".join(events), events


def feed_in_pieces(data: bytes, cuts: list[int]) -> tuple[list[bytes], bytes]:
    splitter = SSESplitter()
    out: list[bytes] = []
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for a, b in itertools.pairwise(points):
        out.extend(splitter.feed(data[a:b]))
    return out, splitter.flush()


@settings(max_examples=300, deadline=None)
@given(streams(), st.lists(st.integers(0, 10_000), max_size=12))
def test_events_are_recovered_exactly(stream: tuple[bytes, list[bytes]], cuts: list[int]) -> None:
    data, events = stream
    out, rest = feed_in_pieces(data, cuts)
    assert b"".join(out) + rest == data
    if not data.endswith(b"\r"):  # a trailing CR may still become CRLF: held until EOF
        assert out == events and rest == b""


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.lists(st.integers(0, 1000), max_size=10))
def test_arbitrary_bytes_never_lost(data: bytes, cuts: list[int]) -> None:
    out, rest = feed_in_pieces(data, cuts)
    assert b"".join(out) + rest == data


def test_known_shapes() -> None:
    s = SSESplitter()
    assert s.feed(b"event: a\ndata: 1\n") == []
    assert s.pending == 17
    assert s.feed(b"\ndata: 2\r") == [b"event: a\ndata: 1\n\n"]
    assert s.feed(b"\n\r\n") == [b"data: 2\r\n\r\n"]
    assert s.feed(b"data: [DONE]\n\n: comment\n\n") == [b"data: [DONE]\n\n", b": comment\n\n"]
    assert s.flush() == b""
