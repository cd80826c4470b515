"""Several streamed rounds merged into one client stream, per dialect.

The rounds are the fake upstream's own SSE streams (the real wire formats); the merged
stream is checked event by event and reassembled with the proxy's own assembler."""

from __future__ import annotations

import json
from typing import Any

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.core.interventions.recall import recall_calls
from proxy.core.interventions.recall_stream import merger_for
from proxy.core.interventions.sse import parse_event
from proxy.core.responses import StreamAssembler
from tests.support.fake_upstream import (
    _BUILDERS,
    Call,
    RecordedRequest,
    Reply,
    ToolCall,
    Usage,
    _Ids,
)

NAME = "recall_compacted_context"
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
APIS = ["chat", "responses", "messages"]


def body_for(api: str, n: int) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "stream": True}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": f"round {n}"}]
        body["stream_options"] = {"include_usage": True}
    elif api == "responses":
        body["input"] = f"round {n}"
    else:
        body["messages"] = [{"role": "user", "content": f"round {n}"}]
    return body


def events(api: str, reply: Reply, n: int = 0) -> list[bytes]:
    body = body_for(api, n)
    dialect = "anthropic" if api == "messages" else "openai"
    raw = json.dumps(body).encode()
    rec = RecordedRequest("POST", PATHS[api], "", CIMultiDictProxy(CIMultiDict()), raw, body, dialect, api)  # type: ignore[arg-type]
    call = Call(dialect, api, "POST", PATHS[api], {}, body, "m", True)  # type: ignore[arg-type]
    return [((f"event: {name}\n" if name else "") + f"data: {data}\n\n").encode()
            for name, data in _BUILDERS[api].stream(call, reply, _Ids(rec))]


def objs(stream: list[bytes]) -> list[Any]:
    return [parse_event(e).json() for e in stream]


def assembled(api: str, stream: list[bytes]) -> Any:
    asm = StreamAssembler(api)
    for e in stream:
        asm.feed(e)
    return asm.result()


RECALL = ToolCall(NAME, {"handle": "spill_abc"}, id="call_recall")
BASH = ToolCall("bash", {"cmd": "alembic downgrade 3f9a1c2b7d4e"}, id="call_bash")


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("reply", [Reply(text="just text"), Reply(text="t", tool_calls=[BASH]), Reply(tool_calls=[BASH, BASH])])
def test_a_round_without_recall_comes_out_byte_for_byte(api: str, reply: Reply) -> None:
    m = merger_for(api, NAME)  # type: ignore[arg-type]
    src = events(api, reply)
    out = [o for e in src for o in m.feed(e)]
    end = m.end_round()
    assert recall_calls(api, end.turn, NAME) == []  # type: ignore[arg-type]
    out += m.release()
    if api == "responses":  # lifecycle events are re-rendered only when they echo the tool
        assert objs(out) == objs(src)
    else:
        assert out == src


@pytest.mark.parametrize("api", APIS)
def test_text_streams_at_once_and_tool_calls_wait_for_the_end_of_the_turn(api: str) -> None:
    m = merger_for(api, NAME)  # type: ignore[arg-type]
    src = events(api, Reply(text="Let me look.", tool_calls=[BASH]))
    sent_before_end = [o for e in src for o in m.feed(e)]
    text = json.dumps(objs(sent_before_end))
    assert all(w in text for w in ("Let", "me", "look.")) and "call_bash" not in text and "alembic" not in text


def two_rounds(api: str) -> tuple[list[bytes], Any]:
    m = merger_for(api, NAME)  # type: ignore[arg-type]
    out: list[bytes] = []
    for e in events(api, Reply(text="Let me look. ", tool_calls=[RECALL, BASH], usage=Usage(100, 7)), 0):
        out += m.feed(e)
    end = m.end_round()
    assert [c.handle for c in recall_calls(api, end.turn, NAME)] == ["spill_abc"]  # type: ignore[arg-type]
    m.next_round()
    for e in events(api, Reply(text="Rolling back.", tool_calls=[BASH], usage=Usage(130, 11)), 1):
        out += m.feed(e)
    assert recall_calls(api, m.end_round().turn, NAME) == []  # type: ignore[arg-type]
    return out + m.release(), m


@pytest.mark.parametrize("api", APIS)
def test_two_rounds_reach_the_client_as_one_reply_without_the_recall(api: str) -> None:
    out, _ = two_rounds(api)
    reply = assembled(api, out)
    assert reply is not None and reply.complete
    texts = [p.text for msg in reply.messages for p in msg.parts if p.kind == "text"]
    assert "".join(texts).replace(" ", "") == "Letmelook.Rollingback."
    calls = [p for msg in reply.messages for p in msg.parts if p.kind == "tool_call"]
    assert [c.tool_name for c in calls] == ["bash"]  # the recall and round 1's guess are gone
    assert NAME not in b"".join(out).decode() and "spill_abc" not in b"".join(out).decode()
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (230, 18)


def test_chat_rounds_keep_one_id_and_one_opening_chunk() -> None:
    out, _ = two_rounds("chat")
    chunks = [o for o in objs(out) if isinstance(o, dict)]
    assert {c["id"] for c in chunks} == {chunks[0]["id"]}
    assert sum(1 for c in chunks for ch in c["choices"] if ch["delta"].get("role")) == 1
    assert sum(1 for c in chunks for ch in c["choices"] if ch.get("finish_reason")) == 1
    assert out[-1] == b"data: [DONE]\n\n" and out.count(b"data: [DONE]\n\n") == 1
    assert chunks[-1]["usage"]["total_tokens"] == 248


def test_anthropic_rounds_keep_one_message_and_consecutive_blocks() -> None:
    out, _ = two_rounds("messages")
    evs = objs(out)
    types = [e["type"] for e in evs]
    assert types.count("message_start") == 1 and types.count("message_delta") == 1 and types[-1] == "message_stop"
    starts = [e["index"] for e in evs if e["type"] == "content_block_start"]
    assert starts == list(range(len(starts))) == [0, 1, 2]
    for e in evs:
        if e["type"] in ("content_block_delta", "content_block_stop"):
            assert e["index"] in starts
    delta = next(e for e in evs if e["type"] == "message_delta")
    assert delta["usage"]["input_tokens"] == 230 and delta["usage"]["output_tokens"] == 18
    assert delta["delta"]["stop_reason"] == "tool_use"


def test_responses_rounds_keep_one_id_and_consecutive_numbers() -> None:
    out, m = two_rounds("responses")
    evs = objs(out)
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    assert [e["type"] for e in evs].count("response.created") == 1
    created = evs[0]["response"]["id"]
    final = evs[-1]
    assert final["type"] == "response.completed" and final["response"]["id"] == created
    added = [e["output_index"] for e in evs if e["type"] == "response.output_item.added"]
    assert added == list(range(len(added))) == [0, 1, 2]
    assert [i["type"] for i in final["response"]["output"]] == ["message", "message", "function_call"]
    assert final["response"]["usage"]["input_tokens"] == 230
    shown, real = m.response_ids()
    assert shown == created and real != created and real is not None


@pytest.mark.parametrize("api", APIS)
def test_strip_ends_the_turn_without_the_recall_and_says_why(api: str) -> None:
    m = merger_for(api, NAME)  # type: ignore[arg-type]
    out: list[bytes] = []
    for e in events(api, Reply(tool_calls=[RECALL])):
        out += m.feed(e)
    m.end_round()
    out += m.strip("NOTE: budget")
    reply = assembled(api, out)
    assert reply is not None
    assert [p for msg in reply.messages for p in msg.parts if p.kind == "tool_call"] == []
    assert "NOTE: budget" in "".join(p.text for msg in reply.messages for p in msg.parts)
    assert reply.stop_reason in ("stop", "end_turn", "completed")
    if api == "responses":
        assert [e["sequence_number"] for e in objs(out)] == list(range(len(out)))


@pytest.mark.parametrize("api", APIS)
def test_strip_keeps_the_clients_calls_renumbered(api: str) -> None:
    m = merger_for(api, NAME)  # type: ignore[arg-type]
    out: list[bytes] = []
    for e in events(api, Reply(tool_calls=[RECALL, BASH])):
        out += m.feed(e)
    m.end_round()
    out += m.strip("NOTE")
    reply = assembled(api, out)
    calls = [p for msg in reply.messages for p in msg.parts if p.kind == "tool_call"]
    assert [c.tool_name for c in calls] == ["bash"] and "NOTE" not in b"".join(out).decode()


@pytest.mark.parametrize("api", APIS)
def test_abandon_gives_back_everything_held(api: str) -> None:
    m = merger_for(api, NAME)  # type: ignore[arg-type]
    src = events(api, Reply(text="t", tool_calls=[BASH]))
    out = [o for e in src for o in m.feed(e)]
    out += m.abandon()
    assert objs(out) == objs(src)
