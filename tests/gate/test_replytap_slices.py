"""A long stream's reply is parsed as it streams, a bounded piece at a time (issue 16),
or assembled in the worker process from all its events at the end, and is the same
reply as one reassembled from all its events here."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import bodyrefs
from proxy.core.responses import Reply
from proxy.gate import replytap
from proxy.gate.replytap import TrackingTap


@dataclass
class _Obs:
    api: str = "chat"
    conversation_id: str = "c1"


@dataclass
class _Sink:
    shared: bool = False
    replies: list[tuple[Reply | None, str]] = field(default_factory=list)

    def later(self, fn: Callable[[], None], conversation_id: str | None = None, after: Any = None) -> None:
        fn()

    def record_counted(self, obs: Any, reply: Reply | None, status: str = "ok") -> None:
        self.replies.append((reply, status))

    async def acknowledge(self, obs: Any) -> None:
        return None


def _events(pieces: list[str]) -> list[bytes]:
    out = [b'data: {"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n']
    out += [b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": p}}]}).encode() + b"\n\n"
            for p in pieces]
    out += [b"data: {not json\n\n", b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
            b"data: [DONE]\n\n"]
    return out


def _reply(events: list[bytes], assemble_bytes: int, close: str | None = None) -> tuple[Reply | None, str]:
    sink = _Sink()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(replytap, "ASSEMBLE_BYTES", assemble_bytes)
        tap = TrackingTap(sink, _Obs())  # type: ignore[arg-type]
        for e in events:
            assert tap.feed_event(e) == [e]  # passed through unchanged
        if close is None:
            tap.finish()
        else:
            tap.closed(close)
    assert len(sink.replies) == 1
    return sink.replies[0]


@settings(max_examples=100, deadline=None)
@given(pieces=st.lists(st.text(max_size=40), max_size=30), every=st.integers(0, 400),
       close=st.none() | st.just("client_closed"))
def test_a_stream_parsed_as_it_goes_is_the_reply_reassembled_at_its_end(
    pieces: list[str], every: int, close: str | None
) -> None:
    events = _events(pieces)
    piecewise = _reply(events, every, close)
    whole = _reply(events, 1 << 40, close)
    assert piecewise == whole
    # assembled in the worker process from all the events, as they came: the same reply
    pickled, texts = replytap._stream_elsewhere("chat", b"".join(events))
    assert bodyrefs.loads(pickled, texts)[0] == whole[0]
    reply, _ = piecewise
    text = "".join(pieces)
    if text:
        assert reply is not None and reply.messages[0].text == text
