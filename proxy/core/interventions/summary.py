"""The summary check (the gate, DESIGN §4.1): after the summarization call, make sure the
summary the client stores holds every contracted binding verbatim.

For JSON responses the body is patched; for streams :class:`SummaryStreamPatcher` passes
events through as they come and injects the verbatim section *before the terminal events*
(OpenAI chat: before the ``finish_reason`` chunk; Responses: before
``response.output_text.done``, whose ``done``/``completed`` snapshots are patched to
match — or, when a server sends no ``output_text.done``, into the message item of
``response.output_item.done`` (what Codex CLI reads) or of the final event's
``response.output``; Anthropic: into the last text block before its ``content_block_stop`` when the next
event is ``message_delta``, otherwise as a new text block), so every SDK accumulates the
same final text the JSON path would return.

Sensitive bindings are never appended in clear (they are not contracted either).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any, Literal

from .bindings import Binding, render_binding_lines
from .sse import DialectStream, SSEEvent, render_event

SummaryApi = Literal["chat", "responses", "messages"]

SECTION_OPEN = "[compaction-gate: verbatim identifiers the summary left out — keep them exactly]"
SECTION_CLOSE = "[/compaction-gate]"


def missing_bindings(text: str, bindings: Sequence[Binding]) -> list[Binding]:
    """Bindings whose value does not occur verbatim in ``text`` (sensitive ones skipped)."""
    seen: set[str] = set()
    out: list[Binding] = []
    for b in bindings:
        if b.sensitive or b.value in seen:
            continue
        seen.add(b.value)
        if b.value not in text:
            out.append(b)
    return out


def verbatim_section(missing: Sequence[Binding]) -> str:
    return "\n\n" + "\n".join([SECTION_OPEN, *render_binding_lines(missing), SECTION_CLOSE]) + "\n"


# --------------------------------------------------------------------------- JSON


def response_text(api: SummaryApi, body: Any) -> str:
    """All assistant text of a non-streamed response."""
    if not isinstance(body, dict):
        return ""
    if api == "chat":
        chunks = []
        for ch in body.get("choices") or ():
            msg = ch.get("message") or {}
            if isinstance(msg.get("content"), str):
                chunks.append(msg["content"])
        return "\n".join(chunks)
    if api == "responses":
        chunks = []
        for item in body.get("output") or ():
            if isinstance(item, dict) and item.get("type") == "message":
                for part in item.get("content") or ():
                    if isinstance(part, dict) and part.get("type") == "output_text":
                        chunks.append(str(part.get("text", "")))
        return "\n".join(chunks)
    chunks = [str(b.get("text", "")) for b in body.get("content") or () if isinstance(b, dict) and b.get("type") == "text"]
    return "\n".join(chunks)


def event_text(api: SummaryApi, obj: dict[str, Any]) -> str:
    """The assistant text one parsed SSE event adds: its dialect's text delta (``""``
    when it adds none)."""
    if api == "chat":
        chunks = []
        for ch in obj.get("choices") or ():
            content = ((ch or {}).get("delta") or {}).get("content") if isinstance(ch, dict) else None
            if isinstance(content, str):
                chunks.append(content)
        return "".join(chunks)
    if api == "responses":
        return str(obj.get("delta", "")) if obj.get("type") == "response.output_text.delta" else ""
    delta = obj.get("delta")
    if obj.get("type") == "content_block_delta" and isinstance(delta, dict) and delta.get("type") == "text_delta":
        return str(delta.get("text", ""))
    return ""


def _append_json(api: SummaryApi, body: dict[str, Any], section: str) -> None:
    if api == "chat":
        choices = body.get("choices") or []
        if not choices:
            return
        msg = choices[0].setdefault("message", {"role": "assistant"})
        content = msg.get("content")
        msg["content"] = (content or "") + section if content else section.lstrip("\n")
        return
    if api == "responses":
        output = body.setdefault("output", [])
        for item in reversed(output):
            if isinstance(item, dict) and item.get("type") == "message":
                for part in reversed(item.get("content") or []):
                    if isinstance(part, dict) and part.get("type") == "output_text":
                        part["text"] = str(part.get("text", "")) + section
                        return
        output.append(
            {
                "type": "message",
                "id": "msg_compaction_gate",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": section.lstrip("\n"), "annotations": []}],
            }
        )
        return
    content = body.setdefault("content", [])
    if content and isinstance(content[-1], dict) and content[-1].get("type") == "text":
        content[-1]["text"] = str(content[-1].get("text", "")) + section
    else:
        content.append({"type": "text", "text": section.lstrip("\n")})


def patch_summary_json(
    api: SummaryApi, body: bytes, bindings: Sequence[Binding]
) -> tuple[bytes, list[Binding]]:
    """Return (body to send, bindings appended). Unchanged bytes when nothing is missing
    or the body is not a successful response of ``api``."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body, []
    if not isinstance(parsed, dict) or parsed.get("error") or parsed.get("type") == "error":
        return body, []
    missing = missing_bindings(response_text(api, parsed), bindings)
    if not missing:
        return body, []
    patched = copy.deepcopy(parsed)
    _append_json(api, patched, verbatim_section(missing))
    return json.dumps(patched, ensure_ascii=False).encode(), missing


# --------------------------------------------------------------------------- streams

#: Events that end a Responses stream.
_RESPONSES_FINAL = frozenset({"response.completed", "response.incomplete", "response.done"})


def _is_message(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "message" and item.get("role", "assistant") == "assistant"


def message_item_text(item: dict[str, Any]) -> str:
    """The text of a Responses message item (its ``output_text`` parts)."""
    content = item.get("content")
    return "".join(
        str(p.get("text", "")) for p in content or () if isinstance(p, dict) and p.get("type") == "output_text"
    ) if isinstance(content, list) else ""


class SummaryStreamPatcher(DialectStream):
    """Stateful SSE rewriter for one summarization response.

    ``feed(raw_event) -> events to emit``; ``finish() -> events to emit before the end``.
    ``appended`` lists the bindings that were injected (empty when the summary kept all)."""

    def __init__(self, api: SummaryApi, bindings: Sequence[Binding]) -> None:
        self.api = api
        self.bindings = list(bindings)
        self.text: list[str] = []
        self.appended: list[Binding] = []
        self.done = False
        # OpenAI chat
        self._chunk_meta: dict[str, Any] = {}
        # Responses
        self._section = ""
        self._patched_item: str | None = None
        self._patched_content: int = 0
        self._seq_shift = 0
        # Anthropic
        self._held_stop: bytes | None = None
        self._held_pings: list[bytes] = []
        self._held_index: int | None = None
        self._max_index = -1
        self._open_text: dict[int, bool] = {}

    # -- common
    def _compute(self) -> str:
        if self.done:
            return ""
        self.done = True
        missing = missing_bindings("".join(self.text), self.bindings)
        if not missing:
            return ""
        self.appended = missing
        return verbatim_section(missing)

    def finish(self) -> list[bytes]:
        out: list[bytes] = []
        if self.api == "messages" and self._held_stop is not None:
            out += [self._held_stop, *self._held_pings]
            self._held_stop, self._held_pings = None, []
        if not self.done and self.api == "chat" and self._chunk_meta:
            section = self._compute()
            if section:
                out.insert(0, self._chat_chunk(section))
        return out

    # -- OpenAI chat
    def _chat_chunk(self, content: str) -> bytes:
        chunk = dict(self._chunk_meta)
        chunk["choices"] = [{"index": 0, "delta": {"content": content}, "logprobs": None, "finish_reason": None}]
        return render_event(chunk)

    def _feed_chat(self, ev: SSEEvent) -> list[bytes]:
        if self.done:
            return [ev.raw]
        if ev.data is not None and ev.data.strip() == "[DONE]":
            section = self._compute()
            return [self._chat_chunk(section), ev.raw] if section and self._chunk_meta else [ev.raw]
        obj = ev.json()
        if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
            return [ev.raw]
        if not self._chunk_meta:
            self._chunk_meta = {
                k: obj[k] for k in ("id", "object", "created", "model", "system_fingerprint") if k in obj
            }
        finishing = None
        for ch in obj["choices"]:
            if not isinstance(ch, dict) or ch.get("index", 0) != 0:
                continue
            delta = ch.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self.text.append(delta["content"])
            if ch.get("finish_reason") is not None:
                finishing = ch
        if finishing is None:
            return [ev.raw]
        section = self._compute()
        if not section:
            return [ev.raw]
        delta = finishing.get("delta") or {}
        if delta:
            # The finish chunk also carries content or tool calls: emit it without the
            # finish, then the section, then a bare finish chunk.
            first = copy.deepcopy(obj)
            last = copy.deepcopy(obj)
            for ch in first["choices"]:
                if ch.get("index", 0) == 0:
                    ch["finish_reason"] = None
            last["choices"] = [dict(finishing, delta={})]
            return [render_event(first), self._chat_chunk(section), render_event(last)]
        return [self._chat_chunk(section), ev.raw]

    # -- Responses
    def _shift(self, ev: SSEEvent, obj: dict[str, Any], mutate: bool) -> bytes:
        if not self._seq_shift and not mutate:
            return ev.raw
        if isinstance(obj.get("sequence_number"), int):
            obj["sequence_number"] += self._seq_shift
        return render_event(obj, ev.event)

    def _feed_responses(self, ev: SSEEvent) -> list[bytes]:
        obj = ev.json()
        if not isinstance(obj, dict):
            return [ev.raw]
        typ = obj.get("type") or ev.event
        if typ == "response.output_text.delta" and not self.done:
            self.text.append(str(obj.get("delta", "")))
            return [ev.raw]
        if typ == "response.output_text.done" and not self.done:
            section = self._compute()
            if not section:
                return [ev.raw]
            self._section = section
            self._patched_item = obj.get("item_id")
            self._patched_content = int(obj.get("content_index", 0) or 0)
            injected = {
                "type": "response.output_text.delta",
                "item_id": obj.get("item_id"),
                "output_index": obj.get("output_index", 0),
                "content_index": obj.get("content_index", 0),
                "delta": section,
                "logprobs": [],
            }
            if isinstance(obj.get("sequence_number"), int):
                injected["sequence_number"] = obj["sequence_number"]
            self._seq_shift = 1
            obj = copy.deepcopy(obj)
            obj["text"] = str(obj.get("text", "")) + section
            return [render_event(injected, "response.output_text.delta"), self._shift(ev, obj, True)]
        if not self.done and typ == "response.output_item.done" and _is_message(obj.get("item")):
            return self._at_message_done(ev, obj)
        if not self.done and typ in _RESPONSES_FINAL:
            return self._at_final(ev, obj)
        if not self._section:
            return [ev.raw]
        mutate = False
        obj = copy.deepcopy(obj)
        if typ == "response.content_part.done" and obj.get("item_id") == self._patched_item:
            part = obj.get("part") or {}
            if part.get("type") == "output_text":
                part["text"] = str(part.get("text", "")) + self._section
                mutate = True
        elif typ == "response.output_item.done":
            mutate = self._patch_item(obj.get("item"))
        elif typ in _RESPONSES_FINAL:
            resp = obj.get("response") or {}
            for item in resp.get("output") or ():
                mutate = self._patch_item(item) or mutate
        return [self._shift(ev, obj, mutate)]

    def _patch_item(self, item: Any) -> bool:
        if not isinstance(item, dict) or item.get("id") != self._patched_item:
            return False
        content = item.setdefault("content", [])
        if not isinstance(content, list):
            return False
        if self._patched_content < len(content) and isinstance(content[self._patched_content], dict):
            part = content[self._patched_content]
            part["text"] = str(part.get("text", "")) + self._section
            return True
        if self._patched_content == len(content):  # the item had no text part: add one
            content.append({"type": "output_text", "text": self._section.lstrip("\n"), "annotations": []})
            return True
        return False

    def _start_patch(self, item: dict[str, Any]) -> str:
        """The section to append to message ``item`` (``""`` if nothing is missing); when
        the stream carried no text deltas, the summary is the item's own text."""
        if not self.text:
            self.text.append(message_item_text(item))
        section = self._compute()
        if section:
            self._section = section
            self._patched_item = item.get("id")
            raw = item.get("content")
            content: list[Any] = raw if isinstance(raw, list) else []
            texts = [i for i, p in enumerate(content) if isinstance(p, dict) and p.get("type") == "output_text"]
            self._patched_content = texts[-1] if texts else len(content)
        return section

    def _at_message_done(self, ev: SSEEvent, obj: dict[str, Any]) -> list[bytes]:
        """The message item is complete and no ``output_text.done`` came (some servers
        never send it; Codex CLI reads the item): append to the item, and first send the
        section as a text delta when the text was streamed as deltas."""
        streamed = bool(self.text)
        obj = copy.deepcopy(obj)
        item = obj["item"]
        section = self._start_patch(item)
        if not section:
            return [self._shift(ev, obj, False)]
        out: list[bytes] = []
        if streamed:
            injected: dict[str, Any] = {
                "type": "response.output_text.delta",
                "item_id": item.get("id"),
                "output_index": obj.get("output_index", 0),
                "content_index": self._patched_content,
                "delta": section,
                "logprobs": [],
            }
            if isinstance(obj.get("sequence_number"), int):
                injected["sequence_number"] = obj["sequence_number"] + self._seq_shift
            self._seq_shift += 1
            out.append(render_event(injected, "response.output_text.delta"))
        self._patch_item(item)
        return [*out, self._shift(ev, obj, True)]

    def _at_final(self, ev: SSEEvent, obj: dict[str, Any]) -> list[bytes]:
        """The response ends and no message item was reported: the summary is in the final
        event's ``response.output`` (its last message item, or a new one)."""
        obj = copy.deepcopy(obj)
        resp = obj.get("response")
        output = resp.get("output") if isinstance(resp, dict) else None
        if not isinstance(output, list):
            self.done = True
            return [self._shift(ev, obj, False)]
        messages = [i for i in output if _is_message(i)]
        if messages:
            section = self._start_patch(messages[-1])
            mutate = bool(section) and self._patch_item(messages[-1])
            return [self._shift(ev, obj, mutate)]
        section = self._compute()
        if not section:
            return [self._shift(ev, obj, False)]
        output.append({"type": "message", "id": "msg_compaction_gate", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": section.lstrip("\n"), "annotations": []}]})
        return [self._shift(ev, obj, True)]

    # -- Anthropic
    def _anthropic_new_block(self, section: str) -> list[bytes]:
        idx = self._max_index + 1
        self._max_index = idx
        return [
            render_event(
                {"type": "content_block_start", "index": idx, "content_block": {"type": "text", "text": ""}},
                "content_block_start",
            ),
            render_event(
                {"type": "content_block_delta", "index": idx, "delta": {"type": "text_delta", "text": section}},
                "content_block_delta",
            ),
            render_event({"type": "content_block_stop", "index": idx}, "content_block_stop"),
        ]

    def _feed_anthropic(self, ev: SSEEvent) -> list[bytes]:
        obj = ev.json()
        typ = (obj.get("type") if isinstance(obj, dict) else None) or ev.event
        out: list[bytes] = []
        if self._held_stop is not None:
            if typ == "ping":
                self._held_pings.append(ev.raw)
                return []
            pings, self._held_pings = self._held_pings, []
            if typ == "message_delta":
                section = self._compute()
                if section:
                    out.append(
                        render_event(
                            {
                                "type": "content_block_delta",
                                "index": self._held_index,
                                "delta": {"type": "text_delta", "text": section},
                            },
                            "content_block_delta",
                        )
                    )
                out += [self._held_stop, *pings, ev.raw]
                self._held_stop = None
                return out
            out += [self._held_stop, *pings]
            self._held_stop = None
        if not isinstance(obj, dict) or self.done:
            return out + [ev.raw]
        if typ == "content_block_start":
            idx = int(obj.get("index", 0))
            self._max_index = max(self._max_index, idx)
            block = obj.get("content_block") or {}
            self._open_text[idx] = block.get("type") == "text"
            if block.get("type") == "text" and block.get("text"):
                self.text.append(str(block["text"]))
        elif typ == "content_block_delta":
            delta = obj.get("delta") or {}
            if delta.get("type") == "text_delta":
                self.text.append(str(delta.get("text", "")))
        elif typ == "content_block_stop":
            idx = int(obj.get("index", 0))
            if self._open_text.get(idx) and missing_bindings("".join(self.text), self.bindings):
                self._held_stop = ev.raw
                self._held_index = idx
                return out
        elif typ == "message_delta":
            section = self._compute()
            if section:
                return out + self._anthropic_new_block(section) + [ev.raw]
        return out + [ev.raw]
