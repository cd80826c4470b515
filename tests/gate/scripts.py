"""Scripted conversations for tracker properties: several agents taking turns,
receiving replies, compacting, sending side requests and pasted transcripts, while the
state is read; :func:`run_script` plays a script and returns the settled state."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import strategies as st

from proxy.core.lineage_index import LineageIndex
from proxy.gate.tracker import Observation, Tracker
from proxy.state import MemoryStore
from tests.gate.conftest import exchange

MODEL = "gpt-4o"


def chat_reply(text: str) -> bytes:
    return json.dumps({"id": "r", "object": "chat.completion", "model": MODEL, "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()


def body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": MODEL, "messages": [dict(m) for m in messages]}


async def new_tracker(store: Any = None) -> Tracker:
    ticks = itertools.count(1)
    t = Tracker(store if store is not None else MemoryStore(), clock=lambda: float(next(ticks)))
    await t.start()
    await t.warm([MODEL])
    return t


_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="0123456789abcdef", min_size=7, max_size=64),  # identifier-like runs
    st.sampled_from(["git rev-parse HEAD", "upload id 5f1c…", "ok", "", "kubectl get deploy api -o yaml"]),
)
ops = st.lists(
    st.tuples(st.integers(0, 2), st.sampled_from(["turn", "turn", "reply", "compact", "side", "paste", "read"]), _text),
    max_size=25,
)


def assert_index_consistent(t: Tracker) -> None:
    """The lineage index's posting lists are those of an index rebuilt from scratch."""
    fresh = LineageIndex()
    for h in t.index.histories():
        fresh.upsert(h)
    assert {ns: t.index.postings_of(ns)["postings"] for ns in t.index._ns} == {
        ns: fresh.postings_of(ns)["postings"] for ns in fresh._ns
    }


async def run_script(
    script: list[tuple[int, str, str]], defer: bool, *, incremental: bool = True
) -> tuple[list[Any], list[tuple[int, Observation]]]:
    """Play ``script`` on a fresh tracker; returns every conversation's settled state and
    the observations (with the tokens a fresh full count gives for each request).
    ``defer``: observe with the accounting deferred; ``incremental=False``: the
    normaliser never reuses a previous request (every body normalised in full, so no
    provenance reaches lineage)."""
    t = await new_tracker()
    if not incremental:
        t.normalizer.max_per_namespace = 0
    convs = [[{"role": "system", "content": "You are an ops agent."}, {"role": "user", "content": f"task {i}"}]
             for i in range(3)]
    last: list[Observation | None] = [None, None, None]
    seen: list[tuple[int, Observation]] = []

    async def send(i: int, msgs: list[dict[str, Any]]) -> Observation | None:
        obs = await t.observe(exchange(body(msgs)), defer_accounting=defer)
        if obs is not None:
            seen.append((t.accounting.count_snapshot(MODEL, obs.current), obs))
        return obs

    for i, op, text in script:
        assert_index_consistent(t)
        msgs = convs[i]
        if op == "turn":
            msgs += [{"role": "assistant", "content": text or "."}, {"role": "user", "content": f"{text} next"}]
            last[i] = await send(i, msgs)
        elif op == "reply" and last[i] is not None:
            obs = last[i]
            assert obs is not None
            t.tap(obs).feed_json(200, chat_reply(text))
            msgs.append({"role": "assistant", "content": text})
            last[i] = None
        elif op == "compact" and len(msgs) > 4:
            convs[i] = [msgs[0], {"role": "user", "content": f"Here is a summary of the conversation to date: {text}"}] + msgs[-3:]
            last[i] = await send(i, convs[i])
        elif op == "side":
            await send(i, msgs + [{"role": "user", "content": "Summarize the conversation so far."}])
        elif op == "paste":
            transcript = "\n".join(f"{m['role']}: {m['content']}" for m in msgs[1:])
            await send(i, [{"role": "user", "content": f"Summarize this conversation:\n{transcript}"}])
        elif op == "read":
            t.conversations() if i == 0 else [t.get(r.id) for r in list(t._recs.values())]
    assert_index_consistent(t)
    state = [
        (rec.tokens, rec.window, rec.digests, rec.request_len,
         [(e.seq, e.relation, e.messages, e.new_messages, e.tokens, e.share, e.reply_tokens, e.status) for e in rec.timeline])
        for rec in sorted(t.conversations(), key=lambda r: r.created)
    ]
    await t.close()
    return state, seen
