"""The Responses WebSocket mode as core input: frames resolved to whole request bodies,
frames for upstream, events to and from SSE, the refusal event (pure, no I/O)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.interventions.sse import parse_event
from proxy.core.responses_ws import (
    OutputCollector,
    SocketHistory,
    as_sse,
    error_event,
    frame_headers,
    from_sse,
    parse_create,
    upstream_frame,
)


def _msg(role: str, text: str) -> dict[str, Any]:
    kind = "input_text" if role == "user" else "output_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def test_parse_create_only_takes_response_create() -> None:
    assert parse_create('{"type": "response.create", "input": []}') == {"type": "response.create", "input": []}
    assert parse_create('{"type": "response.cancel"}') is None
    assert parse_create('{"type": "response.create"') is None  # not JSON
    assert parse_create('["response.create"]') is None


def test_a_frame_without_previous_response_is_its_own_history() -> None:
    h = SocketHistory()
    c = h.resolve({"type": "response.create", "model": "m", "input": "hi", "stream": True})
    assert c.body == {"model": "m", "input": ["hi"], "stream": True}
    assert c.incremental and not c.warmup and c.previous is None
    assert upstream_frame(c, None) is None  # nothing changed: the client's frame goes as it is


def test_unknown_previous_response_leaves_the_history_unknown() -> None:
    c = SocketHistory().resolve({"type": "response.create", "previous_response_id": "resp_x", "input": []})
    assert c.body is None and c.previous == "resp_x"
    assert upstream_frame(c, None) is None


turns = st.lists(
    st.tuples(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3),
              st.lists(st.text(min_size=1, max_size=8), max_size=3)),
    min_size=1, max_size=6,
)


@given(turns)
def test_a_chain_of_continuations_resolves_to_the_whole_history(chain: list[tuple[list[str], list[str]]]) -> None:
    """Each frame sends only its new items; the resolved input is everything before it."""
    h = SocketHistory()
    whole: list[Any] = []
    prev: str | None = None
    for n, (new, out) in enumerate(chain):
        new_items = [_msg("user", t) for t in new]
        frame: dict[str, Any] = {"type": "response.create", "input": new_items}
        if prev is not None:
            frame["previous_response_id"] = prev
        c = h.resolve(frame)
        whole += new_items
        assert c.body is not None and c.body["input"] == whole and "previous_response_id" not in c.body
        out_items = [_msg("assistant", t) for t in out]
        whole += out_items
        prev = f"resp_{n}"
        h.remember(prev, c.input_items + out_items, synced=True)
    assert len(h) == min(len(chain), h.keep)


def test_a_response_upstream_remembers_differently_is_continued_in_full() -> None:
    h = SocketHistory()
    h.remember("resp_1", [_msg("user", "a"), _msg("assistant", "b")], synced=False)
    c = h.resolve({"type": "response.create", "previous_response_id": "resp_1", "input": [_msg("user", "c")],
                   "model": "m"})
    assert not c.incremental
    sent = json.loads(upstream_frame(c, None) or "")
    assert sent == {"type": "response.create", "model": "m",
                    "input": [_msg("user", "a"), _msg("assistant", "b"), _msg("user", "c")]}
    # a rewrite by the gate always goes whole, whatever upstream remembers
    c2 = SocketHistory().resolve({"type": "response.create", "input": [_msg("user", "x")]})
    rewritten = {"input": [_msg("user", "note"), _msg("user", "x")]}
    assert json.loads(upstream_frame(c2, rewritten) or "") == {"type": "response.create", **rewritten}


def test_history_is_bounded() -> None:
    h = SocketHistory(keep=2)
    for n in range(5):
        h.remember(f"r{n}", [n], synced=True)
    assert len(h) == 2
    assert h.resolve({"type": "response.create", "previous_response_id": "r0", "input": []}).body is None
    assert h.resolve({"type": "response.create", "previous_response_id": "r4", "input": []}).input_items == [4]


def test_output_collector_prefers_the_final_output_and_falls_back_to_done_items() -> None:
    a, b = {"id": "i1", "type": "message"}, {"id": "i2", "type": "function_call"}
    c = OutputCollector()
    c.feed({"type": "response.created", "response": {"id": "resp_9", "output": []}})
    c.feed({"type": "response.output_item.done", "output_index": 1, "item": b})
    c.feed({"type": "response.output_item.done", "output_index": 0, "item": a})
    assert c.response_id == "resp_9" and c.items() == [a, b]
    c.feed({"type": "response.completed", "response": {"id": "resp_9", "output": [b]}})
    assert c.items() == [b]


def test_events_cross_to_sse_and_back_unchanged() -> None:
    text = '{"type":"response.output_text.delta","delta":"hi\\nthere","sequence_number":3}'
    raw = as_sse(text)
    ev = parse_event(raw)
    assert ev.event == "response.output_text.delta" and ev.data == text
    assert from_sse(raw) == text


def test_error_event_reads_both_ways() -> None:
    ev = json.loads(error_event(400, "refused", code="destructive_compaction", headers={"x-should-retry": "false"}))
    assert ev["type"] == "error" and ev["status"] == 400  # Codex CLI: a final HTTP 400
    assert ev["error"] == {"type": "invalid_request_error", "code": "destructive_compaction",
                           "message": "refused", "param": None}
    assert ev["code"] == "destructive_compaction" and ev["message"] == "refused"  # the SDK's top-level fields
    assert ev["headers"] == {"x-should-retry": "false"}


def test_frame_headers_take_the_frames_own_metadata() -> None:
    hs = {"session-id": "s1", "x-codex-turn-metadata": '{"request_kind":"prewarm"}'}
    frame = {"client_metadata": {"x-codex-turn-metadata": '{"request_kind":"compaction"}', "turn_id": "t",
                                 "X-Other": 3}}
    out = frame_headers(hs, frame)
    assert out == {"session-id": "s1", "x-codex-turn-metadata": '{"request_kind":"compaction"}'}
    assert frame_headers(hs, {}) == hs
