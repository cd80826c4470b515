"""The incremental normaliser finds the request a body extends by the identity of the
parsed items it shares with it (as the server's incremental JSON parse produces them),
and falls back to comparing: either way the result is the full normalisation's, and
the identity index always lists exactly the remembered requests."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.dialects import from_body
from proxy.gate.normalize import IncrementalNormalizer, _by_comparison
from tests.support.counting import Counted

_item = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, st.text(max_size=12)),
    st.builds(lambda t: {"role": "assistant", "content": t}, st.text(max_size=12)),
    st.builds(lambda i, t: {"role": "tool", "tool_call_id": f"c{i}", "content": t}, st.integers(0, 3), st.text(max_size=8)),
)

# (conversation, what its next body is, new items): "extend" shares the objects of the
# conversation's last body, "copy" is equal but re-parsed, "fork" shares a prefix of
# another conversation's objects, "forget" drops the conversation
_ops = st.lists(
    st.tuples(st.integers(0, 5), st.sampled_from(["extend", "extend", "copy", "fork", "forget"]),
              st.lists(_item, min_size=1, max_size=3), st.integers(0, 5)),
    max_size=30,
)


def _index_is_exact(norm: IncrementalNormalizer) -> None:
    listed = {(ns, ident, key) for ns, last in norm._by_last.items() for ident, keys in last.items() for key in keys}
    expected = {(ns, id(e.items[-1]), key) for ns, b in norm._by_ns.items() for key, e in b.items() if e.items}
    assert listed == expected
    assert all(keys for last in norm._by_last.values() for keys in last.values())


def _scan_every_entry(bucket: Any, api: str, items: list[Any]) -> str | None:
    """What the index must find: every remembered entry compared, the longest items
    ``items`` starts with, the most recently remembered of equally long ones."""
    best_key, best_k = None, 0
    for key, e in reversed(bucket.items()):
        k = len(e.items)
        if e.api == api and 0 < k <= len(items) and e.norm.snapshot.messages and items[:k] == e.items and k > best_k:
            best_key, best_k = key, k
    return best_key


def _sig_index_is_exact(norm: IncrementalNormalizer) -> None:
    for ns, bucket in norm._by_ns.items():
        index = norm._by_sig[ns]
        index.settle(bucket)
        listed = {key: at for at, keys in index.keys.items() for key in keys}
        assert listed == index.where
        assert sorted(listed) == sorted(k for k, e in bucket.items() if e.items and e.norm.snapshot.messages)
        counts = {(a, s, k): n for (a, s), ks in index.firsts.items() for k, n in ks.items()}
        expected: dict[Any, int] = {}
        for a, s, k, _ in listed.values():
            expected[(a, s, k)] = expected.get((a, s, k), 0) + 1
        assert counts == expected
    assert set(norm._by_sig) == set(norm._by_ns)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ops, st.integers(2, 6))
def test_shared_objects_find_the_extended_request_like_comparing(ops: list[tuple[int, str, list[Any], int]], cap: int) -> None:
    norm = IncrementalNormalizer(max_per_namespace=cap)
    system = {"role": "system", "content": "S"}
    last: dict[int, list[Any]] = {}
    for conv, how, new, other in ops:
        key = f"c{conv}"
        if how == "forget":
            norm.forget("ns", key)
            last.pop(conv, None)
            _index_is_exact(norm)
            _sig_index_is_exact(norm)
            continue
        if how == "fork" and other in last:
            base = last[other][: max(1, len(last[other]) - 1)]
        else:
            base = last.get(conv, [system])
            if how == "copy":
                base = copy.deepcopy(base)
        items = [*base, *new]
        body = {"model": "gpt-4o", "messages": items}
        bucket = norm._by_ns.get("ns")
        if bucket:  # re-parsed (found by comparing only): what comparing every entry finds
            found = _by_comparison(bucket, norm._by_sig["ns"], "chat", copy.deepcopy(items))
            assert found[1] == _scan_every_entry(bucket, "chat", items)
        mine = bucket.get(key) if bucket and how == "extend" else None
        n = norm.normalize("ns", "chat", body)
        full = from_body("chat", body)
        assert n.snapshot == full and n.digests == full.digests
        if mine is not None and mine.items is base and mine.norm.snapshot.messages:
            # it shares the objects of its conversation's last request: that request is
            # the one reused (another with equal content is not preferred to it)
            assert n.reused_from == key and n.reused == len(mine.norm.snapshot.messages)
        elif how == "copy" and bucket and n.reused_from is None:
            assert _by_comparison(bucket, norm._by_sig["ns"], "chat", items)[0] is None  # nothing to reuse by comparing either
        norm.remember("ns", key, "chat", body, n)
        last[conv] = items
        _index_is_exact(norm)
        _sig_index_is_exact(norm)


def test_a_body_sharing_objects_is_found_without_comparing_others() -> None:
    norm = IncrementalNormalizer()
    system = {"role": "system", "content": "S"}
    for i in range(40):  # 40 conversations of one namespace, the same system prompt
        items = [system, {"role": "user", "content": f"agent {i}"}]
        body = {"model": "gpt-4o", "messages": items}
        norm.remember("ns", f"c{i}", "chat", body, norm.normalize("ns", "chat", body))
    mine = norm._by_ns["ns"]["c7"].items
    body = {"model": "gpt-4o", "messages": [*mine, {"role": "assistant", "content": "ok"}]}

    class NoCompare(dict[str, Any]):
        def __eq__(self, other: object) -> bool:
            raise AssertionError("compared another conversation's items")

        def __ne__(self, other: object) -> bool:
            raise AssertionError("compared another conversation's items")

        __hash__ = None  # type: ignore[assignment]

    for key, e in norm._by_ns["ns"].items():  # any comparison with another conversation fails loudly
        if key != "c7":
            e.items[-1] = NoCompare(e.items[-1])
    n = norm.normalize("ns", "chat", body)
    assert n.reused_from == "c7" and n.reused == 1  # its one message (the system prompt is not one)


def test_an_extended_request_knows_its_last_user_message_without_a_pass() -> None:
    # issue 15: the next request's last user message follows from the remembered
    # request's and its new messages (a tool loop's is far back)
    norm = IncrementalNormalizer()
    items: list[Any] = [{"role": "system", "content": "S"}, {"role": "user", "content": "go"}]
    items += [{"role": "assistant", "content": f"step {i}"} for i in range(30)]
    body = {"model": "gpt-4o", "messages": items}
    first = norm.normalize("ns", "chat", body)
    assert first.snapshot.last_user() == 0
    norm.remember("ns", "c", "chat", body, first)
    for more, expect in (([{"role": "assistant", "content": "more"}], 0), ([{"role": "user", "content": "next"}], 31)):
        body = {"model": "gpt-4o", "messages": [*items, *more]}
        n = norm.normalize("ns", "chat", body)
        assert n.reused == 31
        assert n.snapshot._last_user == expect  # known before anyone asked
        assert n.snapshot.last_user() == expect


def test_a_namespace_with_many_agents_extends_each_one_s_last_request() -> None:
    """100 agents on one key (one namespace), turns interleaved: after each agent's first
    request every next one extends that agent's remembered request (a hit reusing all of
    its messages), none is normalised whole again — the per-namespace bound holds more
    conversations than a team runs agents at once (at 64, agents past the 64th made
    every request of every agent a full normalisation)."""
    norm = IncrementalNormalizer(max_entries=512)
    system = {"role": "system", "content": "S"}
    convs = [[system, {"role": "user", "content": f"agent {i}"}] for i in range(100)]
    reused: list[int] = []
    for turn in range(3):
        for i, items in enumerate(convs):
            items.append({"role": "assistant", "content": f"step {turn} of agent {i}"})
            body = {"model": "gpt-4o", "messages": list(items)}
            n = norm.normalize("ns", "chat", body)
            assert n.snapshot.digests == from_body("chat", body).digests
            if turn:
                reused.append(n.reused)
                assert n.reused_from == f"c{i}"
            norm.remember("ns", f"c{i}", "chat", body, n)
    assert norm.misses == 100 and norm.hits == 200
    assert reused == [1 + t for t in (1, 2) for _ in range(100)]  # user + every earlier step


class _Touched(dict):  # type: ignore[type-arg]
    """A bucket that counts the entries read from it."""

    def __init__(self, d: Any) -> None:
        super().__init__(d)
        self.touched = 0

    def __getitem__(self, key: Any) -> Any:
        self.touched += 1
        return dict.__getitem__(self, key)

    def get(self, key: Any, default: Any = None) -> Any:
        self.touched += 1
        return dict.get(self, key, default)


def test_a_new_conversation_compares_no_remembered_one() -> None:
    # 100 one-message conversations of one key (each a probe, a title request...): once
    # indexed, the 101st is found new without reading any of them, and one that extends
    # the 37th reads and compares that one alone
    norm = IncrementalNormalizer()
    for i in range(100):
        body = {"model": "gpt-4o", "messages": [Counted(role="user", content=f"probe {i}")]}
        norm.remember("ns", f"c{i}", "chat", body, norm.normalize("ns", "chat", body))
    bucket, index = _Touched(norm._by_ns["ns"]), norm._by_sig["ns"]
    index.settle(bucket)  # what the 100 remembered since the last comparison cost once
    bucket.touched = Counted.compared = 0
    assert _by_comparison(bucket, index, "chat", [Counted(role="user", content="probe 100")]) == (None, None)
    assert bucket.touched == 0 and Counted.compared == 0
    found = _by_comparison(bucket, index, "chat", [Counted(role="user", content="probe 37"), Counted(role="user", content="more")])
    assert found[1] == "c37"
    assert bucket.touched == 1 and Counted.compared == 1
    n = norm.normalize("ns", "chat", {"model": "gpt-4o", "messages": [Counted(role="user", content="probe 37"), Counted(role="user", content="more")]})
    assert n.reused_from == "c37" and n.reused == 1


def test_of_equal_remembered_requests_the_latest_is_extended() -> None:
    # two conversations with the same history (a fork not yet diverged): a re-parsed body
    # extending it is attributed to the one remembered last, as comparing every entry does
    norm = IncrementalNormalizer()
    history = [{"role": "system", "content": "S"}, {"role": "user", "content": "same start"}]
    for key in ("first", "second", "third"):
        body = {"model": "gpt-4o", "messages": copy.deepcopy(history)}
        norm.remember("ns", key, "chat", body, norm.normalize("ns", "chat", body))
    body = {"model": "gpt-4o", "messages": copy.deepcopy(history)}
    norm.remember("ns", "second", "chat", body, norm.normalize("ns", "chat", body))  # again: now the latest
    items = [*copy.deepcopy(history), {"role": "user", "content": "next"}]
    assert _scan_every_entry(norm._by_ns["ns"], "chat", items) == "second"
    assert norm.normalize("ns", "chat", {"model": "gpt-4o", "messages": items}).reused_from == "second"
    norm.forget("ns", "second")
    assert norm.normalize("ns", "chat", {"model": "gpt-4o", "messages": copy.deepcopy(items)}).reused_from == "third"
