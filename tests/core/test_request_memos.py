"""The per-request answers remembered across a conversation's requests (issue 15): the
summarize-request check and the quiet signals of an append give what computing them
afresh gives, and the remembered check does not read the texts again."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import markers as markers_mod
from proxy.core import restatement, summarize_request, transition
from proxy.core.analysis import analyze
from proxy.core.dialects import from_openai_chat
from proxy.core.markers import NO_MARKERS, default_markers
from proxy.core.signals import quiet_signals
from proxy.core.summarize_request import (
    _detect_summarize_request,
    _last_user,
    detect_summarize_request,
)

_TEXTS = st.sampled_from([
    "continue",
    "Please summarize the conversation so far.",
    "Summarize our conversation history in detail, then stop.",
    "user: a\nassistant: b\nuser: c\nassistant: d\nsummarize this transcript",
    "Your task is to create a detailed summary of the conversation so far",
    "Here is a summary of the previous conversation: we fixed the build.",
    "fix the flaky test in tests/test_api.py",
])
_ROLES = st.sampled_from(["user", "assistant"])


def _snap(system: str, turns: list[tuple[str, str]]):  # type: ignore[no-untyped-def]
    msgs = [{"role": "system", "content": system}] if system else []
    msgs += [{"role": r, "content": t} for r, t in turns]
    return from_openai_chat({"model": "gpt-4o", "messages": msgs})


@settings(max_examples=150, deadline=None)
@given(
    system=st.sampled_from(["", "You are a helpful assistant.", "Summarize the conversation so far when asked."]),
    turns=st.lists(st.tuples(_ROLES, _TEXTS), min_size=0, max_size=6),
    which=st.sampled_from(["none", "default"]),
)
def test_remembered_summarize_check_is_the_fresh_one(system: str, turns: list[tuple[str, str]], which: str) -> None:
    markers = NO_MARKERS if which == "none" else default_markers()
    snap = _snap(system, turns)
    i = _last_user(snap)
    fresh = _detect_summarize_request(snap, markers, i, snap.messages[i] if i is not None else None)
    assert detect_summarize_request(snap, markers) == fresh
    assert detect_summarize_request(snap, markers) == fresh  # the remembered answer


def test_the_check_of_a_known_last_user_message_reads_no_text(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    markers = default_markers()
    turns = [("user", "go"), ("assistant", "ok"), ("user", "continue"), ("assistant", "working")]
    first = detect_summarize_request(_snap("sys", turns), markers)
    folded: list[str] = []
    real = summarize_request.fold
    monkeypatch.setattr(summarize_request, "fold", lambda t: folded.append(t) or real(t))
    # the next request: the same last user message and system prompt, two more messages
    again = detect_summarize_request(_snap("sys", [*turns, ("assistant", "done"), ("assistant", "more")]), markers)
    assert again == first and folded == []
    # another last user message is read
    detect_summarize_request(_snap("sys", [*turns, ("user", "Summarize the conversation so far, please.")]), markers)
    assert folded
    # another system prompt is read too
    folded.clear()
    detect_summarize_request(_snap("other", turns), markers)
    assert folded
    assert markers_mod.fold is real


def test_quiet_signals_are_shared_and_quiet() -> None:
    assert quiet_signals() is quiet_signals()
    assert quiet_signals("tiktoken:o200k_base") is not quiet_signals()
    q = quiet_signals("tiktoken:o200k_base")
    assert q.density.token_counter == "tiktoken:o200k_base"
    assert q.obligations.obligations_open == 0 and not q.next_action.dropped_kinds
    before = _snap("s", [("user", "go")])
    after = _snap("s", [("user", "go"), ("assistant", "ok"), ("user", "continue")])
    a = analyze(before, after)
    assert a.kind == "append" and a.signals is quiet_signals()


@settings(max_examples=100, deadline=None)
@given(candidate=_TEXTS, lost=_TEXTS)
def test_summary_test_with_the_lost_words_given_is_the_same(candidate: str, lost: str) -> None:
    assert restatement.looks_like_summary(candidate, lost, lost_words=lambda: restatement.content_words(lost)) == (
        restatement.looks_like_summary(candidate, lost)
    )


def _classify_counting_words(monkeypatch, before, after):  # type: ignore[no-untyped-def]
    """``classify(before, after)`` and every text whose content words it read."""
    read: list[str] = []
    real = restatement.content_words
    counting = lambda t: read.append(t) or real(t)
    monkeypatch.setattr(restatement, "content_words", counting)  # the candidates' words
    monkeypatch.setattr(transition, "content_words", counting)  # the lost text's words
    return transition.classify(before, after), read


def test_a_replaced_tail_reads_the_lost_text_once(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # the client drops an earlier reply and the turn after it and sends two messages of
    # its own: both are candidates for a summary of the lost messages, whose words are
    # read once
    before = _snap("s", [("user", "deploy the api and keep the rollback target"),
                         ("assistant", "rolling out release 4f2a9c to prod now, watching the api deployment"),
                         ("user", "ok, and then?"), ("assistant", "waiting")])
    after = _snap("s", [("user", "deploy the api and keep the rollback target"),
                        ("assistant", "checking the api deployment status and rollout history first"),
                        ("user", "the api deployment rollout is waiting on release approval")])
    t, read = _classify_counting_words(monkeypatch, before, after)
    lost_text = "\n".join(m.text for m in before.messages[1:])
    assert t.lost == (1, 2, 3) and read.count(lost_text) == 1 and len(read) == 3


def test_a_replaced_last_turn_alone_reads_no_lost_text(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # only the last turn changed: the client's own next step, never a summary of it, so
    # the marker-free summary test (and its word reading) does not run at all
    before = _snap("s", [("user", "deploy the api and keep the rollback target"),
                         ("assistant", "rolling out release 4f2a9c to prod now, watching the api deployment")])
    after = _snap("s", [("user", "deploy the api and keep the rollback target"),
                        ("assistant", "checking the api deployment status and rollout history first"),
                        ("user", "the api deployment rollout is waiting on release approval")])
    t, read = _classify_counting_words(monkeypatch, before, after)
    assert t.lost == (1,) and t.kind != "summarize" and read == []


@settings(max_examples=150, deadline=None)
@given(roles=st.lists(st.sampled_from(["user", "assistant", "tool"]), max_size=12), more=st.lists(
    st.sampled_from(["user", "assistant", "tool"]), max_size=4), known=st.booleans())
def test_last_user_of_an_extended_snapshot_is_the_fresh_one(roles: list[str], more: list[str], known: bool) -> None:
    def snap(rs: list[str]):  # type: ignore[no-untyped-def]
        msgs = [{"role": r, "content": f"m{i}"} if r != "tool" else {"role": "tool", "tool_call_id": "c", "content": f"m{i}"}
                for i, r in enumerate(rs)]
        return from_openai_chat({"messages": msgs})

    def naive(rs: list[str]) -> int | None:
        return max((i for i, r in enumerate(rs) if r == "user"), default=None)

    prev = snap(roles)
    if known:
        assert prev.last_user() == naive(roles)
    after = snap(roles + more)
    after.extending(prev)
    # told by the previous snapshot when it knew, found by a pass otherwise: the same answer
    assert (after._last_user != -2) == known
    assert after.last_user() == naive(roles + more) == _last_user(after)
