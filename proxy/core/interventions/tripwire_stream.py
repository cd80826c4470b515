"""The tripwire on a streamed response (DESIGN §4.3): :class:`ToolCallStreamGuard` holds a
stream's tool-call events until each call is complete, checks it with the pure check of
:mod:`.tripwire`, and then releases the events, replaces them (``block``: on a Responses
API stream by an assistant message item saying what was stopped, so the stream still
ends with its ``response.completed``; on chat and Anthropic streams by an error event
the SDKs raise) or adds a note (``annotate``). Text events are never held, so a reply
without tool calls streams exactly as before. On a Responses API stream the note is an
assistant message item added after the last output item, just before the final event
(whose ``response.output`` then lists it too); later events' ``sequence_number`` values
are shifted so they stay consecutive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..chat_calls import ChatToolCalls
from .sse import DialectStream, SSEEvent, render_event
from .summary import event_text
from .tripwire import (
    Hallucination,
    ToolApi,
    ToolCall,
    TripwireAction,
    hallucination_message,
    stream_error_event,
    suggested_calls,
)

__all__ = ["Checker", "ToolCallStreamGuard", "message_item_events"]


Checker = Callable[[Sequence[ToolCall]], list[Hallucination]]
#: Events that end a Responses stream (a note goes in just before).
_RESPONSES_FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


class ToolCallStreamGuard(DialectStream):
    """Hold tool-call events until each call is complete, then check them.

    ``on_found(hallucinations)`` is called once per finding (for events/metrics)."""

    def __init__(
        self,
        api: ToolApi,
        check: Checker,
        action: TripwireAction,
        on_found: Callable[[list[Hallucination]], None] | None = None,
    ) -> None:
        self.api = api
        self.check = check
        self.action = action
        self.on_found = on_found
        self.found: list[Hallucination] = []
        self.blocked = False
        self._held: list[bytes] = []
        self._holding = False
        # chat: per tool index -> [name, args, id]
        self._chat_calls = ChatToolCalls()
        self._chat_meta: dict[str, Any] = {}
        # anthropic: per block index
        self._anth_calls: dict[int, list[Any]] = {}
        self._anth_max = -1
        self._notes: list[str] = []
        # responses: item id -> [name, args, call_id]
        self._resp_calls: dict[str, list[Any]] = {}
        self._resp_last_index = -1  # highest output_index seen
        self._resp_last_seq: int | None = None  # highest sequence_number seen (as sent)
        self._resp_shift = 0  # events inserted so far
        self._resp_hold_seq: int | None = None  # sequence number (as sent) of the first held event
        self._replaced: dict[str, dict[str, Any]] = {}  # blocked call item id -> its message item
        self._text: list[str] = []  # the reply's text so far (already forwarded)
        self._text_checked = False

    def _report(self, found: list[Hallucination]) -> None:
        self.found.extend(found)
        if self.on_found is not None:
            self.on_found(found)

    def feed(self, raw: bytes) -> list[bytes]:
        if self.blocked:
            return []
        if self.action == "off":
            return [raw]
        return super().feed(raw)

    def finish(self) -> list[bytes]:
        if self.blocked:
            return []
        out, self._held = self._held, []
        return out

    def _resolve(self, calls: list[ToolCall]) -> str | None:
        """Returns the message when the held events must be replaced (block)."""
        found = self.check(calls)
        if not found:
            return None
        self._report(found)
        msg = hallucination_message(found)
        if self.action == "block":
            return msg
        if self.action == "annotate":
            self._notes.append(msg)
        return None

    def _check_text(self) -> None:
        """At the end of the reply, the commands its text suggests (agents without a tool
        role). The text has already reached the client: a finding is flagged by a note
        (under ``block`` and ``annotate``), it cannot be stopped."""
        if self._text_checked:
            return
        self._text_checked = True
        calls = suggested_calls("".join(self._text))
        found = self.check(calls) if calls else []
        if not found:
            return
        self._report(found)
        if self.action in ("block", "annotate"):
            self._notes.append(hallucination_message(found, stopped=False))

    # -- chat
    def _chat_note(self) -> bytes:
        note = dict(self._chat_meta)
        note["choices"] = [
            {"index": 0, "delta": {"content": "\n\n[compaction-gate warning] " + "\n".join(self._notes)}, "finish_reason": None}
        ]
        self._notes = []
        return render_event(note)

    def _feed_chat(self, ev: SSEEvent) -> list[bytes]:
        obj = ev.json()
        if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
            if self._holding:
                self._held.append(ev.raw)
                return []
            return [ev.raw]
        if not self._chat_meta:
            self._chat_meta = {k: obj[k] for k in ("id", "object", "created", "model") if k in obj}
        finish = False
        self._text.append(event_text("chat", obj))
        for ch in obj["choices"]:
            delta = (ch or {}).get("delta") or {}
            if self._chat_calls.add(delta):
                self._holding = True
            if (ch or {}).get("finish_reason") is not None:
                finish = True
        if finish:
            self._check_text()
        if not self._holding:
            return [self._chat_note(), ev.raw] if finish and self._notes else [ev.raw]
        self._held.append(ev.raw)
        if not finish:
            return []
        calls = [ToolCall(c.name, c.args, c.id) for c in self._chat_calls.calls()]
        msg = self._resolve(calls)
        held, self._held, self._holding = self._held, [], False
        if msg is not None:
            self.blocked = True
            return [stream_error_event("chat", msg)]
        if self._notes:
            held.insert(len(held) - 1, self._chat_note())
        return held

    # -- anthropic
    def _feed_anthropic(self, ev: SSEEvent) -> list[bytes]:
        obj = ev.json()
        typ = (obj.get("type") if isinstance(obj, dict) else None) or ev.event
        if not isinstance(obj, dict):
            return self._pass_or_hold(ev.raw)
        self._text.append(event_text("messages", obj))
        if typ == "message_delta":
            self._check_text()
        if typ == "content_block_start":
            idx = int(obj.get("index", 0))
            self._anth_max = max(self._anth_max, idx)
            block = obj.get("content_block") or {}
            if block.get("type") == "tool_use":
                self._anth_calls[idx] = [str(block.get("name", "")), "", block.get("id")]
                self._holding = True
        elif typ == "content_block_delta" and int(obj.get("index", 0)) in self._anth_calls:
            delta = obj.get("delta") or {}
            if delta.get("type") == "input_json_delta":
                self._anth_calls[int(obj.get("index", 0))][1] += delta.get("partial_json", "")
        elif typ == "content_block_stop" and int(obj.get("index", 0)) in self._anth_calls:
            self._held.append(ev.raw)
            name, args, cid = self._anth_calls.pop(int(obj.get("index", 0)))
            msg = self._resolve([ToolCall(name, args or "{}", cid)])
            if msg is not None:
                self.blocked = True
                self._held = []
                return [stream_error_event("messages", msg)]
            if self._anth_calls:
                return []
            held, self._held, self._holding = self._held, [], False
            return held
        elif typ == "message_delta" and self._notes:
            idx = self._anth_max + 1
            self._anth_max = idx
            text = "[compaction-gate warning] " + "\n".join(self._notes)
            self._notes = []
            return [
                render_event({"type": "content_block_start", "index": idx, "content_block": {"type": "text", "text": ""}}, "content_block_start"),
                render_event({"type": "content_block_delta", "index": idx, "delta": {"type": "text_delta", "text": text}}, "content_block_delta"),
                render_event({"type": "content_block_stop", "index": idx}, "content_block_stop"),
                ev.raw,
            ]
        return self._pass_or_hold(ev.raw)

    def _pass_or_hold(self, raw: bytes) -> list[bytes]:
        if self._holding:
            self._held.append(raw)
            return []
        return [raw]

    # -- responses
    def _feed_responses(self, ev: SSEEvent) -> list[bytes]:
        obj = ev.json()
        if not isinstance(obj, dict):
            return self._pass_or_hold(ev.raw)
        typ = obj.get("type") or ev.event
        if isinstance(obj.get("output_index"), int):
            self._resp_last_index = max(self._resp_last_index, obj["output_index"])
        if isinstance(obj.get("sequence_number"), int):
            self._resp_last_seq = obj["sequence_number"]
            if self._resp_shift:
                obj["sequence_number"] += self._resp_shift
                ev = SSEEvent(render_event(obj, ev.event), ev.event, None)
        if typ in _RESPONSES_FINAL and self._replaced:
            self._replace_in_final(obj)
            ev = SSEEvent(render_event(obj, ev.event), ev.event, None)
        self._text.append(event_text("responses", obj))
        if typ in _RESPONSES_FINAL:
            self._check_text()
        if typ in _RESPONSES_FINAL and self._notes and not self._holding:
            return [*self._responses_note(obj), render_event(obj, ev.event)]
        item = obj.get("item") if isinstance(obj.get("item"), dict) else None
        if typ == "response.output_item.added" and item and item.get("type") in ("function_call", "custom_tool_call"):
            self._resp_calls[str(item.get("id"))] = [str(item.get("name", "")), "", item.get("call_id")]
            if not self._holding and isinstance(obj.get("sequence_number"), int):
                self._resp_hold_seq = obj["sequence_number"]  # as sent (already shifted)
            self._holding = True
        elif typ == "response.output_item.done" and item and str(item.get("id")) in self._resp_calls:
            self._held.append(ev.raw)
            name, _, cid = self._resp_calls.pop(str(item.get("id")))
            args = str(item.get("arguments", item.get("input", "")))
            msg = self._resolve([ToolCall(name, args, cid)])
            if msg is not None:
                return self._responses_block(item, obj, msg)
            if self._resp_calls:
                return []
            held, self._held, self._holding = self._held, [], False
            return held
        return self._pass_or_hold(ev.raw)

    def _responses_block(self, call: dict[str, Any], done: dict[str, Any], message: str) -> list[bytes]:
        """Replace the held events of a blocked call by an assistant message item at the
        same output index saying what was stopped, so the stream still ends with its own
        ``response.completed`` (no client retries a completed response, and each shows the
        message) and no agent executes the call — as :func:`~.tripwire.block_json` does for
        a JSON response. Other held calls of the same response are dropped with it."""
        raw_index = done.get("output_index")
        index = raw_index if isinstance(raw_index, int) else self._resp_last_index
        held, self._held, self._holding = self._held, [], False
        self._resp_calls.clear()
        text = "[compaction-gate] " + message
        item_id = f"msg_compaction_gate_{index}"
        part = {"type": "output_text", "text": text, "annotations": []}
        done_item = {"id": item_id, "type": "message", "status": "completed", "role": "assistant", "content": [part]}
        events = message_item_events(done_item, index)
        self._replaced[str(call.get("id"))] = done_item
        if self._resp_hold_seq is not None and self._resp_last_seq is not None:
            base = self._resp_hold_seq
            for k, e in enumerate(events):
                e["sequence_number"] = base + k
            self._resp_shift += len(events) - len(held)
        self._resp_hold_seq = None
        return [render_event(e, e["type"]) for e in events]

    def _replace_in_final(self, final: dict[str, Any]) -> None:
        response = final.get("response")
        if not isinstance(response, dict) or not isinstance(response.get("output"), list):
            return
        out: list[Any] = []
        for item in response["output"]:
            if isinstance(item, dict) and item.get("type") in ("function_call", "custom_tool_call"):
                replacement = self._replaced.get(str(item.get("id")))
                if replacement is not None:
                    if replacement not in out:
                        out.append(replacement)
                    continue
                if self._replaced:
                    continue  # a blocked response runs none of its calls
            out.append(item)
        response["output"] = out


    def _responses_note(self, final: dict[str, Any]) -> list[bytes]:
        """The pending notes as a complete assistant message item (its events), added
        to ``final``'s ``response.output``; ``final``'s sequence number is shifted."""
        text = "[compaction-gate warning] " + "\n".join(self._notes)
        self._notes = []
        index = self._resp_last_index + 1
        self._resp_last_index = index
        item_id = f"msg_compaction_gate_{index}"
        part = {"type": "output_text", "text": text, "annotations": []}
        done_item = {"id": item_id, "type": "message", "status": "completed", "role": "assistant", "content": [part]}
        events = message_item_events(done_item, index)
        if self._resp_last_seq is not None:  # the stream numbers its events: continue
            base = self._resp_last_seq + self._resp_shift  # the final event's number as sent
            for k, e in enumerate(events):
                e["sequence_number"] = base + k
            self._resp_shift += len(events)
            final["sequence_number"] = base + len(events)
        response = final.get("response")
        if isinstance(response, dict) and isinstance(response.get("output"), list):
            response["output"].append(done_item)
        return [render_event(e, e["type"]) for e in events]


def message_item_events(done_item: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """The stream events of a complete assistant message item at ``index``."""
    part = done_item["content"][0]
    at = {"item_id": done_item["id"], "output_index": index, "content_index": 0}
    return [
        {"type": "response.output_item.added", "output_index": index,
         "item": {**done_item, "status": "in_progress", "content": []}},
        {"type": "response.content_part.added", **at, "part": {**part, "text": ""}},
        {"type": "response.output_text.delta", **at, "delta": part["text"]},
        {"type": "response.output_text.done", **at, "text": part["text"]},
        {"type": "response.content_part.done", **at, "part": part},
        {"type": "response.output_item.done", "output_index": index, "item": done_item},
    ]
