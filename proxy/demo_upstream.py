"""A scripted stand-in for a model, speaking the real OpenAI chat-completions wire format.

Used by ``compaction-gate demo`` (and tests) so the migration story runs with no API key
and no network. It behaves like a small, deterministic agent model:

- **Summarization requests** (the last user message carries a known summarization
  marker) get a *lossy* summary, the way real summarizers tend to write them: it keeps
  the goal and the open obligation ("roll back if the smoke tests fail") but drops the
  opaque revision id. It ignores any binding contract added to the request, so a gate
  that checks the summary has something to repair.
- **A request to roll back** gets a ``run_shell`` tool call ``alembic downgrade REV``
  where ``REV`` is the migration revision it finds in its context (system prompt and
  every message). When none is there it invents a plausible one, as a real model
  does — that is the failure the gate exists to prevent.
- **A user message quoting a command in backticks** gets a ``run_shell`` tool call
  running exactly that command.
- **A tool result** gets a one-line acknowledgement.
- **The gate's recall tool** (``recall_compacted_context``, when the proxy offers it):
  asked to roll back with no revision in its context, the model calls it with the
  handle its description names; given the recalled region, it rolls back to the
  revision the region names.

``POST /v1/chat/completions`` (streamed or not), ``GET /v1/models``. Responses carry a
``usage`` estimate (about four characters per token). The logic is in pure functions
(:func:`reply_for`) so it can be tested without a server.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = [
    "DEMO_MODEL",
    "ROLLBACK_PHRASES",
    "SUMMARIZE_MARKERS",
    "Reply",
    "create_app",
    "find_revision",
    "invented_revision",
    "reply_for",
]

DEMO_MODEL = "gpt-4o-mini"

#: Markers of summarization requests (Claude Code, Codex, generic).
SUMMARIZE_MARKERS: tuple[str, ...] = (
    "your task is to create a detailed summary of the conversation so far",
    "context checkpoint compaction",
    "summarize the conversation",
    "summary of the conversation",
)

ROLLBACK_PHRASES: tuple[str, ...] = ("roll back", "rollback", "roll the migration back")

_REVISION_NEAR = re.compile(r"\brevision[\s:=`'\"]+([0-9a-f]{12})\b", re.IGNORECASE)
_HEX12 = re.compile(r"(?<![0-9a-zA-Z_-])([0-9a-f]{12})(?![0-9a-zA-Z_-])")
_BACKTICK = re.compile(r"`([^`\n]+)`")
_HANDLE = re.compile(r"spill_[A-Za-z0-9_-]{20,}")
RECALL_PREFIX = "recall_compacted_context"


def _recall_tool(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """The gate's recall tool among the offered ones: (its name, the newest handle)."""
    for tool in body.get("tools") or ():
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping) or not str(fn.get("name", "")).startswith(RECALL_PREFIX):
            continue
        handle = _HANDLE.search(str(fn.get("description") or ""))
        if handle:
            return str(fn["name"]), handle.group(0)
    return None


def _answers_recall(messages: Sequence[Mapping[str, Any]], call_id: Any) -> bool:
    for m in messages:
        for call in m.get("tool_calls") or []:
            if isinstance(call, Mapping) and call.get("id") == call_id:
                return str((call.get("function") or {}).get("name", "")).startswith(RECALL_PREFIX)
    return False


@dataclass(frozen=True)
class Reply:
    """What the scripted model answers: text, or one ``run_shell`` tool call."""

    text: str | None = None
    command: str | None = None
    #: a call of another tool than ``run_shell`` (the recall tool): its name and arguments
    tool: str | None = None
    arguments: Mapping[str, Any] | None = None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out: list[str] = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    out.append(text)
            elif isinstance(part, str):
                out.append(part)
        return "\n".join(out)
    return ""


def _message_text(message: Mapping[str, Any]) -> str:
    text = _content_text(message.get("content"))
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            fn = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping) and isinstance(fn.get("arguments"), str):
                text += "\n" + fn["arguments"]
    return text


def find_revision(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The migration revision visible in ``messages``, preferring one named "revision".

    The last user message (the instruction being answered) is not searched.
    """
    context = list(messages)
    if context and context[-1].get("role") == "user":
        context = context[:-1]
    texts = [_message_text(m) for m in context]
    for text in texts:
        match = _REVISION_NEAR.search(text)
        if match:
            return match.group(1).lower()
    for text in texts:
        match = _HEX12.search(text)
        if match:
            return match.group(1).lower()
    return None


def invented_revision(messages: Sequence[Mapping[str, Any]]) -> str:
    """A plausible, deterministic, *wrong* revision, as a model would make one up."""
    seed = "".join(_message_text(m) for m in messages if m.get("role") == "system")
    return hashlib.sha256(("invented:" + seed).encode()).hexdigest()[:12]


def _lossy_summary(messages: Sequence[Mapping[str, Any]]) -> str:
    commands: list[str] = []
    for m in messages:
        for call in m.get("tool_calls") or []:
            try:
                args = json.loads(call["function"]["arguments"])
                commands.append(str(args.get("command", "")))
            except (KeyError, TypeError, ValueError):
                continue
    steps = "\n".join(f"   - ran {c.split()[0]} ({_describe(c)})" for c in commands if c)
    return (
        "Summary of the conversation so far:\n"
        "1. Primary request: apply the pending database migration for the orders service, "
        "run the smoke tests, and roll the migration back to the previous revision if "
        "anything fails.\n"
        f"2. Work done:\n{steps}\n"
        "3. State: the migration was applied successfully; smoke tests and log checks are "
        "in progress.\n"
        "4. Pending: if the smoke tests fail, roll the migration back to the revision that "
        "was current before the upgrade."
    )


def _describe(command: str) -> str:
    if command.startswith("alembic upgrade"):
        return "migration applied"
    if command.startswith("pytest"):
        return "smoke tests"
    if command.startswith(("tail", "cat", "grep")):
        return "read logs"
    if command.startswith("kubectl"):
        return "checked the deployment"
    return "shell command"


def reply_for(body: Mapping[str, Any]) -> Reply:
    """Decide the scripted model's answer to one chat-completions request body."""
    raw = body.get("messages")
    messages: list[Mapping[str, Any]] = [m for m in raw if isinstance(m, Mapping)] if isinstance(raw, list) else []
    if not messages:
        return Reply(text="Hello. What should I do?")
    last = messages[-1]
    if last.get("role") == "tool" and _answers_recall(messages, last.get("tool_call_id")):
        recalled = _content_text(last.get("content"))
        found = find_revision([{"role": "tool", "content": recalled}, {"role": "user", "content": ""}])
        return Reply(command=f"alembic downgrade {found or invented_revision(messages)}")
    if last.get("role") == "tool":
        first = _content_text(last.get("content")).strip().splitlines()
        return Reply(text="Done. " + (first[0][:160] if first else "No output."))
    # the instruction is the user's last message; a note the gate appended after it is
    # context, not an instruction
    asks = [m for m in messages if m.get("role") == "user" and not _message_text(m).startswith("[compaction-gate")]
    instruction = _message_text(asks[-1] if asks and last.get("role") == "user" else last)
    lowered = instruction.lower()
    if any(marker in lowered for marker in SUMMARIZE_MARKERS):
        return Reply(text=_lossy_summary(messages))
    if any(phrase in lowered for phrase in ROLLBACK_PHRASES):
        revision = find_revision(messages)
        recall = _recall_tool(body)
        if revision is None and recall is not None:
            return Reply(tool=recall[0], arguments={"handle": recall[1]})
        return Reply(command=f"alembic downgrade {revision or invented_revision(messages)}")
    quoted = _BACKTICK.search(instruction)
    if quoted:
        return Reply(command=quoted.group(1).strip())
    return Reply(text="Understood.")


def _estimate_tokens(body: Mapping[str, Any]) -> int:
    msgs = body.get("messages")
    chars = sum(len(_message_text(m)) for m in msgs if isinstance(m, Mapping)) if isinstance(msgs, list) else 0
    return max(1, chars // 4)


def _completion(body: Mapping[str, Any], reply: Reply, seq: int) -> dict[str, Any]:
    model = str(body.get("model") or DEMO_MODEL)
    message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
    finish = "stop"
    completion_tokens = max(1, len(reply.text or "") // 4)
    if reply.command is not None or reply.tool is not None:
        name, args = ("run_shell", {"command": reply.command}) if reply.tool is None else (reply.tool, dict(reply.arguments or {}))
        message["content"] = None
        message["tool_calls"] = [
            {
                "id": f"call_demo_{seq:04d}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ]
        finish = "tool_calls"
        completion_tokens = 12
    prompt_tokens = _estimate_tokens(body)
    return {
        "id": f"chatcmpl-demo{seq:06d}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        "system_fingerprint": "fp_demo",
    }


def _chunks(completion: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The streamed form of ``completion``: role, content or tool call, finish, usage."""
    base = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    message = choice["message"]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    if message.get("tool_calls"):
        call = message["tool_calls"][0]
        deltas.append(
            {"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                             "function": {"name": call["function"]["name"], "arguments": ""}}]}
        )
        deltas.append(
            {"tool_calls": [{"index": 0, "function": {"arguments": call["function"]["arguments"]}}]}
        )
    else:
        text = message.get("content") or ""
        for i in range(0, len(text), 48):
            deltas.append({"content": text[i : i + 48]})
    chunks = [
        {**base, "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}]}
        for d in deltas
    ]
    chunks.append(
        {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                              "finish_reason": choice["finish_reason"]}]}
    )
    if include_usage:
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return chunks


_SEQ: web.AppKey[list[int]] = web.AppKey("demo_upstream_seq", list)


async def _chat(request: web.Request) -> web.StreamResponse:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        return web.json_response(
            {"error": {"message": "invalid JSON body", "type": "invalid_request_error",
                       "param": None, "code": None}},
            status=400,
        )
    if not isinstance(body, dict):
        return web.json_response(
            {"error": {"message": "body must be an object", "type": "invalid_request_error",
                       "param": None, "code": None}},
            status=400,
        )
    counter = request.app[_SEQ]
    counter[0] += 1
    completion = _completion(body, reply_for(body), counter[0])
    if not body.get("stream"):
        return web.json_response(completion, headers={"x-request-id": f"req_demo_{counter[0]}"})
    options = body.get("stream_options")
    include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                 "x-request-id": f"req_demo_{counter[0]}"}
    )
    await response.prepare(request)
    for chunk in _chunks(completion, include_usage):
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def _models(request: web.Request) -> web.Response:
    return web.json_response(
        {"object": "list",
         "data": [{"id": DEMO_MODEL, "object": "model", "created": 0, "owned_by": "compaction-gate-demo"}]}
    )


def create_app() -> web.Application:
    """The scripted upstream as an aiohttp application (mount it at the base URL ``/v1``)."""
    app = web.Application()
    app[_SEQ] = [0]
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_get("/v1/models", _models)
    return app
