"""``compaction-gate replay FILE.jsonl``: audit recorded traffic offline.

Input: JSON Lines, one request per line, in file order (the order it was sent). Each
line is either a bare request body (OpenAI chat / Responses, or Anthropic messages), or
a wrapper::

    {"conversation_id": "...",          # optional: sent as x-conversation-id
     "path": "/v1/messages",            # optional: inferred from the body otherwise
     "headers": {"x-session-id": "..."},# optional: identity headers (credentials ignored)
     "request": {...},                  # the request body
     "response": {...}}                 # optional: the JSON response, or a list of SSE
                                        # event payloads (objects or raw "data: …" text)

Each line goes through the *same* gate as live traffic: it becomes the
:class:`~proxy.server.hooks.Exchange` the server would build, the gate interceptor
decides, and a recorded response is fed to the decision's response tap exactly as the
server would (JSON at once, SSE event by event). Nothing is sent anywhere. The events
the gate records are therefore the events the live proxy would have recorded for the
same traffic, which a test asserts.

Output: a progress bar on stderr for large files, a summary table on stdout, and a JSON
and an HTML report of every destructive compaction (``--out DIR``, default the
current directory: ``replay-report.json`` and ``replay-report.html``).

Exit codes: 0 no destructive compaction, 3 at least one (like ``check``), 2 bad usage
or unreadable input.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

from proxy.gate.events import EventLog
from proxy.replay_report import (
    DestructiveFinding,
    ReplayResult,
    event_field,
    is_destructive,
    normalise_events,
    render_html,
    render_table,
    required_bindings,
    write_reports,
)
from proxy.server.headers import tenant_of
from proxy.server.hooks import Decision, Exchange, Interceptor, ResponseTap
from proxy.server.routes import classify
from proxy.yamlconf import ConfigError

__all__ = [
    "GateEngine",
    "LocalGateEngine",
    "ReplayRecord",
    "ReplayResult",
    "add_arguments",
    "build_engine",
    "iter_records",
    "normalise_events",
    "render_html",
    "render_table",
    "replay_records",
    "run",
]

EXIT_SAFE = 0
EXIT_USAGE = 2
EXIT_DESTRUCTIVE = 3

#: Headers a recorded line may carry into the Exchange (identity and routing only).
_ALLOWED_HEADERS = frozenset(
    {"x-conversation-id", "x-session-id", "x-litellm-session-id", "session-id",
     "helicone-session-id", "anthropic-version", "anthropic-beta", "openai-beta",
     "user-agent", "content-type"}
)
_SECRET_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "cookie", "proxy-authorization"})



# -- input -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayRecord:
    """One line of the input file."""

    line: int
    path: str
    headers: Mapping[str, str]
    request: Mapping[str, Any]
    response: Any = None
    status: int = 200


class ReplayInputError(ValueError):
    """A line is not a request body or wrapper (message names the line)."""


def _infer_path(body: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    if "input" in body and "messages" not in body:
        return "/v1/responses"
    if "anthropic-version" in headers:
        return "/v1/messages"
    system = body.get("system")
    if system is not None or "stop_sequences" in body or "anthropic_version" in body:
        return "/v1/messages"
    msgs = body.get("messages")
    if isinstance(msgs, list):
        for m in msgs:
            content = m.get("content") if isinstance(m, Mapping) else None
            if isinstance(content, list) and any(
                isinstance(b, Mapping) and b.get("type") in ("tool_use", "tool_result") for b in content
            ):
                return "/v1/messages"
            if isinstance(m, Mapping) and m.get("role") in ("system", "tool", "developer"):
                return "/v1/chat/completions"
    return "/v1/chat/completions"


def parse_line(text: str, line: int) -> ReplayRecord | None:
    """Parse one JSONL line (``None`` for blank lines and ``#`` comments)."""
    stripped = text.strip()
    if not stripped or stripped.startswith("#"):
        return None
    try:
        obj = json.loads(stripped)
    except ValueError as exc:
        raise ReplayInputError(f"line {line}: not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ReplayInputError(f"line {line}: expected a JSON object")
    wrapped = isinstance(obj.get("request"), dict) and "messages" not in obj and "input" not in obj
    body: dict[str, Any] = obj["request"] if wrapped else obj
    headers: dict[str, str] = {}
    if wrapped:
        raw_headers = obj.get("headers") or {}
        if not isinstance(raw_headers, dict):
            raise ReplayInputError(f"line {line}: headers must be an object")
        for name, value in raw_headers.items():
            lname = str(name).lower()
            allowed = lname in _ALLOWED_HEADERS or (lname.startswith("x-") and lname.endswith("-session-id"))
            if allowed and lname not in _SECRET_HEADERS:
                headers[lname] = str(value)
        if obj.get("conversation_id") is not None:
            headers["x-conversation-id"] = str(obj["conversation_id"])
    if not isinstance(body.get("messages"), list) and "input" not in body:
        raise ReplayInputError(f"line {line}: the request has no messages or input")
    path = str(obj.get("path") or "") if wrapped else ""
    if not path.startswith("/v1/"):
        path = _infer_path(body, headers)
    status = obj.get("status", 200) if wrapped else 200
    return ReplayRecord(
        line=line,
        path=path,
        headers=headers,
        request=body,
        response=obj.get("response") if wrapped else None,
        status=int(status) if isinstance(status, int) else 200,
    )


def iter_records(path: str | os.PathLike[str]) -> Iterator[ReplayRecord | ReplayInputError]:
    """Yield each record of a JSONL file, or the error of a bad line (and go on)."""
    with open(path, encoding="utf-8") as fh:
        for n, text in enumerate(fh, start=1):
            try:
                record = parse_line(text, n)
            except ReplayInputError as exc:
                yield exc
                continue
            if record is not None:
                yield record


# -- the engine ------------------------------------------------------------------------


class GateEngine(Protocol):
    """The gate as replay drives it: the live interceptor and its event store."""

    @property
    def interceptor(self) -> Interceptor: ...

    def events(self, conversation_id: str) -> list[dict[str, Any]]:
        """The events of one conversation, oldest first, as ``/gate/events`` shows them."""
        ...

    def conversation_ids(self) -> list[str]: ...

    async def close(self) -> None: ...


def exchange_for(record: ReplayRecord, tenant: str) -> Exchange:
    """The Exchange the server would build for this recorded request."""
    body = json.dumps(record.request, ensure_ascii=False).encode("utf-8")
    headers = {"content-type": "application/json", **record.headers}
    route = classify("POST", record.path, headers)
    model = record.request.get("model")
    return Exchange(
        method="POST",
        path=record.path,
        query="",
        dialect=route.dialect,
        kind=route.kind,
        headers=headers,
        tenant=tenant,
        body=body,
        json=record.request,
        stream=record.request.get("stream") is True,
        model=model if isinstance(model, str) else None,
        request_id=f"replay-{record.line}",
    )


def _sse_bytes(item: Any) -> bytes:
    if isinstance(item, str):
        text = item if item.startswith(("data:", "event:", ":")) else f"data: {item}"
    else:
        event = item.get("type") if isinstance(item, Mapping) else None
        data = json.dumps(item, ensure_ascii=False)
        text = (f"event: {event}\n" if isinstance(event, str) else "") + f"data: {data}"
    return (text.rstrip("\n") + "\n\n").encode("utf-8")


def feed_response(tap: ResponseTap, record: ReplayRecord) -> None:
    """Give the tap the recorded response the way the server would (one terminal call)."""
    response = record.response
    if isinstance(response, dict):
        tap.feed_json(record.status, json.dumps(response, ensure_ascii=False).encode("utf-8"))
    elif isinstance(response, list):
        for item in response:
            tap.feed_event(_sse_bytes(item))
        tap.finish()
    else:
        tap.closed("upstream_error")


# -- the replay loop --------------------------------------------------------------------


class Progress:
    """A dependency-free progress bar on stderr (only when it is a terminal, or forced)."""

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.total = max(total, 1)
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._last = 0.0
        self._start = time.monotonic()

    def update(self, done: int, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1 and done < self.total:
            return
        self._last = now
        width = 30
        filled = int(width * min(done, self.total) / self.total)
        rate = done / max(now - self._start, 1e-9)
        self.stream.write(
            f"\rreplay [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
            f"{100 * done // self.total:3d}% {rate:,.0f} req/s"
        )
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.update(self.total, force=True)
            self.stream.write("\n")
            self.stream.flush()


async def replay_records(
    records: Sequence[ReplayRecord | ReplayInputError],
    engine: GateEngine,
    *,
    source: str = "",
    policy: str = "",
    tenant: str = "anonymous",
    progress: Progress | None = None,
) -> ReplayResult:
    """Run every record through ``engine`` in order and collect what the gate did."""
    result = ReplayResult(source=source, policy=policy)
    started = time.monotonic()
    seen_events: dict[str, int] = {}
    order: dict[str, None] = {}
    for done, record in enumerate(records, start=1):
        if isinstance(record, ReplayInputError):
            result.bad_lines.append(str(record))
            continue
        result.requests += 1
        ex = exchange_for(record, tenant)
        try:
            decision = await engine.interceptor.before(ex)
        except Exception:  # noqa: BLE001 - like the live proxy: count it, go on
            result.gate_errors += 1
            decision = Decision()
        if decision.tap is not None:
            try:
                feed_response(decision.tap, record)
            except Exception:  # noqa: BLE001 - a failing tap is disabled live too
                result.gate_errors += 1
        result.actions[decision.action] += 1
        cid = decision.conversation_id
        if cid:
            order.setdefault(cid, None)
            events = engine.events(cid)
            for event in events[seen_events.get(cid, 0):]:
                kind = str(event.get("kind") or event_field(event, "transition") or "event")
                result.transitions[kind] += 1
                if is_destructive(event):
                    result.destructive.append(
                        DestructiveFinding(record.line, cid, decision.action, dict(event))
                    )
                    for item in required_bindings(event):
                        result.dropped_kinds[str(item.get("kind", "unknown"))] += 1
            seen_events[cid] = len(events)
        if progress is not None:
            progress.update(done)
    if progress is not None:
        progress.close()
    result.conversations = list(order)
    for cid in engine.conversation_ids():
        order.setdefault(cid, None)
    result.events = normalise_events({cid: engine.events(cid) for cid in order})
    result.seconds = time.monotonic() - started
    return result



# -- CLI --------------------------------------------------------------------------------


class _IndexedEventLog(EventLog):
    """The gate's event log, also indexed by conversation (cheap per-line lookups)."""

    def __init__(self) -> None:
        super().__init__(maxlen=10_000_000)
        self.by_conversation: dict[str, list[dict[str, Any]]] = {}

    def add(self, kind: str, action: str, **fields: Any) -> dict[str, Any]:
        event = super().add(kind, action, **fields)
        cid = event.get("conversation")
        if isinstance(cid, str):
            self.by_conversation.setdefault(cid, []).append(event)
        return event


class LocalGateEngine:
    """The gate exactly as ``serve`` builds it (tracker, policy, interceptor), with
    in-memory state and no server around it."""

    def __init__(self, policy: str, *, max_conversations: int = 1_000_000) -> None:
        from proxy.gate.interceptor import GateInterceptor
        from proxy.gate.tracker import Tracker, TrackerConfig
        from proxy.policy import PolicyHolder
        from proxy.state.memory import MemoryStore

        self._log = _IndexedEventLog()
        tracker = Tracker(MemoryStore(), TrackerConfig(max_conversations=max_conversations))
        self.gate = GateInterceptor(tracker, PolicyHolder(policy), events=self._log)
        self.gate.events = self._log  # an empty log is falsy: make sure ours is used

    @property
    def interceptor(self) -> Interceptor:
        return self.gate

    async def start(self) -> None:
        await self.gate.tracker.start()

    def events(self, conversation_id: str) -> list[dict[str, Any]]:
        return list(self._log.by_conversation.get(conversation_id, ()))

    def conversation_ids(self) -> list[str]:
        return [rec.id for rec in reversed(self.gate.tracker.conversations())]

    async def close(self) -> None:
        await self.gate.tracker.close()


async def build_engine(policy: str) -> LocalGateEngine:
    """The gate for ``policy`` (a preset name or a file), started.

    Raises :class:`proxy.yamlconf.ConfigError` (file:line) for a bad policy file.
    """
    engine = LocalGateEngine(policy)
    await engine.start()
    return engine


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``replay`` arguments."""
    parser.add_argument("file", metavar="FILE.jsonl", help="recorded requests, one JSON object per line")
    parser.add_argument("--policy", metavar="NAME|FILE", default="audit",
                        help="policy preset or file (default: audit, which only records)")
    parser.add_argument("--out", metavar="DIR", default=".",
                        help="where to write replay-report.json and replay-report.html (default: .)")
    parser.add_argument("--api-key-env", metavar="VAR",
                        help="environment variable holding the API key the traffic used "
                        "(only its hash is used, to scope conversations by tenant as live)")
    parser.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                        help="progress bar on stderr (auto: when stderr is a terminal and the file is large)")


async def _run_async(args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        records = list(iter_records(path))
    except OSError as exc:
        print(f"compaction-gate replay: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    secret = os.environ.get(args.api_key_env) if args.api_key_env else None
    enabled = {"always": True, "never": False}.get(args.progress)
    if enabled is None:
        enabled = sys.stderr.isatty() and len(records) >= 200
    try:
        engine = await build_engine(args.policy)
    except (ConfigError, OSError, ValueError) as exc:  # a bad policy is a usage error
        print(f"compaction-gate replay: policy error:\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = await replay_records(
            records,
            engine,
            source=str(path),
            policy=args.policy,
            tenant=tenant_of(secret),
            progress=Progress(len(records), enabled=enabled),
        )
    finally:
        await engine.close()
    json_path, html_path = write_reports(result, Path(args.out))
    sys.stdout.write(render_table(result))
    sys.stdout.write(f"reports: {json_path} {html_path}\n")
    for problem in result.bad_lines[:5]:
        print(f"compaction-gate replay: skipped {problem}", file=sys.stderr)
    if len(result.bad_lines) > 5:
        print(f"compaction-gate replay: skipped {len(result.bad_lines) - 5} more unreadable lines", file=sys.stderr)
    return exit_code(result)


def exit_code(result: ReplayResult) -> int:
    """3 when a destructive compaction was found (whatever else), 2 on bad input (no
    request, or lines that could not be read and were skipped), else 0."""
    if result.destructive:
        return EXIT_DESTRUCTIVE
    if result.requests == 0 or result.bad_lines:
        return EXIT_USAGE
    return EXIT_SAFE


def run(args: argparse.Namespace) -> int:
    """Entry point of the ``replay`` subcommand."""
    return asyncio.run(_run_async(args))
