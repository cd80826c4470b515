"""The tracker: identity cases without explicit ids (agent-style compactions from the
shared builders), explicit ids, side requests, replies, restart, concurrency, eviction."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.dialects import from_body
from proxy.gate.normalize import IncrementalNormalizer
from proxy.gate.tracker import Tracker, TrackerConfig
from proxy.gate.tracking import TrackingInterceptor
from proxy.server.hooks import Decision
from proxy.state import MemoryStore, SQLiteStore
from tests.gate.conftest import exchange
from tests.support.conversations import build_task, compact, summarization_request

KIND = {"openai": "chat", "anthropic": "messages"}


@pytest.fixture
async def tracker() -> Any:
    t = Tracker(MemoryStore())
    await t.start()
    yield t
    await t.close()


def chat(system: str, *turns: tuple[str, str]) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "system", "content": system}]
            + [{"role": r, "content": c} for r, c in turns]}


# --------------------------------------------------------------------------- no explicit id


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_langchain_compaction_is_matched(tracker: Tracker, dialect: str) -> None:
    conv = build_task("migration", seed=1, filler=12)
    first = await tracker.observe(exchange(conv.body(dialect), KIND[dialect]))
    c = compact(conv, "langchain", keep_last=20)
    after = c.after.body(dialect)
    key = "messages"
    texts = json.dumps(after[key])
    assert "Here is a summary of the conversation to date:" in texts
    obs = await tracker.observe(exchange(after, KIND[dialect]))
    assert obs is not None and first is not None
    assert obs.conversation_id == first.conversation_id and obs.relation == "compacted"
    assert obs.match.suffix_len >= 19 and obs.previous is not None
    assert obs.previous.digests == first.current.digests
    assert len(tracker.conversations()) == 1


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_plain_head_truncation_is_matched(tracker: Tracker, dialect: str) -> None:
    conv = build_task("upload", seed=2, filler=4)
    first = await tracker.observe(exchange(conv.body(dialect), KIND[dialect]))
    obs = await tracker.observe(exchange(compact(conv, "truncation").after.body(dialect), KIND[dialect]))
    assert first is not None and obs is not None
    assert (obs.conversation_id, obs.relation) == (first.conversation_id, "compacted")


async def test_claude_code_compaction_with_metadata_user_id(tracker: Tracker) -> None:
    conv = build_task("git", seed=3, filler=4)
    uid = "user_ab12_account_00000000-0000-4000-8000-000000000001_session_5d0c1a7e-2b3f-4c5d-8e9f-0a1b2c3d4e5f"
    body = dict(conv.to_anthropic(), metadata={"user_id": uid})
    first = await tracker.observe(exchange(body, "messages"))
    after = dict(compact(conv, "claude_code").after.to_anthropic(), metadata={"user_id": uid})
    assert "This session is being continued from a previous conversation" in json.dumps(after["messages"][0])
    obs = await tracker.observe(exchange(after, "messages"))
    assert first is not None and obs is not None
    assert first.conversation_id == obs.conversation_id == "5d0c1a7e-2b3f-4c5d-8e9f-0a1b2c3d4e5f"
    assert obs.relation == "compacted" and obs.previous is not None
    assert obs.explicit is not None and obs.explicit.source == "body:metadata.user_id"


async def test_two_conversations_sharing_a_system_prompt_are_not_merged(tracker: Tracker) -> None:
    a = await tracker.observe(exchange(chat("You are a sub-agent.", ("user", "Task A: audit the billing service"))))
    b = await tracker.observe(exchange(chat("You are a sub-agent.", ("user", "Task B: migrate the orders table"))))
    a2 = await tracker.observe(exchange(chat("You are a sub-agent.", ("user", "Task A: audit the billing service"),
                                             ("assistant", "on it"), ("user", "go on"))))
    b2 = await tracker.observe(exchange(chat("You are a sub-agent.", ("user", "Task B: migrate the orders table"),
                                             ("assistant", "ok"), ("user", "next"))))
    assert a and b and a2 and b2
    assert a.conversation_id != b.conversation_id
    assert (a2.conversation_id, a2.relation) == (a.conversation_id, "extend")
    assert (b2.conversation_id, b2.relation) == (b.conversation_id, "extend")


async def test_fork_is_a_new_conversation_linked_to_its_parent(tracker: Tracker) -> None:
    base = [("user", "Deploy service X"), ("assistant", "Which region?"), ("user", "eu-west-1")]
    a = await tracker.observe(exchange(chat("S", *base, ("assistant", "deploying"), ("user", "status?"))))
    f = await tracker.observe(exchange(chat("S", *base, ("assistant", "cancelled"), ("user", "try us-east-1"))))
    assert a and f and f.conversation_id != a.conversation_id
    assert f.relation == "fork" and f.parent_id == a.conversation_id


@pytest.mark.parametrize("style", ["claude_code", "codex", "langchain", "generic"])
async def test_summarization_side_request_is_attached(tracker: Tracker, style: str) -> None:
    conv = build_task("k8s", seed=4, filler=3)
    first = await tracker.observe(exchange(conv.to_openai()))
    side = await tracker.observe(exchange(summarization_request(conv, style).to_openai()))
    assert first is not None and side is not None
    assert (side.conversation_id, side.relation) == (first.conversation_id, "side_request")
    assert side.is_summarization_request
    rec = tracker.get(first.conversation_id)
    assert rec is not None and len(tracker.conversations()) == 1
    assert rec.digests == first.current.digests  # a side request does not advance it
    nxt = await tracker.observe(exchange(conv.then().to_openai()))
    assert nxt is not None and (nxt.conversation_id, nxt.relation) == (first.conversation_id, "extend")


async def test_tenants_are_isolated(tracker: Tracker) -> None:
    body = chat("S", ("user", "same words"))
    a = await tracker.observe(exchange(body, tenant="tenant-a"))
    b = await tracker.observe(exchange(body, tenant="tenant-b"))
    assert a and b and a.conversation_id != b.conversation_id


# --------------------------------------------------------------------------- explicit ids


@pytest.mark.parametrize(
    "headers,body_extra,expected",
    [
        ({"x-conversation-id": "conv-1"}, {}, "conv-1"),
        ({"x-session-id": "sess-1"}, {}, "sess-1"),
        ({"x-litellm-session-id": "ll-1"}, {}, "ll-1"),
        ({"x-claude-code-session-id": "cc-1"}, {}, "cc-1"),
        ({"session-id": "s-1"}, {}, "s-1"),
        ({"helicone-session-id": "h-1"}, {}, "h-1"),
        ({}, {"prompt_cache_key": "pck-1"}, "pck-1"),
    ],
)
async def test_explicit_ids(tracker: Tracker, headers: dict[str, str], body_extra: dict[str, Any], expected: str) -> None:
    o1 = await tracker.observe(exchange({**chat("S", ("user", "one")), **body_extra}, headers=headers))
    o2 = await tracker.observe(exchange({**chat("S", ("user", "entirely different")), **body_extra}, headers=headers))
    assert o1 and o2 and o1.conversation_id == o2.conversation_id == expected
    assert o2.relation == "compacted"  # same session, history replaced


async def test_explicit_session_keeps_sub_agent_threads_apart(tracker: Tracker) -> None:
    h = {"x-claude-code-session-id": "sess"}
    main = await tracker.observe(exchange(chat("Main agent", ("user", "build it")), headers=h))
    sub = await tracker.observe(exchange(chat("Sub agent", ("user", "search the code")), headers=h))
    again = await tracker.observe(exchange(chat("Main agent", ("user", "build it"), ("assistant", "ok"), ("user", "go")), headers=h))
    assert main and sub and again
    assert main.conversation_id == "sess" == again.conversation_id and again.relation == "extend"
    assert sub.conversation_id == "sess.2" and sub.relation == "new"


# --------------------------------------------------------------------------- replies


async def test_reply_recorded_non_streamed_and_next_request_extends(tracker: Tracker) -> None:
    obs = await tracker.observe(exchange(chat("S", ("user", "list pods"))))
    assert obs is not None
    resp = {"id": "x", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": None, "tool_calls": [{"id": "call_9", "type": "function",
                        "function": {"name": "kubectl", "arguments": "{\"args\":\"get pods\"}"}}]}}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}}
    tap = tracker.tap(obs)
    assert tap.feed_json(200, json.dumps(resp).encode()) == json.dumps(resp).encode()
    rec = tracker.get(obs.conversation_id)
    assert rec is not None and len(rec.digests) == 2 and rec.request_len == 1
    entry = rec.timeline[-1]
    assert entry.usage == {"input_tokens": 20, "output_tokens": 7, "cached_input_tokens": None}
    assert entry.status == "ok" and entry.reply_messages == 1
    body2 = chat("S", ("user", "list pods"))
    body2["messages"].append(resp["choices"][0]["message"])
    body2["messages"].append({"role": "tool", "tool_call_id": "call_9", "content": "pod-a Running"})
    obs2 = await tracker.observe(exchange(body2))
    assert obs2 is not None and obs2.relation == "extend" and obs2.match.prefix_len == 2
    assert obs2.previous is not None and obs2.previous.messages[-1].tool_calls[0].tool_name == "kubectl"


async def test_reply_recorded_streamed_anthropic(tracker: Tracker) -> None:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    obs = await tracker.observe(exchange(body, "messages"))
    assert obs is not None
    tap = tracker.tap(obs)
    events = [
        {"type": "message_start", "message": {"model": "claude-sonnet-4-5", "usage": {"input_tokens": 9}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"cmd\": \"git rev-parse HEAD\"}"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}},
        {"type": "message_stop"},
    ]
    for e in events:
        raw = f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode()
        assert tap.feed_event(raw) == [raw]  # passed through unchanged, immediately
    assert tap.finish() == []
    rec = tracker.get(obs.conversation_id)
    assert rec is not None and len(rec.digests) == 2
    assert rec.timeline[-1].usage == {"input_tokens": 9, "output_tokens": 12, "cached_input_tokens": None}
    nxt = {**body, "messages": body["messages"] + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "git rev-parse HEAD"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "3f2a9c1"}]}]}
    obs2 = await tracker.observe(exchange(nxt, "messages"))
    assert obs2 is not None and obs2.relation == "extend" and obs2.match.prefix_len == 2


async def test_upstream_error_and_disconnect_are_recorded(tracker: Tracker) -> None:
    obs = await tracker.observe(exchange(chat("S", ("user", "x"))))
    assert obs is not None
    tracker.tap(obs).feed_json(429, b'{"error": {"message": "slow down"}}')
    rec = tracker.get(obs.conversation_id)
    assert rec is not None and rec.timeline[-1].status == "http_429" and len(rec.digests) == 1
    obs2 = await tracker.observe(exchange({**chat("S", ("user", "x"), ("assistant", "a"), ("user", "y")), "stream": True}))
    assert obs2 is not None
    tap = tracker.tap(obs2)
    tap.feed_event(b'data: {"choices":[{"index":0,"delta":{"content":"par"}}]}\n\n')
    tap.closed("client_disconnected")
    assert tracker.get(obs.conversation_id) is rec and rec.timeline[-1].status == "client_disconnected"
    assert len(rec.digests) == 3  # a cut-short reply is not added to the history


async def test_interceptor_defers_tracking_until_the_request_is_sent(tracker: Tracker) -> None:
    icp = TrackingInterceptor(tracker)
    d = await icp.before(exchange(chat("S", ("user", "x"))))
    # nothing is tracked before the request goes upstream ...
    assert d.body is None and d.action == "none" and d.tap is None and d.after_send is not None
    assert tracker.conversations() == []
    # ... the deferred work resolves the conversation and brings the reply tap
    late = await d.after_send()
    assert late.conversation_id and late.tap is not None and late.body is None
    assert [r.id for r in tracker.conversations()] == [late.conversation_id]
    ex = dataclasses.replace(exchange({"model": "text-embedding-3-small", "input": "x"}, "chat"), kind="embeddings")
    d2 = await icp.before(ex)
    assert d2 == Decision()


# --------------------------------------------------------------------------- state


async def test_restart_on_sqlite_keeps_conversations(tmp_path: Path) -> None:
    path = tmp_path / "gate.db"
    t1 = Tracker(SQLiteStore(path))
    await t1.start()
    conv = build_task("terraform", seed=5, filler=3)
    a = await t1.observe(exchange(conv.to_openai()))
    b = await t1.observe(exchange(chat("other", ("user", "unrelated"))))
    assert a and b
    await t1.close()

    t2 = Tracker(SQLiteStore(path))
    await t2.start()
    assert {r.id for r in t2.conversations()} == {a.conversation_id, b.conversation_id}
    rec = t2.get(a.conversation_id)
    assert rec is not None and rec.digests == a.current.digests and rec.timeline[0].tokens == a.tokens
    # a compaction after the restart is matched, and the previous snapshot is restored from disk
    obs = await t2.observe(exchange(compact(conv, "langchain").after.to_openai()))
    assert obs is not None and (obs.conversation_id, obs.relation) == (a.conversation_id, "compacted")
    assert obs.previous is not None and obs.previous.digests == a.current.digests
    assert obs.previous.system == a.current.system and obs.previous.tools == a.current.tools
    await t2.close()


async def test_concurrent_requests_on_one_conversation(tmp_path: Path) -> None:
    t = Tracker(SQLiteStore(tmp_path / "c.db"), TrackerConfig(hot_conversations=1))
    await t.start()
    base = [("user", "start")]
    first = await t.observe(exchange(chat("S", *base), headers={"x-session-id": "s"}))
    assert first is not None
    await t.observe(exchange(chat("S", ("user", "evict the hot one")), headers={"x-session-id": "other"}))

    async def one(i: int) -> Any:
        turns = base + [(("assistant" if j % 2 else "user"), f"m{j}") for j in range(1, i + 1)]
        return await t.observe(exchange(chat("S", *turns), headers={"x-session-id": "s"}))

    results = await asyncio.gather(*[one(i) for i in range(1, 40)])
    rec = t.get("s")
    assert rec is not None and all(r is not None and r.conversation_id == "s" for r in results)
    assert [e.seq for e in rec.timeline] == list(range(1, 41))
    assert sorted(r.seq for r in results) == list(range(2, 41))
    latest = max(results, key=lambda r: r.seq)
    assert rec.request_len == len(rec.digests) and rec.digests == latest.current.digests
    hist = await t.history("s")
    assert hist is not None and hist.digests == rec.digests
    await t.close()
    t2 = Tracker(SQLiteStore(tmp_path / "c.db"))
    await t2.start()
    rec2 = t2.get("s")
    assert rec2 is not None and rec2.digests == rec.digests and len(rec2.timeline) == 40
    await t2.close()


async def test_ttl_and_lru_eviction(tmp_path: Path) -> None:
    now = [1000.0]
    store = SQLiteStore(tmp_path / "e.db")
    t = Tracker(store, TrackerConfig(ttl_seconds=100, max_conversations=3), clock=lambda: now[0])
    await t.start()
    ids = []
    for i in range(3):
        o = await t.observe(exchange(chat("S", ("user", f"conversation {i}"))))
        assert o is not None
        ids.append(o.conversation_id)
        now[0] += 1
    await t.observe(exchange(chat("S", ("user", "conversation 0"), ("assistant", "a"), ("user", "b"))))  # touch 0
    o4 = await t.observe(exchange(chat("S", ("user", "conversation 3"))))
    assert o4 is not None
    live = {r.id for r in t.conversations()}
    assert live == {ids[0], ids[2], o4.conversation_id}  # 1 was least recently used
    now[0] += 150
    o5 = await t.observe(exchange(chat("S", ("user", "conversation 5"))))
    assert o5 is not None and {r.id for r in t.conversations()} == {o5.conversation_id}
    # an evicted conversation's content no longer matches
    o6 = await t.observe(exchange(chat("S", ("user", "conversation 0"), ("assistant", "a"), ("user", "b"), ("user", "c"))))
    assert o6 is not None and o6.relation == "new"
    await t.close()
    t2 = Tracker(SQLiteStore(tmp_path / "e.db"), clock=lambda: now[0])
    await t2.start()
    assert {r.id for r in t2.conversations()} == {o5.conversation_id, o6.conversation_id}
    await t2.close()


async def test_no_secrets_in_state(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    t = Tracker(SQLiteStore(path))
    await t.start()
    ex = exchange(chat("S", ("user", "hi")), headers={"x-session-id": "sess", "x-custom": "sk-live-SECRET"})
    await t.observe(ex)
    await t.close()
    raw = path.read_bytes() + (path.with_name(path.name + "-wal").read_bytes() if path.with_name(path.name + "-wal").exists() else b"")
    assert b"sk-live-SECRET" not in raw


async def test_events_and_transition_refinement(tracker: Tracker) -> None:
    obs = await tracker.observe(exchange(chat("S", ("user", "x"))))
    assert obs is not None
    ev = tracker.add_event(obs.conversation_id, "compaction", action="warn", message="dropped 1 binding",
                           details={"verdict": "destructive", "dropped": [{"value": "3f2a9c1", "kind": "git_sha"}]},
                           request_seq=obs.seq)
    tracker.set_transition(obs.conversation_id, obs.seq, "summarize")
    rec = tracker.get(obs.conversation_id)
    assert ev is not None and rec is not None and rec.events == [ev] and rec.timeline[-1].transition == "summarize"
    assert tracker.add_event("nope", "x") is None


async def test_timeline_tokens_and_window_share(tracker: Tracker) -> None:
    await tracker.warm(["gpt-4o"])
    obs = await tracker.observe(exchange(chat("S", ("user", "hello there"))))
    assert obs is not None and obs.window == 128_000 and obs.exact
    assert obs.share == round(obs.tokens / 128_000, 4)
    full = tracker.accounting.count_snapshot("gpt-4o", obs.current)
    assert obs.tokens == full


# --------------------------------------------------------------------------- incremental normalisation

_items = st.lists(
    st.one_of(
        st.builds(lambda t: {"role": "user", "content": t}, st.text(max_size=20)),
        st.builds(lambda t: {"role": "assistant", "content": t}, st.text(max_size=20)),
        st.builds(lambda t: {"role": "system", "content": t}, st.text(max_size=10)),
        st.builds(lambda i, a: {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": a}}]}, st.integers(0, 9), st.text(max_size=10)),
        st.builds(lambda i, t: {"role": "tool", "tool_call_id": f"c{i}", "content": t}, st.integers(0, 9), st.text(max_size=10)),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_items, _items, st.booleans())
def test_incremental_normalisation_equals_full(first: list[Any], more: list[Any], same_tools: bool) -> None:
    norm = IncrementalNormalizer()
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    b1 = {"model": "gpt-4o", "messages": first, "tools": tools}
    n1 = norm.normalize("ns", "chat", b1)
    norm.remember("ns", "c", "chat", b1, n1)
    b2 = {"model": "gpt-4o", "messages": copy.deepcopy(first) + more, "tools": tools if same_tools else []}
    n2 = norm.normalize("ns", "chat", b2)
    full = from_body("chat", b2)
    assert n2.snapshot == full and n2.digests == full.digests
    assert [m.digest for m in n2.snapshot.messages] == [m.digest for m in full.messages]


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_incremental_path_is_used_for_extensions(tracker: Tracker, dialect: str) -> None:
    conv = build_task("kafka", seed=6, filler=5)
    await tracker.observe(exchange(conv.body(dialect), KIND[dialect]))
    body = conv.body(dialect)
    body["messages"] = copy.deepcopy(body["messages"]) + [{"role": "user", "content": "and now?"}]
    hits = tracker.normalizer.hits
    obs = await tracker.observe(exchange(body, KIND[dialect]))
    assert obs is not None and obs.relation == "extend" and tracker.normalizer.hits == hits + 1
    assert obs.current == from_body(KIND[dialect], body)


def test_the_process_exit_waits_for_background_loads(tmp_path: Path) -> None:
    """A load still running in its daemon thread (litellm's import takes seconds) is let
    finish before the interpreter is torn down, instead of being cut off mid-import."""
    import subprocess
    import sys

    marker = tmp_path / "finished"
    script = f"""
import asyncio, time
from pathlib import Path
from proxy.gate.background import in_daemon_thread

def slow_load():
    time.sleep(1.0)
    Path({str(marker)!r}).write_text("done")

async def main():
    in_daemon_thread(slow_load)  # not awaited: the program ends at once

asyncio.run(main())
"""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "done"


# --------------------------------------------------------------------------- Codex CLI 0.17x


def _codex_turn(*items: dict[str, Any]) -> dict[str, Any]:
    dev = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]}
    ask = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Apply the migration"}]}
    call = {"type": "function_call", "call_id": "c1", "name": "exec_command",
            "arguments": json.dumps({"cmd": "alembic upgrade head"})}
    out = {"type": "function_call_output", "call_id": "c1",
           "output": "Running upgrade 1a2b3c4d5e6f -> 4f9a2c1e7b3d"}
    return {"model": "gpt-5.1", "stream": True, "input": [dev, ask, call, out, *items]}


def _meta(kind: str) -> dict[str, str]:
    return {"session-id": "01a2-thread", "x-codex-turn-metadata": json.dumps(
        {"session_id": "01a2-thread", "request_kind": kind, "model": "gpt-5.1"}, separators=(",", ":"))}


async def test_codex_remote_compaction_is_a_summarization_call_and_keeps_its_conversation(tracker: Tracker) -> None:
    """A server-side compaction is recognised by its trigger item (no prompt text to
    match); the history it leaves (an encrypted compaction item) continues the same
    conversation."""
    first = await tracker.observe(exchange(_codex_turn(), "responses", headers=_meta("turn")))
    trig = await tracker.observe(exchange(_codex_turn({"type": "compaction_trigger"}), "responses",
                                          headers=_meta("turn")))
    assert first is not None and trig is not None and not first.is_summarization_request
    assert trig.is_summarization_request and trig.summarization_agent == "codex"
    after = _codex_turn()["input"][:2] + [{"type": "compaction", "encrypted_content": "gAAAA"},
                                          {"type": "message", "role": "user",
                                           "content": [{"type": "input_text", "text": "Roll it back"}]}]
    obs = await tracker.observe(exchange({"model": "gpt-5.1", "input": after}, "responses", headers=_meta("turn")))
    assert obs is not None and obs.conversation_id == first.conversation_id
    assert obs.relation == "compacted" and not obs.is_summarization_request


async def test_codex_turn_metadata_marks_a_compaction_request(tracker: Tracker) -> None:
    """Codex says request_kind "compaction" in its turn metadata whatever its prompt says
    (the local prompt text may change between versions; the metadata says it too)."""
    body = _codex_turn({"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": "Hand the task over to the next model."}]})
    plain = await tracker.observe(exchange(body, "responses", headers=_meta("turn")))
    assert plain is not None and not plain.is_summarization_request
    obs = await tracker.observe(exchange(body, "responses", headers=_meta("compaction")))
    assert obs is not None and obs.is_summarization_request and obs.summarization_agent == "codex"


async def test_state_hot_conversations_bounds_the_histories_kept_in_memory(tmp_path: Path) -> None:
    """``state.hot_conversations`` (config) is the tracker's hot limit and its
    normaliser's: of 5 conversations at most 3 keep their history in memory, and a
    request of one that left is still matched (its history read back from the store)."""
    from proxy.config import load_config
    from proxy.gate.wiring import build_tracker

    path = tmp_path / "config.yaml"
    path.write_text(f"state:\n  path: {tmp_path / 's.sqlite3'}\n  hot_conversations: 3\n")
    t = build_tracker(load_config(path))
    assert t.config.hot_conversations == 3 and t.normalizer.max_entries == 3 and t._hot.limit == 3
    await t.start()
    first = [await t.observe(exchange(chat("S", ("user", f"task {i}")))) for i in range(5)]
    assert all(o is not None for o in first)
    assert len(t._hot) <= 3
    again = await t.observe(exchange(chat("S", ("user", "task 0"), ("assistant", "ok"), ("user", "go on"))))
    assert again is not None and first[0] is not None
    assert (again.conversation_id, again.relation) == (first[0].conversation_id, "extend")
    await t.close()
