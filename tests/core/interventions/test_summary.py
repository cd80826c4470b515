from __future__ import annotations

import json

import pytest

from proxy.core.interventions import Binding, SummaryStreamPatcher, patch_summary_json
from proxy.core.interventions.sse import parse_event, render_event
from proxy.core.interventions.summary import SECTION_OPEN, response_text

REV = Binding("3f9a1c2b7d4e", "migration_revision", "alembic upgrade")
KEPT = Binding("9fceb02d0ae5", "git_sha", "git log")


def chat_json(text: str) -> bytes:
    return json.dumps(
        {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
    ).encode()


def anth_json(text: str) -> bytes:
    return json.dumps({"id": "msg", "type": "message", "role": "assistant", "model": "c",
                       "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}).encode()


def resp_json(text: str) -> bytes:
    return json.dumps({"id": "resp", "object": "response", "output": [
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": text, "annotations": []}]}]}).encode()


@pytest.mark.parametrize("api,make", [("chat", chat_json), ("messages", anth_json), ("responses", resp_json)])
def test_json_summary_gets_missing_section(api, make) -> None:
    body = make("We migrated; commit 9fceb02d0ae5 is kept.")
    out, appended = patch_summary_json(api, body, [REV, KEPT])
    assert appended == [REV]
    text = response_text(api, json.loads(out))
    assert text.startswith("We migrated;") and SECTION_OPEN in text and REV.value in text


@pytest.mark.parametrize("api,make", [("chat", chat_json), ("messages", anth_json), ("responses", resp_json)])
def test_json_summary_complete_is_byte_identical(api, make) -> None:
    body = make("rev 3f9a1c2b7d4e and 9fceb02d0ae5")
    out, appended = patch_summary_json(api, body, [REV, KEPT])
    assert out is body and appended == []


def run(p: SummaryStreamPatcher, events: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for e in events:
        out += p.feed(e)
    return out + p.finish()


def chat_stream(pieces: list[str], finish_with_content: bool = False) -> list[bytes]:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    evs = [render_event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})]
    for i, p in enumerate(pieces):
        last = finish_with_content and i == len(pieces) - 1
        evs.append(render_event({**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": "stop" if last else None}]}))
    if not finish_with_content:
        evs.append(render_event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    evs.append(render_event({**base, "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}))
    evs.append(b"data: [DONE]\n\n")
    return evs


@pytest.mark.parametrize("finish_with_content", [False, True])
def test_chat_stream_injects_before_finish(finish_with_content) -> None:
    p = SummaryStreamPatcher("chat", [REV])
    out = run(p, chat_stream(["The summary ", "without it."], finish_with_content))
    text, finish_seen_at, section_at = "", None, None
    for i, raw in enumerate(out):
        obj = parse_event(raw).json()
        if not obj or not obj.get("choices"):
            continue
        ch = obj["choices"][0]
        c = ch["delta"].get("content") or ""
        if SECTION_OPEN in c:
            section_at = i
        text += c
        if ch["finish_reason"]:
            finish_seen_at = i
    assert text.startswith("The summary without it.") and REV.value in text
    assert section_at is not None and finish_seen_at is not None and section_at < finish_seen_at
    assert out[-1] == b"data: [DONE]\n\n"
    assert p.appended == [REV]


def test_chat_stream_untouched_when_complete() -> None:
    evs = chat_stream(["rev ", "3f9a1c2b7d4e"])
    assert run(SummaryStreamPatcher("chat", [REV]), evs) == evs


def anth_stream(text: str, tool: bool = False) -> list[bytes]:
    evs = [
        render_event({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "model": "c", "stop_reason": None, "usage": {"input_tokens": 1, "output_tokens": 0}}}, "message_start"),
        render_event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}, "content_block_start"),
        render_event({"type": "ping"}, "ping"),
        render_event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}, "content_block_delta"),
        render_event({"type": "content_block_stop", "index": 0}, "content_block_stop"),
    ]
    if tool:
        evs += [
            render_event({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "bash", "input": {}}}, "content_block_start"),
            render_event({"type": "content_block_stop", "index": 1}, "content_block_stop"),
        ]
    evs += [
        render_event({"type": "ping"}, "ping"),
        render_event({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}, "message_delta"),
        render_event({"type": "message_stop"}, "message_stop"),
    ]
    return evs


def _anth_blocks(out: list[bytes]) -> dict[int, str]:
    blocks: dict[int, str] = {}
    stopped: set[int] = set()
    for raw in out:
        obj = parse_event(raw).json()
        if obj["type"] == "content_block_start":
            blocks[obj["index"]] = obj["content_block"].get("text", "")
        elif obj["type"] == "content_block_delta":
            assert obj["index"] not in stopped
            blocks[obj["index"]] += obj["delta"].get("text", "")
        elif obj["type"] == "content_block_stop":
            stopped.add(obj["index"])
    assert parse_event(out[-1]).json()["type"] == "message_stop"
    assert parse_event(out[-2]).json()["type"] == "message_delta"
    return blocks


def test_anthropic_stream_appends_into_last_text_block() -> None:
    out = run(SummaryStreamPatcher("messages", [REV]), anth_stream("Summary."))
    blocks = _anth_blocks(out)
    assert list(blocks) == [0] and blocks[0].startswith("Summary.") and REV.value in blocks[0]


def test_anthropic_stream_new_block_after_tool_use() -> None:
    out = run(SummaryStreamPatcher("messages", [REV]), anth_stream("Summary.", tool=True))
    blocks = _anth_blocks(out)
    assert sorted(blocks) == [0, 1, 2] and REV.value in blocks[2]


def test_anthropic_stream_untouched_when_complete() -> None:
    evs = anth_stream("rev 3f9a1c2b7d4e")
    assert run(SummaryStreamPatcher("messages", [REV]), evs) == evs


def resp_stream(text: str) -> list[bytes]:
    item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]}
    evs = [
        ("response.created", {"type": "response.created", "sequence_number": 0, "response": {"id": "r", "output": []}}),
        ("response.output_item.added", {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": {**item, "content": [], "status": "in_progress"}}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 2, "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": text}),
        ("response.output_text.done", {"type": "response.output_text.done", "sequence_number": 3, "item_id": "msg_1", "output_index": 0, "content_index": 0, "text": text}),
        ("response.content_part.done", {"type": "response.content_part.done", "sequence_number": 4, "item_id": "msg_1", "output_index": 0, "content_index": 0, "part": item["content"][0]}),
        ("response.output_item.done", {"type": "response.output_item.done", "sequence_number": 5, "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed", "sequence_number": 6, "response": {"id": "r", "status": "completed", "output": [item]}}),
    ]
    return [render_event(d, e) for e, d in evs]


def test_responses_stream_patches_delta_and_snapshots() -> None:
    out = run(SummaryStreamPatcher("responses", [REV]), resp_stream("Summary."))
    objs = [parse_event(r).json() for r in out]
    deltas = "".join(o["delta"] for o in objs if o["type"] == "response.output_text.delta")
    done = next(o for o in objs if o["type"] == "response.output_text.done")
    completed = objs[-1]
    assert deltas == done["text"]
    assert completed["response"]["output"][0]["content"][0]["text"] == done["text"]
    assert REV.value in done["text"] and done["text"].startswith("Summary.")
    seqs = [o["sequence_number"] for o in objs]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def _without(evs: list[bytes], *types: str) -> list[bytes]:
    return [e for e in evs if parse_event(e).event not in types]


@pytest.mark.parametrize("dropped", [
    ("response.output_text.done",),  # a server that never sends it
    ("response.output_text.done", "response.output_text.delta", "response.content_part.done"),  # items only
])
def test_responses_stream_without_text_done_patches_the_item_codex_reads(dropped: tuple[str, ...]) -> None:
    """Codex CLI reads the summary from response.output_item.done; the section must be
    there (and in response.completed) even when no output_text.done is sent."""
    evs = _without(resp_stream("Summary."), *dropped)
    p = SummaryStreamPatcher("responses", [REV, KEPT])
    objs = [parse_event(r).json() for r in run(p, evs)]
    item = next(o for o in objs if o["type"] == "response.output_item.done")["item"]
    text = item["content"][0]["text"]
    assert text.startswith("Summary.") and SECTION_OPEN in text and REV.value in text
    assert objs[-1]["response"]["output"][0]["content"][0]["text"] == text
    assert [b.value for b in p.appended] == [REV.value, KEPT.value]
    deltas = "".join(o["delta"] for o in objs if o["type"] == "response.output_text.delta")
    assert deltas in ("", text)  # streamed deltas add up to the same final text
    seqs = [o["sequence_number"] for o in objs]
    assert seqs == sorted(set(seqs))  # still increasing, no number used twice


def test_responses_stream_with_only_a_completed_event_is_patched() -> None:
    evs = [e for e in resp_stream("Summary.") if parse_event(e).event in ("response.created", "response.completed")]
    objs = [parse_event(r).json() for r in run(SummaryStreamPatcher("responses", [REV]), evs)]
    text = objs[-1]["response"]["output"][0]["content"][0]["text"]
    assert text.startswith("Summary.") and REV.value in text


def test_responses_stream_without_text_done_untouched_when_complete() -> None:
    evs = _without(resp_stream(f"Summary: {REV.value}."), "response.output_text.done")
    assert run(SummaryStreamPatcher("responses", [REV]), evs) == evs
