"""Agent conversations for the stateful fuzz (``tests/server/test_fuzz_conversations.py``):
a tool loop whose results carry opaque identifiers, the transitions clients really make
(append, compaction to a summary, head truncation, edits, regenerations, summarization
requests) and hostile shapes (wrong types, unknown parts, broken tool-call arguments),
rendered as OpenAI chat, Anthropic messages or Responses input."""

from __future__ import annotations

import copy
import json
import random
import uuid
from typing import Any

Msg = dict[str, Any]

#: How many kinds of step :func:`mutate` knows.
STEPS = 14


def ident(r: random.Random) -> str:
    """One identifier-like value of a kind agents meet (or a hostile look-alike)."""
    k = r.randrange(9)
    if k == 0:
        return uuid.UUID(int=r.getrandbits(128)).hex
    if k == 1:
        return f"{r.getrandbits(160):040x}"
    if k == 2:
        return f"{r.getrandbits(48):012x}"
    if k == 3:
        return f"arn:aws:s3:::bucket-{r.randrange(10**6)}/obj"
    if k == 4:
        return "upload_" + "".join(r.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(20))
    if k == 5:
        return f"i-{r.getrandbits(68):017x}"
    if k == 6:
        return "".join(chr(r.randrange(32, 0x2FFF)) for _ in range(r.randrange(1, 30)))
    if k == 7:
        return "sk-live-" + "".join(r.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(32))
    return "ghp_" + "".join(r.choice("abcdefghijklmnopqrstuvwxyzABCDEF0123456789") for _ in range(36))


def weird(r: random.Random) -> Any:
    return r.choice([
        None, 0, -1, 1e308, True, [], {}, "", "\x00", "\u2028", [{"type": "zzz"}], [{"type": "text"}],
        [{"type": "text", "text": None}], {"a": [1, {"b": None}]}, "x" * r.randrange(0, 3000),
    ])


def rounds(r: random.Random, n: int, start: int = 0) -> list[Msg]:
    """``n`` tool-loop rounds: a call, its result with identifiers, sometimes a text turn."""
    out: list[Msg] = []
    for i in range(start, start + n):
        cid = f"call_{i}_{r.randrange(10**6)}"
        name = r.choice(["bash", "read_file", "apply_patch", "update_plan", "shell"])
        args = json.dumps({"cmd": f"aws s3 ls {ident(r)}", "n": i})
        out.append({"role": "assistant", "content": None,
                    "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": args}}]})
        words = r.sample(["revision", "upload id", "commit", "bucket", "instance", "etag", "job"], 3)
        out.append({"role": "tool", "tool_call_id": cid, "content": "\n".join(f"{w} {ident(r)}" for w in words)})
        if r.random() < 0.3:
            out += [{"role": "assistant", "content": f"Done step {i}"}, {"role": "user", "content": "continue"}]
    return out


def conversation(r: random.Random, n: int) -> list[Msg]:
    return [{"role": "system", "content": "You are a coding agent. " * r.randrange(1, 4)},
            {"role": "user", "content": f"Fix the deploy; task {r.randrange(1000)}"}] + rounds(r, n)


def _call(m: Msg) -> dict[str, Any] | None:
    calls = m.get("tool_calls")
    if isinstance(calls, list) and calls and isinstance(calls[0], dict) and isinstance(calls[0].get("function"), dict):
        return calls[0]
    return None


def mutate(r: random.Random, msgs: list[Msg], kind: int) -> list[Msg]:
    """The next request's messages after step ``kind`` (0 ≤ kind < :data:`STEPS`)."""
    msgs = copy.deepcopy(msgs)
    system = [m for m in msgs if m.get("role") == "system"]
    body = [m for m in msgs if m.get("role") != "system"]
    if kind == 1:  # compaction to a summary that keeps some identifiers, maybe a tail
        words = [w for m in body for w in str(m.get("content") or "").split() if len(w) > 10]
        keep = r.sample(words, min(len(words), r.randrange(0, 4)))
        tail = body[-r.randrange(1, 4):] if body and r.random() < 0.5 else []
        return system + [{"role": "user", "content": "Summary of the conversation so far: " + " ".join(keep)}] + tail
    if kind == 2:  # head truncation
        return system + body[r.randrange(0, max(1, len(body))):]
    if kind == 3 and body:  # an edited message, of any type
        r.choice(body)["content"] = weird(r)
        return system + body
    if kind == 4 and body:  # the last turn dropped (regenerate)
        return system + body[:-1]
    if kind == 5:  # the agent asks for a summary
        return msgs + [{"role": "user", "content": "Your task is to create a detailed summary of the conversation so far."}]
    if kind == 6 and body:  # an odd field
        r.choice(body)[r.choice(["name", "refusal", "annotations", "reasoning", "tool_calls", "role"])] = weird(r)
        return system + body
    if kind == 7 and body:  # content as parts, one of an unknown type
        m = r.choice(body)
        if isinstance(m.get("content"), str):
            m["content"] = [{"type": "text", "text": m["content"]}, {"type": r.choice(["image_url", "file", "x"]), "x": 1}]
        return system + body
    if kind == 8:  # the last two messages twice
        return msgs + msgs[-2:]
    if kind == 9:  # reordered
        r.shuffle(body)
        return system + body
    if kind == 10:  # broken tool-call arguments
        for m in body:
            call = _call(m)
            if call is not None:
                call["function"]["arguments"] = weird(r) if r.random() < 0.5 else "{not json"
                break
        return system + body
    if kind == 11:  # another system prompt (Claude Code rewrites it at compaction)
        return [{"role": "system", "content": "Compacted. " + ident(r)}] + body
    if kind == 12:  # a different conversation on the same session
        return conversation(r, r.randrange(0, 4))
    if kind == 13:
        return msgs + [{"role": "user", "content": f"use upload id {ident(r)} now"}]
    return msgs + rounds(r, 1, len(body))  # 0, or a step with nothing to work on: append


def _tool_calls(m: Msg) -> list[dict[str, Any]]:
    calls = m.get("tool_calls")
    return [c for c in calls if isinstance(c, dict) and isinstance(c.get("function"), dict)] if isinstance(calls, list) else []


def anthropic_body(msgs: list[Msg], stream: bool) -> dict[str, Any]:
    system = "\n".join(str(m.get("content")) for m in msgs if m.get("role") == "system")
    out: list[Msg] = []
    for m in msgs:
        role = m.get("role")
        if role == "system":
            continue
        if role == "assistant" and _tool_calls(m):
            blocks = []
            for c in _tool_calls(m):
                try:
                    inp = json.loads(c["function"]["arguments"])
                except (TypeError, ValueError):
                    inp = c["function"]["arguments"]
                blocks.append({"type": "tool_use", "id": c.get("id"), "name": c["function"].get("name"), "input": inp})
            out.append({"role": "assistant", "content": blocks})
        elif role == "tool":
            out.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": m.get("content")}]})
        else:
            out.append({"role": role if role in ("user", "assistant") else "user", "content": m.get("content")})
    body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": out, "stream": stream}
    if system:
        body["system"] = system
    return body


def responses_body(msgs: list[Msg], stream: bool) -> dict[str, Any]:
    items: list[Msg] = []
    instructions = None
    for m in msgs:
        role = m.get("role")
        if role == "system":
            instructions = m.get("content")
        elif role == "assistant" and _tool_calls(m):
            items += [{"type": "function_call", "call_id": c.get("id"), "name": c["function"].get("name"),
                       "arguments": c["function"].get("arguments")} for c in _tool_calls(m)]
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id"), "output": m.get("content")})
        else:
            c = m.get("content")
            if isinstance(c, str):
                c = [{"type": "input_text" if role == "user" else "output_text", "text": c}]
            items.append({"type": "message", "role": role, "content": c})
    return {"model": "gpt-5-codex", "instructions": instructions, "input": items, "stream": stream, "store": False}


def request(dialect: str, msgs: list[Msg], stream: bool) -> tuple[str, dict[str, Any]]:
    """The route and body of ``msgs`` in ``dialect`` (chat, anthropic, responses)."""
    if dialect == "anthropic":
        return "/v1/messages", anthropic_body(msgs, stream)
    if dialect == "responses":
        return "/v1/responses", responses_body(msgs, stream)
    return "/v1/chat/completions", {"model": "gpt-4o", "messages": msgs, "stream": stream}
