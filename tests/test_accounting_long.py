"""Token accounting of long texts (issue 16): bounded work per text wherever it is
counted, exact in a thread up to MAX_EXACT_CHARS, estimated from windows spread over
the text beyond it, and flagged as an estimate."""

from __future__ import annotations

import base64
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.accounting import (
    LOOP_EXACT_CHARS,
    MAX_EXACT_CHARS,
    MESSAGE_OVERHEAD,
    SAMPLE_CHARS,
    TokenAccounting,
    estimate,
)
from proxy.core.messages import text_message
from proxy.tokenizer import get_encoding

ENC = get_encoding("o200k_base")


def exact(text: str) -> int:
    return len(ENC.encode_ordinary(text))


class Counting:
    """The real tokenizer, recording how many characters it was given."""

    def __init__(self) -> None:
        self.chars = 0

    def __call__(self, text: str) -> int:
        self.chars += len(text)
        return exact(text)


def counting(acc: TokenAccounting) -> Counting:
    fn = Counting()
    acc._counters["tiktoken:o200k_base"] = fn
    return fn


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 5 * SAMPLE_CHARS), ch=st.characters(codec="utf-8"))
def test_estimate_reads_at_most_the_sample_and_is_exact_for_a_length_counter(n: int, ch: str) -> None:
    text = ch * n
    seen: list[int] = []

    def length(t: str) -> int:
        seen.append(len(t))
        return len(t)

    assert estimate(length, text) == n
    assert sum(seen) == (n if n <= SAMPLE_CHARS else SAMPLE_CHARS)

def test_a_text_whose_kind_changes_along_it_is_estimated_from_all_of_it() -> None:
    rng = random.Random(7)
    prose = ("the rollout finished and the migration ran cleanly; " * 4000)[: 150_000]
    blob = base64.b64encode(rng.randbytes(150_000)).decode()[: 150_000]
    text = prose + blob
    truth = exact(text)
    head_only = round(exact(text[:SAMPLE_CHARS]) * len(text) / SAMPLE_CHARS)
    got = estimate(exact, text)
    assert abs(got - truth) / truth < 0.25, (got, truth)
    assert abs(head_only - truth) / truth > 0.4  # what a head-only estimate would say


def test_long_texts_cost_bounded_tokenizing_on_the_loop_and_in_the_thread() -> None:
    acc = TokenAccounting()
    fn = counting(acc)
    huge = text_message("user", "a" * (4 * MAX_EXACT_CHARS))  # one unbroken run
    n = acc.count_message("gpt-4o", huge)
    assert fn.chars <= SAMPLE_CHARS
    assert acc.is_estimated("gpt-4o", huge)
    assert n == MESSAGE_OVERHEAD + estimate(exact, huge.text)

    # nothing to precount: it is an estimate wherever it is counted
    assert not acc.needs_precount("gpt-4o", (huge,))
    fn.chars = 0
    acc.precount("gpt-4o", (huge,))
    assert fn.chars == 0
    assert acc.count_message("gpt-4o", huge) == n and acc.is_estimated("gpt-4o", huge)


def test_a_text_over_the_cap_is_estimated_in_the_thread_and_the_loop_tokenises_none_of_it() -> None:
    acc = TokenAccounting()
    fn = counting(acc)
    huge = text_message("user", "a" * (4 * MAX_EXACT_CHARS))
    assert acc.needs_precount("gpt-4o", (huge,))
    acc.precount("gpt-4o", (huge,))  # the worker thread's part
    assert 0 < fn.chars <= SAMPLE_CHARS
    fn.chars = 0
    n = acc.count_message("gpt-4o", huge)  # the loop's
    assert fn.chars == 0
    assert n == MESSAGE_OVERHEAD + estimate(exact, huge.text) and acc.is_estimated("gpt-4o", huge)
    assert not acc.needs_precount("gpt-4o", (huge,))


def test_a_text_between_the_caps_is_estimated_on_the_loop_then_counted_exactly_in_the_thread() -> None:
    acc = TokenAccounting()
    fn = counting(acc)
    text = "deploy revision 4f1c2e9 of the api, then check the rollout status\n" * (2 * LOOP_EXACT_CHARS // 60)
    assert LOOP_EXACT_CHARS < len(text) <= MAX_EXACT_CHARS
    msg = text_message("tool", text)
    acc.count_message("gpt-4o", msg)
    assert fn.chars <= SAMPLE_CHARS and acc.is_estimated("gpt-4o", msg)
    assert acc.needs_precount("gpt-4o", (msg,))
    acc.precount("gpt-4o", (msg,))
    assert not acc.is_estimated("gpt-4o", msg)
    assert acc.count_message("gpt-4o", msg) == MESSAGE_OVERHEAD + exact(text)


def test_a_message_with_both_kinds_is_precounted_and_stays_flagged() -> None:
    from proxy.core.messages import Part, make_message

    acc = TokenAccounting()
    mid = "x = compute(y) + 1\n" * (LOOP_EXACT_CHARS // 10)
    big = "b" * (MAX_EXACT_CHARS + 1)
    msg = make_message("user", (Part("text", mid), Part("text", big)))
    assert acc.needs_precount("gpt-4o", (msg,))
    acc.precount("gpt-4o", (msg,))
    assert acc.is_estimated("gpt-4o", msg)  # the part over the cap is an estimate
    assert acc.count_message("gpt-4o", msg) == MESSAGE_OVERHEAD + exact(mid) + estimate(exact, big)
