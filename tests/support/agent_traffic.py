"""Multi-conversation agent traffic, with compactions of every kind, sent through one gate
or several replicas of it; what every request met, in a form two runs can compare.

:func:`build_traffic` interleaves ``n`` conversations (each a task of
:mod:`tests.support.conversations`, in the OpenAI or Anthropic dialect, two tenants,
some with a session header, some streamed): the history grows turn by turn, the agent's
summarization call comes (for the styles that make one), then the compacted history —
every style: summaries of eight agents, plain truncation, tool results cleared in place
— dropping one required binding, then the agent's next turns after it, and a retry of
the last one. :func:`responder` is the scripted model: an echo, except that after a
compaction it invents a migration revision (the tripwire's case).

:func:`send` plays the traffic in order, each request to the next base URL of ``urls``
(round-robin, as a balancer would, or always the same one), and returns per request the
status, the gate's action header, the conversation (renamed by first appearance), and
the body upstream received (the repair, when there was one).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from tests.support.conversations import (
    MASK_STYLES,
    STYLES,
    TASKS,
    Conversation,
    Turn,
    build_task,
    compact,
    summarization_request,
)
from tests.support.fake_upstream import Call, FakeUpstream, Reply, ToolCall

__all__ = [
    "Outcome",
    "Request",
    "assert_same",
    "build_traffic",
    "events_of",
    "gate_config",
    "played",
    "responder",
    "send",
    "single_process",
]

KEYS = ("sk-traffic-tenant-a-0001", "sk-traffic-tenant-b-0002")
INVENTED = "9f8e7d6c5b4a"
#: Styles that make a summarization call before compacting.
_SUMMARIZING = ("claude_code", "codex", "langchain", "openhands", "aider", "letta", "cline", "goose")


@dataclass(frozen=True)
class Request:
    dialect: str
    headers: dict[str, str]
    body: dict[str, Any]
    #: what the model answers: the conversation's own next turn (so the agent's next
    #: request resends exactly the reply), else ``None`` (see :func:`responder`)
    reply: Reply | None = None

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.dialect == "openai" else "/v1/messages"


@dataclass(frozen=True)
class Outcome:
    status: int
    action: str
    conversation: str
    upstream: Any


def _body(conv: Conversation, dialect: str, stream: bool) -> dict[str, Any]:
    body = conv.body(dialect)  # type: ignore[arg-type]
    if stream:
        body["stream"] = True
    return body


def _script(i: int, session: bool = False) -> list[Request]:
    task = TASKS[i % len(TASKS)]
    styles = STYLES + MASK_STYLES
    style = styles[(i * 5) % len(styles)]
    dialect = "openai" if i % 2 == 0 else "anthropic"
    stream = i % 3 == 2
    conv = build_task(task, seed=i, filler=1)
    first = conv.turns[0]  # two agents given the very same task would be one conversation
    conv = conv.with_turns((replace(first, text=f"{first.text} (ticket OPS-{1000 + i})"), *conv.turns[1:]))
    conv = conv.then(Turn("assistant", "This part is done; waiting for the next instruction."))
    headers = {"authorization": f"Bearer {KEYS[i % 2]}"} if dialect == "openai" else {
        "x-api-key": KEYS[i % 2], "anthropic-version": "2023-06-01"}  # fmt: skip
    if i % 4 == 1 or session:
        headers["x-session-id"] = f"traffic-session-{i:03d}"
    out: list[Request] = []
    for k in range(1, len(conv.turns)):  # the history grows: a request before each model turn
        if conv.turns[k].role == "assistant" and conv.turns[k - 1].role != "assistant":
            nxt = conv.turns[k]
            reply = Reply(
                text=nxt.text or None,
                tool_calls=[ToolCall(c.name, json.dumps(c.arguments), c.id) for c in nxt.calls],
            )
            out.append(Request(dialect, headers, _body(conv.with_turns(conv.turns[:k]), dialect, stream), reply))
    if style in _SUMMARIZING:
        out.append(Request(dialect, headers, _body(summarization_request(conv, style), dialect, False)))
    required = [p.value for p in conv.bindings]
    c = compact(conv, style, drop=required[:1])
    after = c.after.then(Turn("user", "continue with the next step"))
    out.append(Request(dialect, headers, _body(after, dialect, stream)))
    later = after.then(Turn("assistant", "Checking the state first."), Turn("user", "continue, then report"))
    out.append(Request(dialect, headers, _body(later, dialect, stream)))
    out.append(Request(dialect, headers, _body(later, dialect, stream)))  # a retry
    return out


def build_traffic(n: int, *, sessions: bool = False) -> list[Request]:
    """``n`` conversations' requests, interleaved (one of each in turn). ``sessions``:
    every conversation names itself (``x-session-id``) — none is matched by content,
    whose fallback for a continued conversation (the most recently seen one with the
    same system prompt) depends on which request came last by milliseconds."""
    scripts = [_script(i, sessions) for i in range(n)]
    return [r for batch in itertools.zip_longest(*scripts) for r in batch if r is not None]


def _key(messages: Any) -> str:
    return json.dumps(messages, sort_keys=True)


def responder(traffic: Sequence[Request]) -> Callable[[Call], Reply]:
    """The scripted model of ``traffic``: a growing history gets the conversation's own
    next turn; after a compaction it invents a migration revision; anything else (a
    summarization call, a repaired request) an echo. Deterministic in the request."""
    replies = {_key(r.body["messages"]): r.reply for r in traffic if r.reply is not None}

    def answer(call: Call) -> Reply:
        body = call.json if isinstance(call.json, dict) else {}
        known = replies.get(_key(body.get("messages")))
        if known is not None:
            return known
        last = call.last_user_text()
        if "continue" in last:
            return Reply(text="", tool_calls=[ToolCall("bash", {"command": f"alembic downgrade {INVENTED}"})])
        return Reply(text=f"noted ({len(call.messages())} messages): {last[:40]}")

    return answer


async def send(
    urls: Sequence[str], traffic: Sequence[Request], fake: FakeUpstream, *, fresh_connections: bool = False
) -> tuple[list[Outcome], list[str]]:
    """Play ``traffic`` in order, round-robin over ``urls`` (see the module docstring);
    also returns the conversation ids in order of first appearance.
    ``fresh_connections``: a new connection per request (the kernel or a balancer then
    picks a process per request, not per kept-alive connection)."""
    rename: dict[str, str] = {}
    out: list[Outcome] = []
    targets = itertools.cycle(urls)
    connector = aiohttp.TCPConnector(force_close=fresh_connections)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60), connector=connector) as session:
        for req in traffic:
            seen = len(fake.requests)
            async with session.post(next(targets) + req.path, json=req.body, headers=req.headers) as resp:
                await resp.read()
                cid = resp.headers.get("x-compaction-gate-conversation", "")
                alias = rename.setdefault(cid, f"c{len(rename) + 1}")
                got = fake.requests[seen:]
                upstream = got[0].json if got else None
                out.append(Outcome(resp.status, resp.headers.get("x-compaction-gate-action", ""), alias, upstream))
    return out, [c for c in rename if c]


async def events_of(url: str, conversations: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """The gate's events of each conversation (``GET /gate/events``), oldest first."""
    out: dict[str, list[dict[str, Any]]] = {}
    async with aiohttp.ClientSession() as session:
        for cid in conversations:
            async with session.get(url + "/gate/events", params={"conversation": cid, "limit": "1000"}) as resp:
                assert resp.status == 200, await resp.text()
                out[cid] = (await resp.json())["events"]
    return out


Played = tuple[list[Outcome], list[dict[str, Any]]]


async def played(urls: Sequence[str], fake: FakeUpstream, traffic: Sequence[Request], *, fresh_connections: bool = False) -> Played:
    """:func:`send` ``traffic`` through ``urls``; the outcomes and the events (read back
    through ``urls[0]``, normalised to compare across runs)."""
    from proxy.replay import normalise_events

    fake.requests.clear()
    outcomes, cids = await send(urls, traffic, fake, fresh_connections=fresh_connections)
    return outcomes, normalise_events(await events_of(urls[0], cids))


def gate_config(upstream: str, state: Any, workers: int = 1) -> Any:
    """The gate of these tests (``ProxyConfig``): both dialects to ``upstream``, the
    default policy, ``state`` (a ``StateSettings``)."""
    from proxy.config import ProxyConfig, ServerSettings, Upstream

    return ProxyConfig(
        server=ServerSettings(host="127.0.0.1", port=0, log_level="warning", workers=workers),
        upstreams=(
            Upstream(name="openai", base_url=upstream + "/v1", dialect="openai"),
            Upstream(name="anthropic", base_url=upstream, dialect="anthropic"),
        ),
        state=state,
        policy="default",
    )


async def single_process(fake: FakeUpstream, traffic: Sequence[Request]) -> Played:
    """The reference: ``traffic`` through one gate process keeping its state in memory."""
    from proxy.config import StateSettings
    from proxy.demo import build_gate_app, start_app

    runner, url = await start_app(build_gate_app(gate_config(fake.url, StateSettings(backend="memory"))))
    try:
        return await played([url], fake, traffic)
    finally:
        await runner.cleanup()


def assert_same(single: Played, other: Played) -> None:
    """Every request met the same status, action, conversation and upstream body, and
    the events are the same."""
    (one, one_events), (many, many_events) = single, other
    assert len(one) == len(many)
    for n, (a, b) in enumerate(zip(one, many, strict=True)):
        differ = [f for f in ("status", "action", "conversation", "upstream") if getattr(a, f) != getattr(b, f)]
        assert a == b, f"request {n}: {differ} differ; one process {a.action}/{a.status}, the others {b.action}/{b.status}"
    assert many_events == one_events
