"""The memory bound (``state.max_memory_mb``, :mod:`proxy.gate.budget`): counted, not timed.

The account is an estimate; these tests check it against what ``tracemalloc`` sees
allocated, that the bound holds while many more conversations arrive than fit, and that
what the bound dropped is read back from the store when a request needs it."""

from __future__ import annotations

import gc
import json
import random
import tracemalloc
from pathlib import Path
from typing import Any

from proxy.gate.tracker import Tracker, TrackerConfig
from proxy.state import SQLiteStore
from tests.gate.conftest import exchange

REPLY = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok, next step"}}]}).encode()


def history(seed: int, size: int = 100) -> list[dict[str, Any]]:
    """A system prompt, a task, then tool calls and results carrying opaque ids."""
    rng = random.Random(seed)
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an operations agent."},
        {"role": "user", "content": f"task {seed}: roll out {rng.getrandbits(48):012x}"},
    ]
    i = 0
    while len(msgs) < size:
        cid = f"call_{seed}_{i}"
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "git rev-parse HEAD"}'}}]},
            {"role": "tool", "tool_call_id": cid,
             "content": f"HEAD {rng.getrandbits(160):040x}\nimage sha256:{rng.getrandbits(256):064x} ready"},
        ]
        i += 1
    return msgs


async def play(t: Tracker, seed: int, turns: int = 2) -> list[str]:
    """One conversation of ``turns`` requests; the relation of each."""
    msgs = history(seed)
    out = []
    for _ in range(turns):
        obs = await t.observe(exchange({"model": "gpt-4o", "messages": msgs}))
        assert obs is not None
        out.append(obs.relation)
        t.tap(obs).feed_json(200, REPLY)
        t.settle_all()
        msgs = [*msgs, {"role": "assistant", "content": "ok, next step"}, {"role": "user", "content": f"go on {seed}"}]
    return out


async def test_the_estimate_follows_what_is_allocated(tmp_path: Path) -> None:
    t = Tracker(SQLiteStore(tmp_path / "s.db"))
    await t.start()
    for seed in range(20):  # warm every cache that does not grow with conversations
        await play(t, seed)
    await t.flush()
    gc.collect()
    tracemalloc.start()
    before, est0 = tracemalloc.get_traced_memory()[0], t.budget.total
    n = 60
    for seed in range(1000, 1000 + n):
        await play(t, seed)
    await t.flush()
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    estimated = t.budget.total - est0
    report = t.memory()
    assert report["conversations"] == 20 + n and report["hot"] == 20 + n
    # the per-message caches (token counts, line fingerprints, hints) are not in the
    # account: what is allocated may exceed the estimate by them, but not by much more
    assert 0.5 * grown <= estimated <= 2.0 * grown, (estimated / n, grown / n)
    await t.close()


async def test_the_bound_holds_and_what_it_dropped_is_read_back(tmp_path: Path) -> None:
    # every record (~36 KB estimated for 100 messages) and about a dozen hot histories
    limit = 5_200_000
    t = Tracker(SQLiteStore(tmp_path / "s.db"), TrackerConfig(max_memory_bytes=limit, max_conversations=10_000))
    await t.start()
    n = 120
    for seed in range(n):
        await play(t, seed, turns=1)
        assert t.budget.total <= limit, t.memory()
    report = t.memory()
    assert report["conversations"] == n  # every conversation still tracked ...
    assert 0 < report["hot"] < n // 4  # ... with most histories dropped from memory
    # a conversation whose history was dropped continues where it was: it is read back
    msgs = history(0) + [{"role": "assistant", "content": "ok, next step"}, {"role": "user", "content": "go on 0"}]
    first = t.conversations()[-1]  # the least recently seen: seed 0
    assert first.id not in t._hot  # its history left memory
    obs = await t.observe(exchange({"model": "gpt-4o", "messages": msgs}))
    assert obs is not None and obs.relation == "extend" and obs.previous is not None
    assert obs.conversation_id == first.id
    assert len(obs.previous.messages) == 100 and obs.previous.messages[-1].text == "ok, next step"
    assert t.budget.total <= limit
    await t.close()


async def test_beyond_the_histories_conversations_leave_memory_not_the_store(tmp_path: Path) -> None:
    limit = 200_000  # below what 120 conversations need even without their histories
    path = tmp_path / "s.db"
    t = Tracker(SQLiteStore(path), TrackerConfig(max_memory_bytes=limit, max_conversations=10_000))
    await t.start()
    ids = set()
    for seed in range(120):
        msgs = history(seed)
        obs = await t.observe(exchange({"model": "gpt-4o", "messages": msgs}))
        assert obs is not None
        ids.add(obs.conversation_id)
        assert t.budget.total <= limit, t.memory()
    kept = len(t.conversations())
    assert 1 <= kept < 120
    assert t.memory()["hot"] == 0 or kept == 1
    await t.close()
    t2 = Tracker(SQLiteStore(path))
    await t2.start()
    assert {r.id for r in t2.conversations()} == ids  # all of them are in the store
    await t2.close()
    # restarted under the bound, it loads what fits (the most recently seen)
    t3 = Tracker(SQLiteStore(path), TrackerConfig(max_memory_bytes=limit, max_conversations=10_000))
    await t3.start()
    assert 1 <= len(t3.conversations()) < 120 and t3.budget.total <= limit
    await t3.close()


async def test_what_left_memory_leaves_the_stores_memory_too(tmp_path: Path) -> None:
    # The SQLite writer remembers each conversation's committed digests, to rewrite only
    # the chunks of its digest list that changed. Past the memory bound that memory must
    # go with the conversations the tracker stops keeping: ~10 KB per 100-message
    # conversation nobody counted, growing without a bound (issue 15).
    limit = 200_000
    store = SQLiteStore(tmp_path / "s.db")
    t = Tracker(store, TrackerConfig(max_memory_bytes=limit, max_conversations=10_000))
    await t.start()
    for seed in range(60):
        await play(t, seed, turns=1)
    await t.flush()
    kept = {r.id for r in t.conversations()}
    assert 1 <= len(kept) < 60
    assert set(store._written) <= kept and store._written
    await t.close()
    # nothing of what is stored went with it: every conversation reads back whole
    again = SQLiteStore(tmp_path / "s.db")
    await again.open()
    back = await again.load()
    assert len(back) == 60 and all(len(r.digests) == 100 for r in back)
    assert len(await again.load_messages(back[0].digests)) == 100
    await again.close()
