"""The pattern benchmark's client: what it sends back is what the model said, in the
shapes real clients use (the benchmark measures nothing else)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.patterns import PatternAgent, reassemble, reserialise  # noqa: E402

REPLY = {"role": "assistant", "content": None, "refusal": None, "annotations": [],
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "bash", "arguments": '{"cmd":"ls -la","timeout":30}'}}]}


def _sse(*deltas: dict) -> bytes:
    lines = [f"data: {json.dumps({'choices': [{'index': 0, 'delta': d}]})}\n\n" for d in deltas]
    return ("".join(lines) + "data: [DONE]\n\n").encode()


def test_reassemble_accumulates_content_and_tool_call_deltas() -> None:
    raw = _sse({"role": "assistant", "content": "", "refusal": None}, {"content": "ok"},
               {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                "function": {"name": "bash", "arguments": ""}}]},
               {"tool_calls": [{"index": 0, "function": {"arguments": '{"cmd":'}}]},
               {"tool_calls": [{"index": 0, "function": {"arguments": '"ls"}'}}]})
    msg = reassemble(raw)
    assert msg["content"] == "ok"
    assert msg["tool_calls"] == [{"id": "call_1", "type": "function",
                                  "function": {"name": "bash", "arguments": '{"cmd":"ls"}'}}]


def test_reserialise_changes_only_the_form() -> None:
    out = reserialise(REPLY)
    assert list(out) == ["tool_calls", "content", "role"]  # another order, fields dropped
    assert out["content"] == ""
    args = out["tool_calls"][0]["function"]["arguments"]
    assert args != REPLY["tool_calls"][0]["function"]["arguments"]
    assert json.loads(args) == {"cmd": "ls -la", "timeout": 30}
    assert out["tool_calls"][0]["id"] == "call_1"


def test_agents_take_the_reply_their_way() -> None:
    raw = json.dumps({"choices": [{"message": REPLY}]}).encode()
    echo, replaced, reser = (PatternAgent(1, 6, p, False) for p in ("echo", "replaced", "reserialised"))
    n = len(echo.messages)
    for a in (echo, replaced, reser):
        a.take(raw)
        assert len(a.messages) == n + 2 and a.messages[-1]["role"] == "tool"
    assert echo.messages[-2] == REPLY and echo.messages[-1]["tool_call_id"] == "call_1"
    assert reser.messages[-2] == reserialise(REPLY)
    assert replaced.messages[-2]["tool_calls"][0]["id"] != "call_1"  # its own call instead
    assert replaced.messages[-1]["tool_call_id"] == replaced.messages[-2]["tool_calls"][0]["id"]
    assert json.loads(echo.next_body())["messages"] == echo.messages
    assert json.loads(PatternAgent(1, 6, "echo", True).next_body())["stream"] is True
