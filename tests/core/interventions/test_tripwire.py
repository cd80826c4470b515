from __future__ import annotations

import functools
import json
import operator
import re

from proxy.core.interventions.sse import parse_event, render_event
from proxy.core.interventions.tripwire import (
    ToolCall,
    annotate_json,
    block_json,
    find_hallucinations,
    tool_calls_of_json,
)
from proxy.core.interventions.tripwire_stream import ToolCallStreamGuard

HEX12 = re.compile(r"\b[0-9a-f]{12}\b")


def extract(text: str):
    for m in HEX12.finditer(text):
        yield m.group(0), m.group(0).lower(), "migration_revision"


KNOWN = {"3f9a1c2b7d4e"}


def check(calls):
    return find_hallucinations(calls, extract=extract, dropped_kinds={"migration_revision"}, known_norms=KNOWN,
                               expected_by_kind={"migration_revision": ("3f9a1c2b7d4e",)})


def test_invented_identifier_of_dropped_kind_is_found() -> None:
    found = check([ToolCall("bash", json.dumps({"cmd": "alembic downgrade 0123456789ab"}), "c1")])
    assert [(h.value, h.kind, h.expected) for h in found] == [("0123456789ab", "migration_revision", ("3f9a1c2b7d4e",))]


def test_known_value_or_other_kind_is_fine() -> None:
    assert check([ToolCall("bash", '{"cmd": "alembic downgrade 3f9a1c2b7d4e"}')]) == []
    assert find_hallucinations([ToolCall("bash", "0123456789ab")], extract=extract, dropped_kinds={"uuid"}, known_norms=set()) == []


def test_json_block_and_annotate_per_api() -> None:
    chat = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd":"alembic downgrade 0123456789ab"}'}}]}, "finish_reason": "tool_calls"}]}
    assert tool_calls_of_json("chat", chat)[0].name == "bash"
    blocked = block_json("chat", chat, "stop")
    assert "tool_calls" not in blocked["choices"][0]["message"] and blocked["choices"][0]["finish_reason"] == "stop"
    ann = annotate_json("chat", chat, "careful")
    assert ann["choices"][0]["message"]["tool_calls"] and "careful" in ann["choices"][0]["message"]["content"]
    anth = {"content": [{"type": "tool_use", "id": "t", "name": "bash", "input": {"cmd": "x"}}], "stop_reason": "tool_use"}
    assert tool_calls_of_json("messages", anth)[0].call_id == "t"
    b = block_json("messages", anth, "stop")
    assert [x["type"] for x in b["content"]] == ["text"] and b["stop_reason"] == "end_turn"


def _chat_tool_stream(arg: str) -> list[bytes]:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return [
        render_event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None, "tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "bash", "arguments": ""}}]}, "finish_reason": None}]}),
        render_event({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": arg[:10]}}]}, "finish_reason": None}]}),
        render_event({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": arg[10:]}}]}, "finish_reason": None}]}),
        render_event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        b"data: [DONE]\n\n",
    ]


def _run(g: ToolCallStreamGuard, evs: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for e in evs:
        out += g.feed(e)
    return out + g.finish()


def test_chat_stream_block_replaces_held_call_with_error() -> None:
    g = ToolCallStreamGuard("chat", check, "block")
    out = _run(g, _chat_tool_stream(json.dumps({"cmd": "alembic downgrade 0123456789ab"})))
    assert len(out) == 1 and "error" in parse_event(out[0]).json()
    assert g.found and g.blocked


def test_chat_stream_clean_call_is_released_unchanged() -> None:
    evs = _chat_tool_stream(json.dumps({"cmd": "alembic downgrade 3f9a1c2b7d4e"}))
    g = ToolCallStreamGuard("chat", check, "block")
    held_out: list[list[bytes]] = [g.feed(e) for e in evs]
    assert held_out[0] == [] and held_out[1] == []  # held until complete
    assert functools.reduce(operator.iadd, held_out, []) + g.finish() == evs


def test_anthropic_stream_block_and_annotate() -> None:
    def evs(arg: str) -> list[bytes]:
        return [
            render_event({"type": "message_start", "message": {"id": "m"}}, "message_start"),
            render_event({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "bash", "input": {}}}, "content_block_start"),
            render_event({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": arg}}, "content_block_delta"),
            render_event({"type": "content_block_stop", "index": 0}, "content_block_stop"),
            render_event({"type": "message_delta", "delta": {"stop_reason": "tool_use"}}, "message_delta"),
            render_event({"type": "message_stop"}, "message_stop"),
        ]
    bad = json.dumps({"cmd": "alembic downgrade 0123456789ab"})
    out = _run(ToolCallStreamGuard("messages", check, "block"), evs(bad))
    assert [parse_event(o).event for o in out] == ["message_start", "error"]
    out = _run(ToolCallStreamGuard("messages", check, "annotate"), evs(bad))
    types = [parse_event(o).json()["type"] for o in out]
    assert types.count("content_block_start") == 2 and types[-2:] == ["message_delta", "message_stop"]
    out = _run(ToolCallStreamGuard("messages", check, "warn"), evs(bad))
    assert out == evs(bad)


def _responses_stream(arg: str) -> list[bytes]:
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "bash", "arguments": ""}
    done = {**call, "arguments": arg, "status": "completed"}
    evs = [
        {"type": "response.created", "response": {"id": "resp_1", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": call},
        {"type": "response.function_call_arguments.delta", "output_index": 0, "item_id": "fc_1", "delta": arg},
        {"type": "response.function_call_arguments.done", "output_index": 0, "item_id": "fc_1", "arguments": arg},
        {"type": "response.output_item.done", "output_index": 0, "item": done},
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "output": [done]}},
    ]
    return [render_event({**e, "sequence_number": n}, e["type"]) for n, e in enumerate(evs)]


def test_responses_stream_annotate_adds_a_message_item_and_keeps_numbering() -> None:
    bad = json.dumps({"cmd": "alembic downgrade 0123456789ab"})
    evs = _responses_stream(bad)
    out = [parse_event(o) for o in _run(ToolCallStreamGuard("responses", check, "annotate"), evs)]
    objs = [o.json() for o in out]
    assert [o.event for o in out] == [o["type"] for o in objs]  # every event keeps its event: line
    assert [o["sequence_number"] for o in objs] == list(range(len(objs)))  # consecutive, as upstream's
    assert out[:5] == [parse_event(e) for e in evs[:5]]  # the tool call itself passes unchanged
    types = [o["type"] for o in objs[5:]]
    assert types == ["response.output_item.added", "response.content_part.added", "response.output_text.delta",
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     "response.completed"]
    note = objs[-2]["item"]
    assert objs[5]["output_index"] == objs[-2]["output_index"] == 1 and note["role"] == "assistant"
    text = note["content"][0]["text"]
    assert text.startswith("[compaction-gate warning]") and "0123456789ab" in text and "3f9a1c2b7d4e" in text
    assert objs[-1]["response"]["output"] == [json.loads(evs[4].split(b"data: ", 1)[1])["item"], note]
    # warn passes the stream through unchanged
    assert _run(ToolCallStreamGuard("responses", check, "warn"), evs) == evs


def test_responses_stream_block_ends_with_a_completed_response_without_the_call() -> None:
    """A blocked Responses stream is not cut short with a bare error event (Codex CLI
    retries a stream that ends without response.completed, five times): the call becomes
    an assistant message item at its index and the stream ends with its own
    response.completed, whose output lists the message instead of the call."""
    bad = json.dumps({"cmd": "alembic downgrade 0123456789ab"})
    evs = _responses_stream(bad)
    g = ToolCallStreamGuard("responses", check, "block")
    out = [parse_event(o) for o in _run(g, evs)]
    objs = [o.json() for o in out]
    assert g.found and not g.blocked
    assert [o.event for o in out] == [o["type"] for o in objs]
    assert [o["type"] for o in objs] == [
        "response.created", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    assert [o["sequence_number"] for o in objs] == list(range(len(objs)))
    assert not any("function_call" in json.dumps(o) for o in objs)  # nothing an agent could execute
    message = objs[-2]["item"]
    assert objs[1]["output_index"] == objs[-2]["output_index"] == 0
    text = message["content"][0]["text"]
    assert text.startswith("[compaction-gate]") and "0123456789ab" in text and "3f9a1c2b7d4e" in text
    assert objs[-1]["response"]["status"] == "completed" and objs[-1]["response"]["output"] == [message]


def test_responses_stream_block_keeps_the_text_before_the_call() -> None:
    bad = json.dumps({"cmd": "alembic downgrade 0123456789ab"})
    evs = _responses_stream(bad)
    msg = {"id": "msg_0", "type": "message", "role": "assistant", "status": "completed",
           "content": [{"type": "output_text", "text": "Rolling back.", "annotations": []}]}
    pre = [render_event({"type": "response.output_item.done", "output_index": 0, "item": msg}, "response.output_item.done")]
    shifted = []
    for e in evs[1:]:
        o = parse_event(e).json()
        if isinstance(o.get("output_index"), int):
            o["output_index"] += 1
        if o["type"] == "response.completed":
            o["response"]["output"] = [msg, *o["response"]["output"]]
        shifted.append(render_event(o, o["type"]))
    out = [parse_event(x).json() for x in _run(ToolCallStreamGuard("responses", check, "block"), [evs[0], *pre, *shifted])]
    final = out[-1]["response"]["output"]
    assert final[0] == msg and final[1]["id"] == "msg_compaction_gate_1" and len(final) == 2


def test_responses_stream_clean_call_is_not_annotated() -> None:
    evs = _responses_stream(json.dumps({"cmd": "alembic downgrade 3f9a1c2b7d4e"}))
    assert _run(ToolCallStreamGuard("responses", check, "annotate"), evs) == evs
