"""Structural validity of message lists per dialect (what the real APIs enforce)."""

from __future__ import annotations

from typing import Any


def check_chat(msgs: list[dict[str, Any]]) -> None:
    pending: list[str] = []
    for i, m in enumerate(msgs):
        role = m["role"]
        if pending:
            assert role == "tool", f"message {i} ({role}) splits a tool call from its results"
            assert m["tool_call_id"] in pending, f"tool result {m['tool_call_id']} answers no pending call"
            pending.remove(m["tool_call_id"])
            continue
        assert role != "tool", f"orphan tool message at {i}"
        if role == "assistant" and m.get("tool_calls"):
            pending = [tc["id"] for tc in m["tool_calls"]]
    assert not pending, "unanswered tool calls at the end"


def check_responses(items: list[dict[str, Any]]) -> None:
    pending: list[str] = []
    for i, it in enumerate(items):
        typ = it.get("type", "message")
        if typ == "function_call":
            pending.append(it["call_id"])
            continue
        if typ == "function_call_output":
            assert it["call_id"] in pending, f"output {it['call_id']} at {i} without a pending call"
            pending.remove(it["call_id"])
            continue
        assert not pending, f"item {i} ({typ}) splits calls {pending} from their outputs"
    assert not pending


def check_anthropic(msgs: list[dict[str, Any]]) -> None:
    assert msgs and msgs[0]["role"] == "user", "first message must be user"
    pending: list[str] = []
    for i, m in enumerate(msgs):
        if i:
            assert m["role"] != msgs[i - 1]["role"], f"alternation broken at {i}"
        content = m["content"]
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        if m["role"] == "user":
            results = [b for b in blocks if b.get("type") == "tool_result"]
            n_lead = 0
            for b in blocks:
                if b.get("type") == "tool_result":
                    n_lead += 1
                else:
                    break
            assert n_lead == len(results), f"tool_result blocks must come first (message {i})"
            assert sorted(b["tool_use_id"] for b in results) == sorted(pending), f"results do not answer calls at {i}"
            pending = []
        else:
            assert not pending
            pending = [b["id"] for b in blocks if b.get("type") == "tool_use"]
    assert not pending or msgs[-1]["role"] == "assistant"
