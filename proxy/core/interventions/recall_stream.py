"""Several upstream rounds relayed as one client stream (pure; see :mod:`.recall`).

A :class:`~.recall_merger.RoundMerger` (the base, in :mod:`.recall_merger`; here one
subclass per API and :func:`merger_for`) is fed the SSE events of one upstream round after
another and returns what the client gets, so that the client sees one coherent response:

- events are passed on as they arrive until the model starts a tool call; from then on
  the round's events are held until it ends, because a recall call may follow the
  client's own calls in the same turn (a client cannot run a call before it is complete
  anyway). Text streams as it comes;
- when the round ended with a recall call, :meth:`RoundMerger.end_round` gives the turn
  (to build the follow-up request) and :meth:`RoundMerger.next_round` drops what was
  held; the next round's events continue the same response: chat chunks keep the first
  round's ``id``/``created``, Anthropic drops the repeated ``message_start`` and shifts
  content block indices, the Responses API drops the repeated ``response.created`` /
  ``in_progress``, shifts ``output_index``, renumbers ``sequence_number`` and ends with
  a ``response.completed`` that carries the first round's id and every item the client
  saw;
- :meth:`RoundMerger.release` ends the response with the held events of the last round,
  its final usage summed over every round; :meth:`RoundMerger.strip` does the same
  without the recall calls (the rounds ran out).

A stream fed to a merger whose model never calls a tool comes out byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..chat_calls import ChatToolCalls, piece_index
from ..responses import anthropic_blocks
from .recall import RESPONSES_CALLS, RecallApi, note_item, without_tool
from .recall_merger import Held, RoundEnd, RoundMerger
from .sse import parse_event, render_event
from .tripwire_stream import message_item_events

__all__ = ["merger_for"]


def merger_for(api: RecallApi, name: str) -> RoundMerger:
    cls = {"chat": ChatMerger, "messages": AnthropicMerger, "responses": ResponsesMerger}[api]
    return cls(name)


# --------------------------------------------------------------------------- OpenAI chat


class ChatMerger(RoundMerger):
    api: RecallApi = "chat"

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.meta: dict[str, Any] | None = None
        self.done: bytes | None = None
        self._reset()

    def _reset(self) -> None:
        self.text: list[str] = []
        self.calls = ChatToolCalls()
        self.usage: dict[str, Any] | None = None
        self.usage_chunk: dict[str, Any] | None = None
        self.usage_raw: bytes | None = None
        self.first = True

    def feed(self, raw: bytes) -> list[bytes]:
        ev = parse_event(raw)
        if ev.data is not None and ev.data.strip() == "[DONE]":
            self.done = raw
            return []
        obj = ev.json()
        if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
            return self._out(Held(obj, ev.event, raw))  # an error event, a comment
        changed = False
        if self.meta is None:
            self.meta = {k: obj[k] for k in ("id", "created") if k in obj}
        elif self.round:
            for k, v in self.meta.items():
                if obj.get(k) != v:
                    obj[k] = v
                    changed = True
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        if not obj["choices"] and self.usage is not None:
            self.usage_chunk, self.usage_raw = obj, raw  # the usage-only chunk: sent last, summed
            return []
        first, self.first = self.first, False
        finish = False
        for ch in obj["choices"]:
            if not isinstance(ch, dict) or ch.get("index", 0) != 0:
                continue
            delta = ch.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self.text.append(delta["content"])
            if self.calls.add(delta):
                self.holding = True
            if ch.get("finish_reason") is not None:
                finish = True
                self.holding = True
            if self.round and first and not finish and not delta.get("content") and not delta.get("tool_calls"):
                return []  # the next round's opening role chunk: the client has one already
        return self._out(Held(obj, ev.event, render_event(obj) if changed else raw))

    def _end(self) -> RoundEnd:
        turn: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.calls:
            turn["tool_calls"] = self.calls.as_message_field(missing_id="")
        return RoundEnd(turn, self.usage)

    def _tail(self) -> list[bytes]:
        out: list[bytes] = []
        if self.usage_chunk is not None:
            total = self.summed()
            if total is not None:
                self.usage_chunk["usage"] = total
            out.append(render_event(self.usage_chunk))
        if self.done is not None:
            out.append(self.done)
        return out

    def _kept(self) -> list[bytes]:
        out = [r for r in (self.usage_raw, self.done) if r is not None]
        self.usage_chunk = self.usage_raw = self.done = None
        return out

    def strip(self, note: str) -> list[bytes]:
        keep = [i for i, call in self.calls.indexed() if call.name != self.name]
        renumber = {old: new for new, old in enumerate(keep)}
        out: list[bytes] = []
        for h in self.held:
            obj = h.obj
            if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
                out.append(h.raw)
                continue
            for ch in obj["choices"]:
                delta = ch.get("delta") or {}
                if "tool_calls" in delta:
                    calls = [dict(tc, index=renumber[piece_index(tc)]) for tc in delta["tool_calls"]
                             if isinstance(tc, dict) and piece_index(tc) in renumber]
                    if calls:
                        delta["tool_calls"] = calls
                    else:
                        del delta["tool_calls"]
                if ch.get("finish_reason") is not None and not keep:
                    ch["finish_reason"] = "stop" if ch["finish_reason"] == "tool_calls" else ch["finish_reason"]
                    note_chunk = dict(obj, choices=[{"index": 0, "delta": {"content": note}, "finish_reason": None}])
                    out.append(render_event(note_chunk))
            if any(ch.get("delta") or ch.get("finish_reason") is not None for ch in obj["choices"]):
                out.append(render_event(obj))
        return out + self._tail()


# --------------------------------------------------------------------------- Anthropic


class AnthropicMerger(RoundMerger):
    api: RecallApi = "messages"

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.offset = 0  # client block index of this round's block 0
        self.stop: bytes | None = None
        self._reset()

    def _reset(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.forwarded = 0
        self.start_usage: dict[str, Any] = {}
        self.delta: Held | None = None

    def feed(self, raw: bytes) -> list[bytes]:
        ev = parse_event(raw)
        obj = ev.json()
        if not isinstance(obj, dict):
            return self._out(Held(obj, ev.event, raw))
        typ = obj.get("type") or ev.event
        if typ == "message_start":
            msg = obj.get("message") or {}
            self.start_usage = dict(msg.get("usage") or {})
            return [raw] if self.round == 0 else []
        if typ == "message_delta":
            self.delta = Held(obj, ev.event, raw)
            return []
        if typ == "message_stop":
            self.stop = raw
            return []
        if typ not in ("content_block_start", "content_block_delta", "content_block_stop"):
            return self._out(Held(obj, ev.event, raw))  # ping, error, unknown
        idx = int(obj.get("index", 0))
        if typ == "content_block_start":
            block = dict(obj.get("content_block") or {})
            block["_json"] = []
            self.blocks[idx] = block
            if block.get("type") == "tool_use":
                self.holding = True
            elif not self.holding:
                self.forwarded += 1
        elif typ == "content_block_delta":
            _apply_delta(self.blocks.setdefault(idx, {"type": "text", "text": "", "_json": []}), obj.get("delta") or {})
        rendered = raw
        if self.offset:
            obj["index"] = idx + self.offset
            rendered = render_event(obj, ev.event)
        return self._out(Held(obj, ev.event, rendered, idx))

    def _end(self) -> RoundEnd:
        content = anthropic_blocks(self.blocks, keep_cut_input=False)
        usage = dict(self.start_usage)
        if self.delta is not None and isinstance(self.delta.obj.get("usage"), dict):
            usage.update({k: v for k, v in self.delta.obj["usage"].items() if v is not None})
        return RoundEnd(content, usage or None)

    def next_round(self) -> None:
        self.offset += self.forwarded
        super().next_round()

    def _tail(self, stop_reason: str | None = None) -> list[bytes]:
        out: list[bytes] = []
        d = self.delta
        if d is not None:
            total = self.summed()
            if total is None and stop_reason is None:
                out.append(d.raw)
            else:
                obj = dict(d.obj)
                if total is not None:
                    obj["usage"] = {k: v for k, v in total.items() if k != "service_tier"}
                if stop_reason is not None:
                    obj["delta"] = {**(obj.get("delta") or {}), "stop_reason": stop_reason}
                out.append(render_event(obj, d.event))
        if self.stop is not None:
            out.append(self.stop)
        return out

    def _kept(self) -> list[bytes]:
        out = [r for r in (self.delta.raw if self.delta else None, self.stop) if r is not None]
        self.delta, self.stop = None, None
        return out

    def strip(self, note: str) -> list[bytes]:
        recall = {i for i, b in self.blocks.items() if b.get("type") == "tool_use" and b.get("name") == self.name}
        order = [i for i in sorted(self.blocks) if i not in recall]
        renumber = {old: self.offset + new for new, old in enumerate(order)}
        out: list[bytes] = []
        for h in self.held:
            if h.index is None:
                out.append(h.raw)
            elif h.index in renumber:
                out.append(render_event(dict(h.obj, index=renumber[h.index]), h.event))
        client_calls = any(self.blocks[i].get("type") == "tool_use" for i in order)
        if not client_calls:
            idx = self.offset + len(order)
            out += [
                render_event({"type": "content_block_start", "index": idx, "content_block": {"type": "text", "text": ""}}, "content_block_start"),
                render_event({"type": "content_block_delta", "index": idx, "delta": {"type": "text_delta", "text": note}}, "content_block_delta"),
                render_event({"type": "content_block_stop", "index": idx}, "content_block_stop"),
            ]
        return out + self._tail(None if client_calls else "end_turn")


def _apply_delta(block: dict[str, Any], delta: dict[str, Any]) -> None:
    dt = delta.get("type")
    if dt == "text_delta":
        block["text"] = block.get("text", "") + str(delta.get("text", ""))
    elif dt == "input_json_delta":
        block.setdefault("_json", []).append(str(delta.get("partial_json", "")))
    elif dt == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
    elif dt == "signature_delta":
        block["signature"] = block.get("signature", "") + str(delta.get("signature", ""))


# --------------------------------------------------------------------------- Responses


_LIFECYCLE = frozenset({"response.created", "response.in_progress", "response.queued"})
_FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


@dataclass(slots=True)
class _Lead:
    """What the client was told in the first round: the response id and its start."""

    id: str | None = None
    created_at: Any = None
    items: list[Any] = field(default_factory=list)  # done items the client has, earlier rounds


class ResponsesMerger(RoundMerger):
    api: RecallApi = "responses"

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.seq = 0  # the next sequence_number the client gets
        self.offset = 0  # client output_index of this round's item 0
        self.lead = _Lead()
        self.last_id: str | None = None  # the last round's own response id
        self._reset()

    def _reset(self) -> None:
        self.items: dict[int, Any] = {}
        self.forwarded: list[Any] = []
        self.final: Held | None = None

    def _emit(self, obj: dict[str, Any], event: str | None, raw: bytes, changed: bool) -> bytes:
        if isinstance(obj.get("sequence_number"), int):
            if obj["sequence_number"] != self.seq:
                obj["sequence_number"] = self.seq
                changed = True
            self.seq += 1
        return render_event(obj, event) if changed else raw

    def _untool(self, response: Any) -> bool:
        if isinstance(response, dict) and isinstance(response.get("tools"), list):
            kept = without_tool(response["tools"], self.name)
            if len(kept) != len(response["tools"]):
                response["tools"] = kept
                return True
        return False

    def feed(self, raw: bytes) -> list[bytes]:
        ev = parse_event(raw)
        obj = ev.json()
        if not isinstance(obj, dict):
            return self._out(Held(obj, ev.event, raw))
        typ = obj.get("type") or ev.event
        changed = False
        if typ in _LIFECYCLE:
            resp: dict[str, Any] = obj["response"] if isinstance(obj.get("response"), dict) else {}
            if self.round:
                return []
            self.lead.id = resp.get("id") if isinstance(resp.get("id"), str) else self.lead.id
            self.lead.created_at = resp.get("created_at", self.lead.created_at)
            changed = self._untool(resp)
            return [self._emit(obj, ev.event, raw, changed)]
        if typ in _FINAL:
            self.final = Held(obj, ev.event, raw)
            done = obj.get("response")
            if isinstance(done, dict) and isinstance(done.get("id"), str):
                self.last_id = done["id"]
            return []
        idx = obj.get("output_index") if isinstance(obj.get("output_index"), int) else None
        item = obj.get("item") if isinstance(obj.get("item"), dict) else None
        if typ == "response.output_item.added" and item is not None and item.get("type") in RESPONSES_CALLS:
            self.holding = True
        if typ == "response.output_item.done" and item is not None and idx is not None:
            self.items[idx] = item
            if not self.holding:
                self.forwarded.append(item)
        if idx is not None and self.offset:
            obj["output_index"] = idx + self.offset
            changed = True
        h = Held(obj, ev.event, raw, idx)
        if self.holding:
            h.raw = render_event(obj, ev.event) if changed else raw
            self.held.append(h)
            return []
        return [self._emit(obj, ev.event, raw, changed)]

    def _end(self) -> RoundEnd:
        resp = self.final.obj.get("response") if self.final is not None else None
        output = resp.get("output") if isinstance(resp, dict) else None
        if not isinstance(output, list) or not output:
            output = [v for _, v in sorted(self.items.items())]
        usage = resp.get("usage") if isinstance(resp, dict) and isinstance(resp.get("usage"), dict) else None
        return RoundEnd(output, usage)

    def next_round(self) -> None:
        self.lead.items += self.forwarded
        self.offset += len(self.forwarded)
        super().next_round()

    def _final(self, output: list[Any] | None) -> list[bytes]:
        if self.final is None:
            return []
        obj = self.final.obj
        resp = obj.get("response")
        changed = self._untool(resp)
        if isinstance(resp, dict) and (self.round or output is not None):
            if self.lead.id is not None:
                resp["id"] = self.lead.id
            if self.lead.created_at is not None:
                resp["created_at"] = self.lead.created_at
            own = output if output is not None else list(resp.get("output") or ())
            resp["output"] = self.lead.items + own
            total = self.summed()
            if total is not None:
                resp["usage"] = total
            changed = True
        return [self._emit(obj, self.final.event, self.final.raw, changed)]

    def _held_out(self, keep: dict[int, int] | None = None) -> list[bytes]:
        out: list[bytes] = []
        for h in self.held:
            obj = h.obj
            if not isinstance(obj, dict):
                out.append(h.raw)
                continue
            changed = False
            if keep is not None and h.index is not None:
                if h.index not in keep:
                    continue
                obj["output_index"] = keep[h.index]
                changed = True
            out.append(self._emit(obj, h.event, h.raw, changed))
        return out

    def release(self) -> list[bytes]:
        return self._held_out() + self._final(None)

    def _kept(self) -> list[bytes]:
        out = [self.final.raw] if self.final is not None else []
        self.final = None
        return out

    def response_ids(self) -> tuple[str | None, str | None]:
        return self.lead.id, self.last_id

    def strip(self, note: str) -> list[bytes]:
        recall = {i for i, it in self.items.items() if isinstance(it, dict) and it.get("type") in RESPONSES_CALLS
                  and it.get("name") == self.name}
        order = [i for i in sorted(self.items) if i not in recall]
        keep = {old: self.offset + new for new, old in enumerate(order)}
        out = self._held_out(keep)
        own = [self.items[i] for i in order]
        if not any(isinstance(it, dict) and it.get("type") in RESPONSES_CALLS for it in own):
            item = note_item(note, f"msg_compaction_gate_recall_{self.round}")
            for e in message_item_events(item, self.offset + len(order)):
                e["sequence_number"] = self.seq
                out.append(self._emit(e, e["type"], b"", True))
            own.append(item)
        return out + self._final(own)
