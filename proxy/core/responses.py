"""The assistant's reply, from a complete response body or reassembled from SSE events.

Covers OpenAI chat completions, the OpenAI Responses API and Anthropic messages, tool
calls included. The reply is normalised exactly like the same turn will be when the
client sends it back in its next request (same :mod:`proxy.core.dialects` code path), so
its digests line up with the next request's history.

Contracts:
- Pure: no I/O; bodies are never mutated. Malformed or unexpected input yields ``None``
  (or is skipped), never an exception: observing a response must not break it.
- :class:`StreamAssembler` only reads the events it is fed; the caller forwards each
  event before or regardless of feeding it, so reassembly never delays the stream.
- A Responses API reply may be several items (reasoning, message, function calls); each
  becomes one :class:`~proxy.core.messages.Message`, as it does in the next ``input``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core.chat_calls import ChatToolCalls
from proxy.core.dialects import from_anthropic, from_openai_chat, from_openai_responses
from proxy.core.messages import Message, MessageFormatError

__all__ = ["Reply", "StreamAssembler", "Usage", "reply_from_json", "usage_from"]


@dataclass(frozen=True, slots=True)
class Usage:
    """Upstream token usage (ground truth). ``input_tokens`` counts everything the model
    read for this request, cached or not."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None

    def as_dict(self) -> dict[str, int | None]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
        }


@dataclass(frozen=True, slots=True)
class Reply:
    """The assistant's turn: its messages (one for chat/Anthropic, one per output item
    for Responses), upstream usage, the model that answered and why it stopped."""

    messages: tuple[Message, ...]
    usage: Usage | None = None
    model: str | None = None
    stop_reason: str | None = None
    complete: bool = True


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def usage_from(api: str, usage: Any) -> Usage | None:
    """Normalise a ``usage`` object of ``api`` (``chat``, ``responses``, ``messages``)."""
    if not isinstance(usage, Mapping):
        return None
    if api == "messages":
        base = _int(usage.get("input_tokens"))
        cw = _int(usage.get("cache_creation_input_tokens")) or 0
        cr = _int(usage.get("cache_read_input_tokens")) or 0
        total = None if base is None else base + cw + cr
        return Usage(total, _int(usage.get("output_tokens")), cr or None)
    if api == "responses":
        det = usage.get("input_tokens_details")
        cached = _int(det.get("cached_tokens")) if isinstance(det, Mapping) else None
        return Usage(_int(usage.get("input_tokens")), _int(usage.get("output_tokens")), cached)
    det = usage.get("prompt_tokens_details")
    cached = _int(det.get("cached_tokens")) if isinstance(det, Mapping) else None
    return Usage(_int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")), cached)


def _chat_message(msg: Mapping[str, Any]) -> tuple[Message, ...]:
    raw = {k: msg.get(k) for k in ("content", "tool_calls", "function_call", "name") if msg.get(k) is not None}
    raw["role"] = "assistant"
    try:
        return from_openai_chat({"messages": [raw]}).messages
    except (MessageFormatError, AttributeError, TypeError):
        return ()


def _anthropic_message(content: Any) -> tuple[Message, ...]:
    try:
        return from_anthropic({"messages": [{"role": "assistant", "content": content}]}).messages
    except (MessageFormatError, AttributeError, TypeError):
        return ()


def _responses_output(output: Any) -> tuple[Message, ...]:
    if not isinstance(output, list):
        return ()
    try:
        return from_openai_responses({"input": output}).messages
    except (MessageFormatError, AttributeError, TypeError):
        return ()


def reply_from_json(api: str, body: Any) -> Reply | None:
    """The reply in a complete (non-streamed) response body of ``api``; ``None`` for an
    error body or anything else without an assistant turn."""
    if not isinstance(body, Mapping) or (body.get("error") and body.get("type") != "message"):
        return None
    model = body.get("model") if isinstance(body.get("model"), str) else None
    if api == "chat":
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            return None
        msg = choices[0].get("message")
        if not isinstance(msg, Mapping):
            return None
        return Reply(_chat_message(msg), usage_from(api, body.get("usage")), model, choices[0].get("finish_reason"))
    if api == "messages":
        if body.get("type") != "message":
            return None
        return Reply(
            _anthropic_message(body.get("content") or []),
            usage_from(api, body.get("usage")),
            model,
            body.get("stop_reason"),
        )
    if api == "responses":
        if body.get("object") not in (None, "response") or "output" not in body:
            return None
        return Reply(
            _responses_output(body.get("output")),
            usage_from(api, body.get("usage")),
            model,
            body.get("status"),
        )
    return None


# --------------------------------------------------------------------------- streaming


def _sse_data(raw_event: bytes) -> tuple[str | None, str | None]:
    """``(event name, data)`` of one raw SSE event (data lines joined by newlines)."""
    name: str | None = None
    data: list[str] = []
    for line in raw_event.decode("utf-8", "replace").splitlines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" ") if line[5:6] == " " else line[5:])
        elif line.startswith("event:"):
            name = line[6:].strip()
    return name, ("\n".join(data) if data else None)


def anthropic_blocks(blocks: Mapping[int, dict[str, Any]], *, keep_cut_input: bool) -> list[dict[str, Any]]:
    """The content blocks of a streamed Anthropic message, by index: each block as it
    started, its streamed ``input_json_delta`` parts (held under ``_json``) parsed into
    ``input``. Input that is not JSON (cut short) stays its raw text with
    ``keep_cut_input``, else becomes ``{}``."""
    out: list[dict[str, Any]] = []
    for _, block in sorted(blocks.items()):
        b = {k: v for k, v in block.items() if k != "_json"}
        if block.get("_json"):
            text = "".join(block["_json"])
            try:
                b["input"] = json.loads(text) if text.strip() else {}
            except ValueError:
                b["input"] = text if keep_cut_input else {}
        out.append(b)
    return out


class StreamAssembler:
    """Incrementally rebuilds the reply from the SSE events of one streamed response.

    Feed every complete event with :meth:`feed` (cheap: one ``json.loads`` per event);
    call :meth:`result` after the stream ended. A stream cut short yields what arrived,
    with ``complete=False``.
    """

    def __init__(self, api: str) -> None:
        self.api = api
        self.model: str | None = None
        self.stop_reason: str | None = None
        self.usage: Usage | None = None
        self.done = False
        # chat
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._tools = ChatToolCalls()
        # anthropic
        self._blocks: dict[int, dict[str, Any]] = {}
        self._a_usage: dict[str, Any] = {}
        # responses
        self._items: dict[int, Any] = {}
        self._final_output: list[Any] | None = None

    def feed(self, raw_event: bytes) -> None:
        name, data = _sse_data(raw_event)
        if data is None:
            return
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(data)
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        try:
            if self.api == "chat":
                self._feed_chat(obj)
            elif self.api == "messages":
                self._feed_anthropic(obj.get("type") or name, obj)
            elif self.api == "responses":
                self._feed_responses(obj.get("type") or name, obj)
        except (AttributeError, TypeError, KeyError, ValueError):
            return  # malformed event: skip it, never break the stream

    # -- OpenAI chat

    def _feed_chat(self, obj: dict[str, Any]) -> None:
        if isinstance(obj.get("model"), str):
            self.model = obj["model"]
        if obj.get("usage"):
            self.usage = usage_from("chat", obj["usage"])
        for ch in obj.get("choices") or ():
            if ch.get("index", 0) != 0:
                continue
            delta = ch.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self._text.append(delta["content"])
            if isinstance(delta.get("refusal"), str):
                self._refusal.append(delta["refusal"])
            self._tools.add(delta)
            if ch.get("finish_reason"):
                self.stop_reason = ch["finish_reason"]
                self.done = True

    # -- Anthropic

    def _feed_anthropic(self, kind: Any, obj: dict[str, Any]) -> None:
        if kind == "message_start":
            msg = obj.get("message") or {}
            self.model = msg.get("model") if isinstance(msg.get("model"), str) else self.model
            if isinstance(msg.get("usage"), Mapping):
                self._a_usage.update(msg["usage"])
        elif kind == "content_block_start":
            block = dict(obj.get("content_block") or {})
            block["_json"] = []
            self._blocks[int(obj.get("index", len(self._blocks)))] = block
        elif kind == "content_block_delta":
            block = self._blocks.setdefault(int(obj.get("index", 0)), {"type": "text", "text": "", "_json": []})
            delta = obj.get("delta") or {}
            dt = delta.get("type")
            if dt == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif dt == "input_json_delta":
                block["_json"].append(delta.get("partial_json", ""))
            elif dt == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            elif dt == "signature_delta":
                block["signature"] = block.get("signature", "") + delta.get("signature", "")
        elif kind == "message_delta":
            delta = obj.get("delta") or {}
            if delta.get("stop_reason"):
                self.stop_reason = delta["stop_reason"]
            if isinstance(obj.get("usage"), Mapping):
                self._a_usage.update({k: v for k, v in obj["usage"].items() if v is not None})
        elif kind == "message_stop":
            self.done = True

    def _anthropic_content(self) -> list[dict[str, Any]]:
        return anthropic_blocks(self._blocks, keep_cut_input=True)

    # -- Responses

    def _feed_responses(self, kind: Any, obj: dict[str, Any]) -> None:
        if kind in ("response.created", "response.in_progress"):
            resp = obj.get("response") or {}
            if isinstance(resp.get("model"), str):
                self.model = resp["model"]
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = obj.get("item")
            if isinstance(item, Mapping):
                self._items[int(obj.get("output_index", len(self._items)))] = item
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            resp = obj.get("response") or {}
            if isinstance(resp.get("model"), str):
                self.model = resp["model"]
            if isinstance(resp.get("output"), list) and resp["output"]:
                self._final_output = resp["output"]
            self.usage = usage_from("responses", resp.get("usage")) or self.usage
            self.stop_reason = resp.get("status") if isinstance(resp.get("status"), str) else kind
            self.done = True

    # -- result

    def result(self) -> Reply | None:
        """The reply assembled so far (``complete`` tells whether the stream ended)."""
        msgs: tuple[Message, ...]
        if self.api == "chat":
            raw: dict[str, Any] = {}
            if self._text:
                raw["content"] = "".join(self._text)
            elif self._refusal:
                raw["content"] = "".join(self._refusal)
            if self._tools:
                raw["tool_calls"] = self._tools.as_message_field()
            if not raw:
                return None
            msgs = _chat_message(raw)
        elif self.api == "messages":
            if not self._blocks:
                return None
            msgs = _anthropic_message(self._anthropic_content())
            if self._a_usage:
                self.usage = usage_from("messages", self._a_usage)
        elif self.api == "responses":
            output = self._final_output or [v for _, v in sorted(self._items.items())]
            if not output:
                return None
            msgs = _responses_output(output)
        else:
            return None
        return Reply(msgs, self.usage, self.model, self.stop_reason, complete=self.done)
