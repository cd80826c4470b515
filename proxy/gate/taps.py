"""Response taps of the gate, and how taps compose.

:class:`ChainTap` runs taps in order: what the first emits is what the second sees, so the
tracker (last) records exactly what the client receives. :class:`GateTap` applies the
summary check and the tripwire to one response and reports findings through callbacks.
Every method is synchronous, fast, and never raises into the server: an internal error
disables the gate's rewriting for the rest of the response (pass-through).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence

from ..core.interventions.bindings import Binding
from ..core.interventions.summary import (
    SummaryApi,
    SummaryStreamPatcher,
    event_text,
    message_item_text,
    missing_bindings,
    patch_summary_json,
    response_text,
)
from ..core.interventions.tripwire import (
    Hallucination,
    TripwireAction,
    annotate_json,
    block_json,
    hallucination_message,
    in_text,
    suggested_calls,
    tool_calls_of_json,
)
from ..core.interventions.tripwire_stream import Checker, ToolCallStreamGuard
from ..server.hooks import ResponseTap

log = logging.getLogger("compaction_gate.gate")


class ChainTap:
    def __init__(self, taps: Sequence[ResponseTap]) -> None:
        self.taps = list(taps)
        self.settles = any(getattr(t, "settles", False) for t in self.taps)

    async def settle(self) -> None:
        for t in self.taps:
            if getattr(t, "settles", False):
                await t.settle()  # type: ignore[attr-defined]

    def feed_json(self, status: int, body: bytes) -> bytes:
        for t in self.taps:
            body = t.feed_json(status, body)
        return body

    def _through(self, start: int, events: list[bytes]) -> list[bytes]:
        for t in self.taps[start:]:
            nxt: list[bytes] = []
            for e in events:
                nxt.extend(t.feed_event(e))
            events = nxt
        return events

    def feed_event(self, raw_event: bytes) -> list[bytes]:
        return self._through(0, [raw_event])

    def finish(self) -> list[bytes]:
        out: list[bytes] = []
        for i, t in enumerate(self.taps):
            out.extend(self._through(i + 1, t.finish()))
        return out

    def closed(self, reason: str) -> None:
        for t in self.taps:
            try:
                t.closed(reason)
            except Exception:
                log.exception("tap.closed failed")


class GateTap:
    """Summary check (``summary_bindings``) and/or tripwire (``checker``) on one response.

    ``on_summary(appended, missing)`` is called once when the summary is complete;
    ``on_tripwire(found)`` once per finding."""

    def __init__(
        self,
        api: SummaryApi,
        *,
        summary_bindings: Sequence[Binding] = (),
        append_missing: bool = True,
        checker: Checker | None = None,
        tripwire: TripwireAction = "off",
        on_summary: Callable[[list[Binding], list[Binding]], None] | None = None,
        on_tripwire: Callable[[list[Hallucination]], None] | None = None,
    ) -> None:
        self.api = api
        self.summary_bindings = list(summary_bindings)
        self.append_missing = append_missing
        self.checker = checker
        self.tripwire = tripwire if checker is not None else "off"
        self.on_summary = on_summary
        self.on_tripwire = on_tripwire
        self._patcher = SummaryStreamPatcher(api, self.summary_bindings) if self.summary_bindings and append_missing else None
        self._guard = (
            ToolCallStreamGuard(api, checker, self.tripwire, on_found=self._found)
            if checker is not None and self.tripwire != "off"
            else None
        )
        self._text: list[str] = []
        self._broken = False
        self._reported = False

    def _found(self, found: list[Hallucination]) -> None:
        if self.on_tripwire is not None:
            self.on_tripwire(found)

    def _report_summary(self, appended: list[Binding], text: str | None) -> None:
        if self._reported or not self.summary_bindings:
            return
        self._reported = True
        missing = missing_bindings(text, self.summary_bindings) if text is not None else list(appended)
        if self.on_summary is not None:
            self.on_summary(list(appended), missing)

    # -- JSON
    def feed_json(self, status: int, body: bytes) -> bytes:
        if self._broken or not 200 <= status < 300:
            return body
        try:
            if self.summary_bindings:
                text = response_text(self.api, json.loads(body))
                if self.append_missing:
                    body, appended = patch_summary_json(self.api, body, self.summary_bindings)
                else:
                    appended = []
                self._report_summary(appended, text)
            if self.checker is not None and self.tripwire != "off":
                parsed = json.loads(body)
                calls = tool_calls_of_json(self.api, parsed) + suggested_calls(response_text(self.api, parsed))
                found = self.checker(calls)
                if found:
                    self._found(found)
                    msg = hallucination_message(found)
                    if self.tripwire == "block":
                        blocked = block_json(self.api, parsed, msg, drop_text=in_text(found))
                        body = json.dumps(blocked, ensure_ascii=False).encode()
                    elif self.tripwire == "annotate":
                        body = json.dumps(annotate_json(self.api, parsed, msg), ensure_ascii=False).encode()
        except Exception:
            log.exception("gate tap failed on a JSON response; passing it through")
            self._broken = True
        return body

    # -- SSE
    def feed_event(self, raw_event: bytes) -> list[bytes]:
        if self._broken:
            return [raw_event]
        try:
            events = [raw_event]
            if self._patcher is not None:
                events = self._patcher.feed(raw_event)
                if self._patcher.done and not self._reported:
                    self._report_summary(self._patcher.appended, None if self._patcher.appended else "".join(self._patcher.text))
            elif self.summary_bindings:
                self._collect_text(raw_event)
            if self._guard is not None:
                out: list[bytes] = []
                for e in events:
                    out.extend(self._guard.feed(e))
                events = out
            return events
        except Exception:
            log.exception("gate tap failed on a stream event; passing the rest through")
            self._broken = True
            return [raw_event]

    def _collect_text(self, raw: bytes) -> None:
        # audit mode: observe the summary without rewriting it
        from ..core.interventions.sse import parse_event

        obj = parse_event(raw).json()
        if not isinstance(obj, dict):
            return
        text = event_text(self.api, obj)
        if text:
            self._text.append(text)
        elif (
            self.api == "responses"
            and obj.get("type") == "response.output_item.done"
            and not self._text
            and isinstance(obj.get("item"), dict)
        ):
            self._text.append(message_item_text(obj["item"]))  # a stream without text deltas

    def finish(self) -> list[bytes]:
        if self._broken:
            return []
        try:
            out: list[bytes] = []
            if self._patcher is not None:
                out = self._patcher.finish()
                if not self._reported:
                    self._report_summary(self._patcher.appended, None if self._patcher.appended else "".join(self._patcher.text))
            elif self.summary_bindings:
                self._report_summary([], "".join(self._text))
            if self._guard is not None:
                guarded: list[bytes] = []
                for e in out:
                    guarded.extend(self._guard.feed(e))
                out = guarded + self._guard.finish()
            return out
        except Exception:
            log.exception("gate tap failed at the end of a stream")
            self._broken = True
            return []

    def closed(self, reason: str) -> None:
        return None
