"""The incremental body parser is exactly ``json.loads`` (value or error), whatever was
cached before: property-tested on random bodies, random prefix edits, whitespace and
escape variants, keys after the message array, and broken bodies. Every check also
runs the same sequence through a twin cache the way a large body is parsed off the
event loop (``plan``, ``decode_part`` across a pickle boundary as to a worker process,
``finish``): the same outcomes and the same work counted."""

from __future__ import annotations

import json
import pickle
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.jsonbody import BodyCache, Decoded, decode_part


def outcome(fn: Any, raw: bytes) -> tuple[str, str]:
    """repr of the value (type-exact: 1, 1.0 and True differ; key order counts; NaN
    compares equal), or the exception's type and message."""
    try:
        return ("ok", repr(fn(raw)))
    except Exception as exc:  # noqa: BLE001
        return (type(exc).__name__, str(exc))


#: each cache checked, with its twin fed the same bodies through the split path
_TWINS: dict[int, tuple[BodyCache, BodyCache]] = {}


def _across(decoded: Decoded) -> Decoded:
    """As a worker process would hand it back."""
    return pickle.loads(pickle.dumps(decoded))


def split_loads(cache: BodyCache, raw: bytes, scope: str) -> Any:
    """``cache.loads`` the way :mod:`proxy.server.bodyparse` does it for a large body."""
    plan = cache.plan(raw, scope)
    decoded = _across(decode_part(*plan.part()))
    if decoded[0] == "bail":
        decoded = _across(decode_part(raw, 0, "loads"))
    return cache.finish(plan, decoded)


def check(cache: BodyCache, raw: bytes, scope: str = "t") -> None:
    expected = outcome(json.loads, raw)
    assert outcome(lambda r: cache.loads(r, scope), raw) == expected
    twin = _TWINS.setdefault(
        id(cache), (cache, BodyCache(min_size=cache.min_size, max_per_scope=cache.max_per_scope, max_bytes=cache.max_bytes))
    )[1]
    assert outcome(lambda r: split_loads(twin, r, scope), raw) == expected
    assert twin.stats == cache.stats


# --------------------------------------------------------------------------- values

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12) | st.sampled_from(
    ["", "é", "日本", "\U0001f600", "a\"b", "back\\slash", "\n\t", "\x00\x1f", "\u2028"]
)
_scalar = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | _text
)
_value = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system"]), "content": _value}
) | _value


def _ws(rng: random.Random) -> str:
    return rng.choice(["", "", "", " ", "\n", "\t", " \r\n  "])


def _string(s: str, rng: random.Random) -> str:
    """A JSON string for ``s`` with random escape choices."""
    if rng.random() < 0.5:
        return json.dumps(s, ensure_ascii=rng.random() < 0.5)
    out = ['"']
    for ch in s:
        r = rng.random()
        if ch in '"\\' or ord(ch) < 0x20:
            out.append(json.dumps(ch)[1:-1])
        elif r < 0.2 and ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        elif r < 0.25 and ch == "/":
            out.append("\\/")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def ser(v: Any, rng: random.Random) -> str:
    """Serialise with random whitespace between tokens and random escapes."""
    if isinstance(v, dict):
        if not v:
            return "{" + _ws(rng) + "}"
        parts = [_ws(rng) + _string(k, rng) + _ws(rng) + ":" + _ws(rng) + ser(x, rng) + _ws(rng) for k, x in v.items()]
        return "{" + ",".join(parts) + "}"
    if isinstance(v, list):
        if not v:
            return "[" + _ws(rng) + "]"
        return "[" + ",".join(_ws(rng) + ser(x, rng) + _ws(rng) for x in v) + "]"
    if isinstance(v, str):
        return _string(v, rng)
    return json.dumps(v)


class Body:
    """A body as texts: the head (up to ``[``), one text per element, the tail. Unedited
    parts keep their exact text (as agents resend them), edited ones are re-serialised
    with fresh random whitespace and escapes."""

    def __init__(self, head: list[tuple[str, Any]], key: str, msgs: list[Any], tail: list[tuple[str, Any]],
                 rng: random.Random) -> None:
        self.rng = rng
        self.head = head
        self.key = key
        self.tail = tail
        self.head_text = self._head()
        self.items = [self._item(m) for m in msgs]
        self.tail_text = self._tail()

    def _pairs(self, pairs: list[tuple[str, Any]]) -> list[str]:
        rng = self.rng
        return [_ws(rng) + _string(k, rng) + _ws(rng) + ":" + _ws(rng) + ser(x, rng) + _ws(rng) for k, x in pairs]

    def _head(self) -> str:
        rng = self.rng
        key = _ws(rng) + _string(self.key, rng) + _ws(rng) + ":" + _ws(rng) + "["
        return _ws(rng) + "{" + "".join(p + "," for p in self._pairs(self.head)) + key

    def _item(self, m: Any) -> str:
        return _ws(self.rng) + ser(m, self.rng) + _ws(self.rng)

    def _tail(self) -> str:
        return "]" + _ws(self.rng) + "".join("," + p for p in self._pairs(self.tail)) + "}" + _ws(self.rng)

    def text(self) -> str:
        return self.head_text + (",".join(self.items) if self.items else _ws(self.rng)) + self.tail_text


def small_cache() -> BodyCache:
    return BodyCache(min_size=0, max_per_scope=4)


# --------------------------------------------------------------------------- properties

_pairs = st.lists(st.tuples(st.sampled_from(["model", "stream", "tools", "x", "messages", "input", "é"]), _value), max_size=3)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    head=_pairs,
    key=st.sampled_from(["messages", "input"]),
    msgs=st.lists(_message, max_size=8),
    tail=_pairs,
    edits=st.lists(
        st.tuples(st.sampled_from(["append", "reply", "replace", "drop_head", "tail", "same", "reformat", "truncate",
                                   "corrupt", "number"]),
                  st.integers(0, 50), _message),
        max_size=6,
    ),
    seed=st.integers(0, 2**32),
)
def test_equals_json_loads_across_edits(head: list[tuple[str, Any]], key: str, msgs: list[Any],
                                        tail: list[tuple[str, Any]], edits: list[tuple[str, int, Any]],
                                        seed: int) -> None:
    cache = small_cache()
    body = Body(head, key, msgs, tail, random.Random(seed))
    check(cache, body.text().encode("utf-8", "surrogatepass"))
    for op, n, m in edits:
        items = body.items
        if op == "append":
            items.append(body._item(m))
        elif op == "reply":
            items += [body._item({"role": "assistant", "content": "ok"}), body._item(m)]
        elif op == "replace" and items:
            items[n % len(items)] = body._item(m)
        elif op == "drop_head" and items:
            del items[: n % len(items)]
        elif op == "tail":
            body.tail = [*body.tail, (f"k{n}", m)]
            body.tail_text = body._tail()
        elif op == "number":
            items += [f" {n}", f" {n * 10 + 3} "]
        elif op == "reformat":
            body.head_text = body._head()
        raw = body.text().encode("utf-8", "surrogatepass")
        if op == "truncate":
            raw = raw[: max(0, len(raw) - 1 - n)]
        elif op == "corrupt" and raw:
            pos = n * 7919 % len(raw)
            raw = raw[:pos] + b"}],:\" x"[n % 7 : n % 7 + 1] + raw[pos + 1 :]
        check(cache, raw)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.binary(max_size=8))
def test_arbitrary_bytes(prefix: bytes, junk: bytes) -> None:
    cache = small_cache()
    base = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}, 1, 2]}'
    check(cache, base)
    for raw in (prefix, base[:-2] + junk + base[-2:], base + junk, junk + base, base.replace(b"2]", b"2" + junk + b"]")):
        check(cache, raw)


# --------------------------------------------------------------------------- cases

def _chat(n: int, extra: str = "") -> bytes:
    msgs = [{"role": "user" if i % 2 else "assistant", "content": f"message {i} " + "x" * 50} for i in range(n)]
    return (json.dumps({"model": "gpt-4o", "messages": msgs})[:-1] + extra + "}").encode()


def test_reuses_the_prefix_and_decodes_only_the_tail() -> None:
    cache = BodyCache(min_size=0)
    first = cache.loads(_chat(100), "t")
    second = cache.loads(_chat(102), "t")
    assert second == json.loads(_chat(102))
    assert cache.stats.walks == 1 and cache.stats.hits == 1
    assert cache.stats.reused == 100 and cache.stats.decoded == 102
    # the reused elements are the same objects; the containers are fresh
    assert second["messages"][5] is first["messages"][5]
    assert second is not first and second["messages"] is not first["messages"]
    # the superseded body was replaced by the one that extends it
    assert len(cache) == 1


@pytest.mark.parametrize(
    "cached,new",
    [
        (b'{"messages": [1, 2, 12], "m": 1}', b'{"messages": [1, 2, 123], "m": 1}'),
        (b'{"messages": [1, 2, 12], "m": 1}', b'{"messages": [1, 2, 12.5], "m": 1}'),
        (b'{"messages": [1, 2, 12], "m": 1}', b'{"messages": [1, 2, 12e3], "m": 1}'),
        (b'{"messages": [1, true], "m": 1}', b'{"messages": [1, truex], "m": 1}'),
        (b'{"messages": [1, 2], "m": 1}', b'{"messages": [1, 2], "m": 1} x'),
        (b'{"messages": [1, 2], "m": 1}', b'{"messages": [1, 2], "m": 1, "messages": 7}'),
        (b'{"messages": [1, 2], "m": 1}', b'{"messages": [1, 2], "m": 1,}'),
        (b'{"messages": [1, 2], "m": 1}', b'{"messages": [1, 2,], "m": 1}'),
        (b'{"messages": [1, 2], "m": 1}', b'{"messages": [1, 2 3], "m": 1}'),
        (b'{"messages": [1, 2], "m": 1}', b'{"messages": [1, 2] "m": 1}'),
        (b'{"messages": [1, 2], "m": 1}', b'{"messages": [1, 2], "m": 1 "n": 2}'),
        (b'{"messages": [1, 2], "m": 1}', b'{"messages": [1, 2], "m": 1 ;"n": 2}'),
        (b'{"messages": [1, 2], "m": 1}', b'{"messages": [1, 2];"m": 1}'),
        (b'{"messages": [1, 2], "m": 1}', b'{"messages": [1, 2;3], "m": 1}'),
        (b'{"messages": [1]}', b'{"messages": [1, 2;3], "m": 1}'),
        (b'{"x": 1}', b'{"messages": [1;2]}'),
        (b'{"messages": [1, 2], "m": 1}', b'{"messages": [1, 2], "m" 1}'),
        (b'{"messages": [1, 2], "m": 1}', b'{"messages": [1, 2], m: 1}'),
        (b'{"messages": [1, 2], "m": 1}', b'{"messages": [1, 2], "m": }'),
        (b'{"a": 1, "messages": [1, 2]}', b'{"a": 1 "messages": [1, 2]}'),
        (b'{"messages": [1, 2]}', b'{"messages": [1, 2]'),
        (b'{"messages": [1, 2]}', b'{"messages": [1, 2, NaN, -Infinity, 1e999]}'),
        (b'{"messages": [1, 2]}', b'{"messages": [1, 2, "\\ud800", "\\u00e9"]}'),
        (b'{"messages": [1, 2]}', b'{"messages": [1, 2, "' + b"\xff" + b'"]}'),
        (b'{"messages": [1, 2]}', b'{"messages": [1, 2, "a\x01b"]}'),
        (b'{"messages": [1, 2]}', b'{"messages": [1, 2, "\xed\xa0\x80"]}'),
        (b'{"messages": ["\xc3\xa9", 2]}', b'{"messages": ["\xc3\xa9", 2, "\xc3"]}'),
        (b'{"messages": ["\xc3\xa9"]}', b'{"messages": ["\xc3\xa9", "\xe6\x97\xa5"], "\xc3\xa9": 1}'),
        (b'{"messages": [1, 2]}', b'{"messages": [1, 2, ' + b"9" * 5000 + b"]}"),
        (b'{"messages": [1, 2]}', b"\xef\xbb\xbf" + b'{"messages": [1, 2, 3]}'),
        (b'{"messages": [1, 2]}', '{"messages": [1, 2, 3]}'.encode("utf-16")),
        (b'{"input": [1, 2]}', b'{"input": [1, 2], "messages": [3]}'),
        (b'{"a": 1, "messages": [1, 2]}', b'{"a": 2, "messages": [1, 2]}'),
        (b'{"messages": []}', b'{"messages": [ ]}'),
        (b'{"messages": []}', b'{"messages": [1]}'),
        (b'{"messages": [[1, 2]]}', b'{"messages": [[1, 2], [3]]}'),
        (b'{"messages": [1]}', b"[1, 2]"),
        (b'{"messages": [1]}', b'"messages"'),
        (b'{"messages": [1]}', b"{}"),
        (b'{"messages": [1]}', b""),
    ],
)
def test_edge_cases(cached: bytes, new: bytes) -> None:
    cache = BodyCache(min_size=0)
    check(cache, cached)
    check(cache, new)
    check(cache, new)  # and again, now that it may be cached itself


def test_scopes_are_separate() -> None:
    cache = BodyCache(min_size=0)
    cache.loads(_chat(50), "a")
    cache.loads(_chat(51), "b")
    assert cache.stats.hits == 0 and cache.stats.walks == 2


def test_small_bodies_go_to_json_loads() -> None:
    cache = BodyCache(min_size=4096)
    assert cache.loads(b'{"messages": [1]}', "t") == {"messages": [1]}
    assert cache.stats.fallbacks == 1 and len(cache) == 0


def test_forks_and_edits_reuse_the_longest_shared_prefix() -> None:
    cache = BodyCache(min_size=0)
    base = [{"role": "user", "content": f"m{i}"} for i in range(40)]
    cache.loads(json.dumps({"messages": base}).encode(), "t")
    edited = list(base)
    edited[30] = {"role": "user", "content": "[Old tool result content cleared]"}
    raw = json.dumps({"messages": edited + [{"role": "user", "content": "next"}]}).encode()
    assert cache.loads(raw, "t") == json.loads(raw)
    assert cache.stats.reused == 30


def test_non_ascii_offsets_are_bytes() -> None:
    cache = BodyCache(min_size=0)
    msgs: list[Any] = []
    for i in range(30):
        msgs.append({"role": "user", "content": "é日本\U0001f600" * (i % 4) + str(i)})
        raw = json.dumps({"model": "m", "messages": msgs, "é": "ü"}, ensure_ascii=False).encode()
        check(cache, raw)
    assert cache.stats.hits == 29 and cache.stats.reused == sum(range(30))
    edited = list(msgs)
    edited[10] = {"role": "user", "content": "日本 changed"}
    check(cache, json.dumps({"model": "m", "messages": edited}, ensure_ascii=False).encode())
    assert cache.stats.reused == sum(range(30)) + 10


def test_bounded() -> None:
    cache = BodyCache(min_size=0, max_per_scope=3, max_bytes=10_000)
    for i in range(20):
        cache.loads(json.dumps({"messages": [f"conversation {i}"] * 20}).encode(), "t")
    assert len(cache) <= 3
    for i in range(20):
        cache.loads(json.dumps({"messages": [f"c{i}" + "x" * 900] * 5}).encode(), f"s{i}")
    assert cache._bytes <= 10_000


def test_a_tenant_with_many_agents_keeps_one_entry_each() -> None:
    """48 conversations of one tenant (one API key), turns interleaved, every body
    starting with the same 20 KB system prompt and tools: each next body of each
    conversation is parsed from its own cached prefix (a hit), never whole again — the
    default cache holds more conversations per tenant than a team runs agents at once
    (at 16, a 17th agent made every body of every agent a full parse)."""
    cache = BodyCache(min_size=0)
    shared = {"model": "m", "tools": [{"name": f"tool{i}", "description": "d" * 400} for i in range(50)]}
    system = {"role": "system", "content": "You are a careful agent. " * 40}
    convs = [[system, {"role": "user", "content": f"task {c}"}] for c in range(48)]
    for turn in range(4):
        for c, msgs in enumerate(convs):
            msgs.append({"role": "assistant", "content": f"step {turn} of task {c}: " + "z" * 50})
            check(cache, json.dumps({**shared, "messages": msgs}).encode())
    # decoded: the first body whole (3 messages), every other conversation's first body
    # past the system prompt it shares (2), then only each turn's new message (1)
    assert cache.stats.walks == 1 and cache.stats.hits == 48 * 4 - 1
    assert cache.stats.decoded == 3 + 47 * 2 + 48 * 3
    assert len(cache) == 48  # one entry per conversation: each next body replaced it


def test_threads_share_one_cache() -> None:
    """The server keeps one cache per process and tests run servers on several loops."""
    from concurrent.futures import ThreadPoolExecutor

    cache = BodyCache(min_size=0, max_per_scope=3)

    def agent(seed: int) -> bool:
        msgs: list[Any] = []
        for i in range(60):
            msgs.append({"role": "user", "content": f"agent {seed % 3} message {i}"})
            raw = json.dumps({"model": "m", "messages": msgs}).encode()
            if cache.loads(raw, f"t{seed % 2}") != json.loads(raw):
                return False
        return True

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(agent, range(16)))


def test_a_codec_error_after_a_passed_one_crosses_to_the_caller_as_raised() -> None:
    # UTF-32 (detected from the NULs): the first code point is a surrogate, which
    # json.loads' surrogatepass lets through; the second is out of range
    raw = b"\x00\x00\xd8" + b'{"model": "m", "messages": [1, 2]}'
    expected = outcome(json.loads, raw)
    assert expected[0] == "UnicodeDecodeError" and "not in range" in expected[1]
    assert outcome(lambda r: split_loads(small_cache(), r, "t"), raw) == expected
