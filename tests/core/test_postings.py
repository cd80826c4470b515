"""The compact multimap behind the lineage postings behaves as a dict of sets."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.postings import LOAD, SPILL, Postings

# keys crowded into a few buckets (same low bits), negative ones, and keys whose packed
# bytes overlap others' at an unaligned offset
_keys = st.sampled_from([0, 1, 4096, 8192, -4096, -1, 2**63 - 1, -(2**63), 0x0101010101010101, 0x0101010101010101 << 8])
_values = st.integers(0, SPILL + 8)
_ops = st.lists(st.tuples(st.booleans(), _keys, _values), max_size=300)


def _replay(p: Postings, model: dict[int, set[int]], ops: list[tuple[bool, int, int]]) -> None:
    """Apply ``ops`` to both, checking every answer and the size after each."""
    for add, key, value in ops:
        if add:
            assert p.add(key, value) == (value not in model.get(key, set()))
            model.setdefault(key, set()).add(value)
        else:
            p.discard(key, value)
            model.get(key, set()).discard(value)
        assert len(p) == sum(map(len, model.values()))


@settings(max_examples=300)
@given(_ops)
def test_it_holds_what_a_dict_of_sets_holds(ops: list[tuple[bool, int, int]]) -> None:
    p = Postings()
    model: dict[int, set[int]] = {}
    _replay(p, model, ops)
    for key in {k for _, k, _ in ops}:
        assert sorted(p.get(key)) == sorted(model.get(key, ()))
    expected = sorted((k % 2**64, v) for k, vs in model.items() for v in vs)
    assert sorted(p.items()) == expected


def test_a_widely_shared_key_leaves_its_bucket_and_comes_back_empty() -> None:
    p = Postings()
    for v in range(3 * SPILL):
        assert p.add(7, v)
        assert p.add(7 + 4096, v)  # same bucket, another key
    assert sorted(p.get(7)) == list(range(3 * SPILL)) and len(p.get(7 + 4096)) == 3 * SPILL
    for v in range(3 * SPILL):
        p.discard(7, v)
    assert list(p.get(7)) == [] and len(p) == 3 * SPILL
    assert p.add(7, 1) and list(p.get(7)) == [1]


def test_it_keeps_every_entry_while_buckets_split() -> None:
    rng = random.Random(7)
    p = Postings()
    model: dict[int, set[int]] = {}
    for i in range(20 * LOAD * 64):
        key = rng.getrandbits(64) if i % 3 else rng.choice([*model] or [0])  # some repeated keys
        value = rng.randrange(1 << 32)
        p.add(key, value)
        model.setdefault(key, set()).add(value)
    assert len(p._buckets) > 64  # it grew
    for key, values in model.items():
        assert set(p.get(key)) == values
    for key in list(model)[::2]:
        for v in model.pop(key):
            p.discard(key, v)
    assert len(p) == sum(map(len, model.values()))
    assert sorted(p.items()) == sorted((k, v) for k, vs in model.items() for v in vs)


@settings(max_examples=200)
@given(st.lists(st.lists(_keys, unique=True), max_size=8), _ops)
def test_new_values_appended_unsearched_behave_as_added(fresh: list[list[int]], ops: list[tuple[bool, int, int]]) -> None:
    """``extend_new`` (distinct keys, a value none of them holds) then any adds and
    discards: the same as a dict of sets, a widely shared key spilling on its next add."""
    p = Postings()
    model: dict[int, set[int]] = {}
    for value, keys in enumerate(fresh, start=100):
        p.extend_new(keys, value)
        for k in keys:
            model.setdefault(k, set()).add(value)
    _replay(p, model, ops)
    assert sorted(p.items()) == sorted((k % 2**64, v) for k, vs in model.items() for v in vs)


def test_a_long_run_left_unsearched_leaves_its_bucket_when_a_held_value_is_added_again() -> None:
    """A key shared by many conversations first seen (``extend_new``: appends, no search)
    builds a long run of records in its bucket; re-adding a value it already holds (a
    cold conversation's lines indexed again when its history is read back) must move the
    key to a set of its own, or every later search of that bucket walks the whole run
    (seen at the memory bound: most of the loop's time in this search)."""
    p = Postings()
    n = 40 * SPILL
    for v in range(n):
        p.extend_new((7, 7 + 4096), v)  # 7 + 4096: same bucket, another key
    assert p.add_all((7,), n - 1) == []  # held already: nothing new
    assert 7 in p._many  # noqa: SLF001 - the run left the bucket
    assert 7 + 4096 not in p._many  # noqa: SLF001 - only the key that was searched
    assert sorted(p.get(7)) == list(range(n)) and sorted(p.get(7 + 4096)) == list(range(n))
    assert len(p) == 2 * n
    assert p.add_all((7,), n) == [7] and len(p) == 2 * n + 1
