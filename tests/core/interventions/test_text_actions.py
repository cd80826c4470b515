"""Commands an assistant reply suggests in shell-fenced blocks are the next action of an
agent without a tool role (aider): the tripwire checks them as it checks tool calls."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.interventions.sse import parse_event, render_event
from proxy.core.interventions.text_actions import commands_in_text
from proxy.core.interventions.tripwire import block_json, suggested_calls
from proxy.core.interventions.tripwire_stream import ToolCallStreamGuard
from tests.core.interventions.test_tripwire import _run, check

INVENTED, KNOWN = "0123456789ab", "3f9a1c2b7d4e"
REPLY = f"Rolling back the migration:\n\n```bash\nalembic downgrade {INVENTED}\n```\n"


def test_shell_fences_are_commands_other_fences_are_not() -> None:
    text = (
        "Run:\n```bash\nalembic downgrade abc\n```\nOutput looks like:\n```\nrevision abc\n```\n"
        "Code:\n```python\nprint('x')\n```\n~~~~ console\n$ kubectl get pods\n~~~~\n"
    )
    assert commands_in_text(text) == ["alembic downgrade abc", "$ kubectl get pods"]
    # an open fence runs to the end of the reply; an empty block is no command
    assert commands_in_text("```sh\ngit reset --hard 1a2b3c4\n") == ["git reset --hard 1a2b3c4"]
    assert commands_in_text("```bash\n\n```") == []
    # a shorter closing fence does not close a longer one
    assert commands_in_text("````bash\nx\n```\ny\n````") == ["x\n```\ny"]


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="`~\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), min_size=1), min_size=1, max_size=4))
def test_every_shell_block_is_found_verbatim(lines: list[str]) -> None:
    body = "\n".join(lines)
    text = f"Some prose.\n```shell\n{body}\n```\nmore prose"
    expected = [body] if body.strip() else []
    assert commands_in_text(text) == expected


def test_a_suggested_invented_value_is_found_and_a_json_block_removes_the_suggestion() -> None:
    assert check(suggested_calls(f"```bash\nalembic downgrade {KNOWN}\n```")) == []
    found = check(suggested_calls(REPLY))
    assert [h.value for h in found] == [INVENTED]
    anth = {"content": [{"type": "text", "text": REPLY}], "stop_reason": "end_turn"}
    blocked = block_json("messages", anth, "stopped", drop_text=True)
    assert INVENTED not in json.dumps(blocked) and blocked["content"][-1]["text"] == "[compaction-gate] stopped"
    resp = {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": REPLY}]}]}
    assert INVENTED not in json.dumps(block_json("responses", resp, "stopped", drop_text=True))


def _chat_text_stream(text: str) -> list[bytes]:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    half = len(text) // 2
    return [
        render_event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text[:half]}, "finish_reason": None}]}),
        render_event({**base, "choices": [{"index": 0, "delta": {"content": text[half:]}, "finish_reason": None}]}),
        render_event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        b"data: [DONE]\n\n",
    ]


def _chat_text(out: list[bytes]) -> str:
    parts = []
    for e in out:
        obj = parse_event(e).json()
        if isinstance(obj, dict):
            parts += [ch["delta"].get("content") or "" for ch in obj.get("choices") or ()]
    return "".join(parts)


def test_streamed_text_is_never_held_and_a_finding_is_flagged_before_the_end() -> None:
    evs = _chat_text_stream(REPLY)
    g = ToolCallStreamGuard("chat", check, "block")
    first = g.feed(evs[0])
    assert first == [evs[0]]  # text passes as it arrives
    out = first + [e for ev in evs[1:] for e in g.feed(ev)] + g.finish()
    assert [h.value for h in g.found] == [INVENTED] and not g.blocked
    text = _chat_text(out)
    assert text.startswith(REPLY) and "Do not run it." in text and KNOWN in text
    assert parse_event(out[-2]).json()["choices"][0]["finish_reason"] == "stop" and out[-1] == b"data: [DONE]\n\n"
    # warn: reported, the stream unchanged
    w = ToolCallStreamGuard("chat", check, "warn")
    assert _run(w, evs) == evs and [h.value for h in w.found] == [INVENTED]
    # a known value: nothing
    clean = _chat_text_stream(REPLY.replace(INVENTED, KNOWN))
    assert _run(ToolCallStreamGuard("chat", check, "block"), clean) == clean


def test_anthropic_and_responses_streams_flag_suggested_commands() -> None:
    anth = [
        render_event({"type": "message_start", "message": {"id": "m", "content": []}}, "message_start"),
        render_event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}, "content_block_start"),
        render_event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": REPLY}}, "content_block_delta"),
        render_event({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        render_event({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}, "message_delta"),
        render_event({"type": "message_stop"}, "message_stop"),
    ]
    g = ToolCallStreamGuard("messages", check, "annotate")
    out = _run(g, anth)
    notes = [parse_event(e).json() for e in out if b"Do not run it." in e]
    assert g.found and notes and notes[0]["index"] == 1
    resp = [
        render_event({"type": "response.output_text.delta", "item_id": "m", "output_index": 0, "delta": REPLY, "sequence_number": 1}, "response.output_text.delta"),
        render_event({"type": "response.completed", "response": {"output": [{"type": "message"}]}, "sequence_number": 2}, "response.completed"),
    ]
    r = ToolCallStreamGuard("responses", check, "block")
    out = _run(r, resp)
    final = parse_event(out[-1]).json()
    assert r.found and final["type"] == "response.completed" and len(final["response"]["output"]) == 2
    assert "Do not run it." in json.dumps(final)
