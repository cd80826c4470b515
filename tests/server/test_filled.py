"""Large bodies are made as they arrive and long ASCII strings a slice at a time
(proxy.server.filled, issue 16), never joined or decoded in one step on the event loop —
and the result is byte for byte what a join or a decode gives, whatever the chunking,
and whatever the announced length (too short, too long, unknown)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import bodyrefs
from proxy.server import filled
from proxy.state import rawmem
from tests.e2e.stack import GateStack
from tests.support.fake_upstream import Call, Reply


@pytest.fixture
def small_thresholds() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(filled, "MIN_BYTES", 16)
        mp.setattr(rawmem, "SLICE", 7)
        yield


def _chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    at, out = 0, []
    for cut in sorted(c % (len(data) + 1) for c in cuts):
        out.append(data[at:cut])
        at = cut
    out.append(data[at:])
    return out


@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=0, max_size=200), cuts=st.lists(st.integers(0, 400), max_size=12),
       off=st.sampled_from([0, -1, 1, -5, 9, None]))
def test_any_chunking_and_any_announced_length_give_the_join(data: bytes, cuts: list[int], off: int | None) -> None:
    chunks = _chunked(data, cuts)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(filled, "MIN_BYTES", 16)
        c = filled.Collector(None if off is None else len(data) + off)
        for chunk in chunks:
            c.add(chunk)
        filling = c._filling
        got = c.result()
    assert type(got) is bytes and got == b"".join(chunks)
    if off == 0 and len(data) >= 16:
        assert filling is not None  # filled as it came: nothing left to join
    assert hash(got) == hash(bytes(bytearray(got)))


def test_a_filled_body_is_never_handed_out_half_written(small_thresholds: None) -> None:
    f = filled.Filling(20)
    assert f.add(b"x" * 10)
    assert f.value() is None  # 10 of 20
    assert not f.add(b"y" * 11)  # would overflow: nothing copied
    assert not f.add(bytearray(b"z"))  # not bytes: refused
    assert f.spill() == b"x" * 10
    assert f.value() is None and not f.add(b"x")  # over
    with pytest.raises(ValueError):
        filled.Filling(15)


@settings(max_examples=100, deadline=None)
@given(text=st.text(st.characters(max_codepoint=127), min_size=0, max_size=120), head=st.integers(0, 5),
       as_bytearray=st.booleans())
def test_an_ascii_text_made_a_slice_at_a_time_is_its_decoding(text: str, head: int, as_bytearray: bool) -> None:
    raw = b"#" * head + text.encode("ascii") + b"$$"
    body: bytes | bytearray = bytearray(raw) if as_bytearray else raw
    steps = 0

    async def make() -> str:
        loop = asyncio.get_running_loop()
        pending: list[asyncio.Handle] = []

        def beside() -> None:  # another callback of the loop, counting its turns
            nonlocal steps
            steps += 1
            pending[:] = [loop.call_soon(beside)]

        beside()
        span = (head, head + len(text))
        made: dict[tuple[int, int], str] = {}
        try:
            await filled.ascii_texts_later(body, [span], made)
        finally:
            pending[0].cancel()
        # below MIN_BYTES nothing is made ahead: bodyrefs.loads decodes the span itself
        return made.get(span, str(memoryview(body)[head : head + len(text)], "ascii"))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(filled, "MIN_BYTES", 16)
        mp.setattr(rawmem, "SLICE", 7)
        got = asyncio.run(make())
    assert type(got) is str and got == text and hash(got) == hash("".join(text))
    if len(text) >= 16:
        assert steps >= len(text) // 7  # the loop ran something else between the slices


def test_made_strings_stand_in_for_their_spans_and_only_ascii_spans_are_listed() -> None:
    long = bodyrefs.MIN_CHARS
    body = json.dumps({"a": "x" * long, "b": "é" * long, "c": "z" * long + "y"}, ensure_ascii=False).encode()
    value = json.loads(body)
    data = bodyrefs.dumps(value, body)
    spans = bodyrefs.ascii_spans(data)
    assert sorted(b - a for a, b in spans) == [long, long + 1]  # not the non-ASCII one
    made = {span: str(body[span[0] : span[1]], "ascii") for span in spans}
    back = bodyrefs.loads(data, body, made)
    assert back == value
    assert {id(back["a"]), id(back["c"])} == {id(s) for s in made.values()}  # the very objects
    assert bodyrefs.loads(data, body) == value  # without them: decoded, equal


BIG = filled.MIN_BYTES * 3 // 2


def _reply(call: Call) -> Reply:
    return Reply(text="R" * BIG)


@pytest.fixture
def stack() -> Any:
    s = GateStack("default", _reply)
    yield s
    s.close()


def test_a_large_request_and_reply_are_filled_as_they_arrive_and_forwarded_unchanged(
    stack: GateStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes: list[int] = []
    real = filled.Filling.value

    def value(self: filled.Filling) -> bytes | None:
        got = real(self)
        if got is not None:
            sizes.append(len(got))
        return got

    monkeypatch.setattr(filled.Filling, "value", value)
    body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "é" + "x" * BIG}]}).encode()
    req = urllib.request.Request(stack.openai_base_url + "/chat/completions", data=body,
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer sk-test-filled"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        got = resp.read()
    assert stack.fake.requests[-1].body == body  # every byte, in order
    assert json.loads(got)["choices"][0]["message"]["content"] == "R" * BIG
    assert len(body) in sizes  # the request body was filled, not joined
    assert any(n > BIG for n in sizes if n != len(body))  # and so was the upstream's reply
