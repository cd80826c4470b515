"""The classifier's shortcuts give what the general computation gives (property tests):
the matching blocks of a one-message side without difflib, content words lower-cased in
one call for ASCII text, and a summary test that reads the summary words only when they
can matter."""

from __future__ import annotations

from difflib import SequenceMatcher

from hypothesis import given
from hypothesis import strategies as st

from proxy.core import alignment as A
from proxy.core import restatement as R

_DIGESTS = st.lists(st.sampled_from("abcde"), max_size=8)


def _blocks_by_difflib(old: list[str], new: list[str], p: int) -> list[tuple[int, int, int]]:
    s = 0
    while s < len(old) - p and s < len(new) - p and old[len(old) - 1 - s] == new[len(new) - 1 - s]:
        s += 1
    blocks: list[tuple[int, int, int]] = [(0, 0, p)] if p else []
    mid_old, mid_new = old[p : len(old) - s], new[p : len(new) - s]
    if mid_old and mid_new:
        for a, b, size in SequenceMatcher(None, mid_old, mid_new, autojunk=False).get_matching_blocks():
            if size:
                blocks.append((p + a, p + b, size))
    if s:
        blocks.append((len(old) - s, len(new) - s, s))
    return A._merged(blocks)


@given(prefix=_DIGESTS, old=_DIGESTS, new=_DIGESTS)
def test_blocks_equal_difflibs(prefix: list[str], old: list[str], new: list[str]) -> None:
    a, b = prefix + old, prefix + new
    p = 0
    while p < min(len(a), len(b)) and a[p] == b[p]:
        p += 1
    assert A.matching_blocks(a, b, p) == _blocks_by_difflib(a, b, p)


@given(prefix=_DIGESTS, one=st.sampled_from("abcde"), other=_DIGESTS, flip=st.booleans())
def test_blocks_of_a_one_message_side_equal_difflibs(prefix: list[str], one: str, other: list[str], flip: bool) -> None:
    a, b = (prefix + [one], prefix + other) if not flip else (prefix + other, prefix + [one])
    p = 0
    while p < min(len(a), len(b)) and a[p] == b[p]:
        p += 1
    assert A.matching_blocks(a, b, p) == _blocks_by_difflib(a, b, p)


@given(text=st.text(alphabet=st.sampled_from("abcXYZ_- -.\nKİßé0123"), max_size=80))
def test_content_words_are_the_words_lower_cased(text: str) -> None:
    assert R.content_words(text) == {w.lower() for w in R._WORD.findall(text)} - R._STOP


def _looks_like_summary_in_full(candidate: str, lost_text: str) -> bool:
    words = R.content_words(candidate)
    if len(words) < 3:
        return False
    shared = len(words & R.content_words(lost_text))
    frac = shared / len(words)
    folded = R.fold(candidate)
    says = any(w in folded for w in ("summary", "summarize", "summarise", "previous", "continued", "so far"))
    return frac >= 0.5 or (shared >= 8 and frac >= 0.15) or (says and shared >= 3)


_VOCAB = st.sampled_from(["deploy", "rollout", "status", "summary", "previous", "so far", "migration",
                          "revision", "upload", "bucket", "handle", "checked", "pods", "frontend"])


@given(candidate=st.lists(_VOCAB, max_size=20).map(" ".join), lost=st.lists(_VOCAB, max_size=30).map(" ".join))
def test_the_summary_test_is_unchanged(candidate: str, lost: str) -> None:
    assert R.looks_like_summary(candidate, lost) == _looks_like_summary_in_full(candidate, lost)


def test_a_repeated_short_command_is_classified_once() -> None:
    import json

    from proxy.core.dialects import from_body
    from proxy.core.identifiers import extract as E

    cache = E.ScanCache()
    calls: list[str] = []
    real = E.classify_call

    def counting(name: str | None, text: str = "") -> object:
        calls.append(text)
        return real(name, text)

    def body(call_id: str) -> dict[str, object]:
        args = json.dumps({"cmd": "kubectl rollout status deploy/api -n prod"})
        return {"model": "m", "messages": [
            {"role": "user", "content": "check the rollout"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": args}}]}]}

    E.classify_call = counting  # type: ignore[assignment]
    try:
        got = [E.extract_messages(from_body("chat", body(cid)), [1], cache=cache) for cid in ("call_a", "call_b")]
    finally:
        E.classify_call = real  # type: ignore[assignment]
    assert len(calls) == 1  # the second message (another call id, another digest) hit the cache
    assert [i.value for i in got[0]] == [i.value for i in got[1]]
    assert [i.source.command for i in got[0]] == [i.source.command for i in got[1]]
