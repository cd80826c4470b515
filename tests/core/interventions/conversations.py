"""Tiny per-dialect history builders for the intervention tests (turn lists → bodies)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

# A turn is ("user", text) | ("assistant", text) | ("calls", [(id, name, args, result), ...])
Turn = tuple[str, Any]


def chat(turns: Sequence[Turn], system: str | None = "You are an agent.") -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for kind, val in turns:
        if kind in ("user", "assistant"):
            msgs.append({"role": kind, "content": val})
        else:
            msgs.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                        for cid, name, args, _ in val
                    ],
                }
            )
            for cid, _, _, result in val:
                msgs.append({"role": "tool", "tool_call_id": cid, "content": result})
    return {"model": "gpt-4o", "messages": msgs}


def responses(turns: Sequence[Turn], reasoning: bool = True) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for kind, val in turns:
        if kind == "user":
            items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": val}]})
        elif kind == "assistant":
            items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": val}]})
        else:
            if reasoning:
                items.append({"type": "reasoning", "id": f"rs_{val[0][0]}", "summary": []})
            for cid, name, args, _ in val:
                items.append({"type": "function_call", "call_id": cid, "name": name, "arguments": json.dumps(args)})
            for cid, _, _, result in val:
                items.append({"type": "function_call_output", "call_id": cid, "output": result})
    return {"model": "gpt-4o", "instructions": "You are an agent.", "input": items}


def anthropic(turns: Sequence[Turn]) -> dict[str, Any]:
    """Consecutive same-role turns are merged so the list alternates, as real clients do."""
    msgs: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if msgs and msgs[-1]["role"] == role:
            msgs[-1]["content"].extend(blocks)
        else:
            msgs.append({"role": role, "content": blocks})

    for kind, val in turns:
        if kind in ("user", "assistant"):
            add(kind, [{"type": "text", "text": val}])
        else:
            add("assistant", [{"type": "tool_use", "id": cid, "name": name, "input": args} for cid, name, args, _ in val])
            add("user", [{"type": "tool_result", "tool_use_id": cid, "content": result} for cid, _, _, result in val])
    if not msgs or msgs[0]["role"] != "user":
        msgs.insert(0, {"role": "user", "content": [{"type": "text", "text": "start"}]})
    # tool_result blocks must lead a user message: move merged text after them
    for m in msgs:
        if m["role"] == "user":
            m["content"].sort(key=lambda b: 0 if b["type"] == "tool_result" else 1)
    return {"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": "You are an agent.", "messages": msgs}
