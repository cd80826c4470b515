"""Work on long texts done in bounded pieces gives exactly the whole-text answer (issue 16:
no event-loop stall behind one tenant's 10 MB request): the digest of a long text hashed
by itself, the first-line key of a message read a piece at a time, and what markers
are looked for in (a long text's first and last 64 KiB)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import histtext
from proxy.core import messages as messages_mod
from proxy.core import moved as moved_mod
from proxy.core import transition as transition_mod
from proxy.core.markers import MARKER_WINDOW, default_markers, marker_view
from proxy.core.messages import Message, Part, Snapshot, make_message
from proxy.core.summarize_request import detect_summarize_request

# any code point, lone surrogates included (a JSON request may carry "\ud800")
TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=300)


def _joined_digest(role: str, parts: list[Part], name: str | None) -> str:
    """The digest as one buffer of every field (the small-text path's definition)."""
    chunks = [role.encode(), b"\x00", (name or "").encode()]
    for p in parts:
        chunks += (b"\x01", p.kind.encode(), b"\x00", p.text.encode("utf-8", "surrogatepass"), b"\x00",
                   (p.tool_name or "").encode(), b"\x00", (p.tool_call_id or "").encode(), b"\x00",
                   (p.payload_digest or "").encode(), b"\x01" if p.is_error else b"\x00")
    return hashlib.blake2b(b"".join(chunks), digest_size=16).hexdigest()


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(TEXT, min_size=1, max_size=4), name=st.none() | st.text(max_size=5))
def test_a_long_text_hashed_by_itself_has_the_digest_of_the_joined_fields(texts: list[str], name: str | None) -> None:
    parts = [Part("text", t) for t in texts]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(messages_mod, "_HASH_ALONE", 0)  # every text takes the large path
        digest = make_message("user", parts, name).digest
    assert digest == _joined_digest("user", parts, name)


def _head_key_whole(m: Message) -> tuple[str, str]:
    first = m.text.strip().split("\n", 1)[0]
    return m.role, " ".join(first.split())[:120]


WORDY = st.text(st.sampled_from(list("ab \t\n\u00a0\u2003xyz.")), max_size=600)


def test_marker_view_is_the_whole_text_or_its_two_ends() -> None:
    short = "x" * (2 * MARKER_WINDOW)
    assert marker_view(short) is short
    long = "h" * MARKER_WINDOW + "m" * 10 + "t" * MARKER_WINDOW
    view = marker_view(long)
    assert view == "h" * MARKER_WINDOW + "\n" + "t" * MARKER_WINDOW and "m" not in view


def _summarize_request(last: str) -> Snapshot:
    return Snapshot(
        dialect="openai",
        system="",
        messages=(
            make_message("user", [Part("text", "deploy the api")]),
            make_message("assistant", [Part("text", "deployed")]),
            make_message("user", [Part("text", last)]),
        )
    )


def test_an_agents_marker_framing_a_megabyte_paste_is_found_and_one_only_in_its_middle_is_not() -> None:
    markers = default_markers()
    agent = next(a for a in markers.agents if a.summarize_request)
    marker = agent.summarize_request[0].raw
    paste = "user: deploy\nassistant: done\n" * 40_000  # ~1.2 MB of pasted transcript
    for last in (marker + "\n" + paste, paste + "\n" + marker):
        sr = detect_summarize_request(_summarize_request(last), markers)
        assert sr is not None and sr.agent is not None and sr.reason == "marker"
    # the middle of a long text is never read (a bounded piece of work on the loop)
    buried = paste + marker + paste
    sr = detect_summarize_request(_summarize_request(buried), markers)
    assert sr is None or sr.reason != "marker"


def _norm_head_whole(m: Message) -> tuple[str, str]:
    return m.role, " ".join(m.text.split())[:moved_mod._NORM_HEAD]


@pytest.mark.parametrize("name, whole", [("_head_key", _head_key_whole), ("_norm_head", _norm_head_whole)])
@settings(max_examples=300, deadline=None)
@given(text=WORDY | TEXT, read=st.integers(1, 50))
def test_a_key_of_a_texts_start_read_piece_by_piece_is_the_whole_texts(
    name: str, whole: Callable[[Message], tuple[str, str]], text: str, read: int
) -> None:
    """The first-line key of a message, and the start of its text up to whitespace."""
    m = make_message("user", [Part("text", text)])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(moved_mod, "_HEAD_READ", read)
        mp.setattr(moved_mod, "_NORM_READ", max(1, read // 3))  # the first, smaller piece
        key = getattr(moved_mod, name)(m)
    assert key == whole(m)


def _only_moved_whole(before: Snapshot, after: Snapshot, lost_idx: set[int]) -> str | None:
    """``only_moved`` as it was, every message keyed by its whole text up to whitespace."""
    key = lambda m: (m.role, " ".join(m.text.split()))
    present = {key(n) for n in after.messages}
    old_keys = {key(m) for m in before.messages}
    fresh = [n for n in after.messages if not (n.tool_results or n.tool_calls) and key(n) not in old_keys]
    heads = {moved_mod._head_key(x) for x in fresh}
    for i in lost_idx:
        m = before.messages[i]
        if key(m) in present:
            continue
        if m.tool_results or m.tool_calls or moved_mod._head_key(m) not in heads:
            return None
        twin = next(n for n in fresh if moved_mod._head_key(n) == moved_mod._head_key(m))
        if not 0.5 <= (len(twin.text) + 1) / (len(m.text) + 1) <= 2.0:
            return None
    return "moved"


SPACED = st.text(st.sampled_from(list("ab \n")), max_size=12)
MSG = st.tuples(st.sampled_from(["user", "assistant"]), SPACED)


@settings(max_examples=400, deadline=None)
@given(old=st.lists(MSG, min_size=1, max_size=5), new=st.lists(MSG, max_size=5), data=st.data())
def test_a_message_found_moved_by_digest_or_head_is_found_as_by_its_whole_text(
    old: list[tuple[str, str]], new: list[tuple[str, str]], data: st.DataObject
) -> None:
    before = Snapshot("openai", "", tuple(make_message(r, [Part("text", t)]) for r, t in old))
    after = Snapshot("openai", "", tuple(make_message(r, [Part("text", t)]) for r, t in new))
    lost = data.draw(st.sets(st.integers(0, len(old) - 1), min_size=1))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(moved_mod, "_NORM_HEAD", data.draw(st.integers(1, 4)))  # heads alike, texts not
        # the heads remembered per history were made with another _NORM_HEAD (by other
        # examples and tests, for the same messages): start from none
        mp.setattr(histtext, "_HEADS", histtext._Prefixed())
        got = moved_mod.only_moved(before, after, lost, None)
    assert (got is not None) == (_only_moved_whole(before, after, lost) is not None)


def test_a_resent_request_keys_no_long_text_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client sending its earlier 10 MB request again drops that request's reply: the
    classification tells the reply is not in the request by its first characters, without
    keying either long text whole (a pass over each: 20-28 ms of the event loop per such
    request at 10 MB)."""
    user = make_message("user", [Part("text", "0 " + "a" * 300_000)])
    before = Snapshot("openai", "", (user, make_message("assistant", [Part("text", "B" * 300_000)])))
    after = Snapshot("openai", "", (user,))
    keyed: list[int] = []
    real = moved_mod._content_key
    monkeypatch.setattr(moved_mod, "_KEYS", {})
    monkeypatch.setattr(moved_mod, "_content_key", lambda m: keyed.append(len(m.text)) or real(m))
    t = transition_mod.classify(before, after)
    assert t.kind == "fork" and t.lost_region == (1,)
    assert keyed == []


class _Searched(str):
    """A text that records the spans its ``find`` calls search."""

    spans: ClassVar[list[int]] = []

    def find(self, sub: str, start: int | None = None, end: int | None = None) -> int:  # type: ignore[override]
        lo = 0 if start is None else start
        hi = len(self) if end is None else end
        _Searched.spans.append(hi - lo)
        return super().find(sub, start, end)


def test_the_first_line_key_of_a_long_single_line_searches_only_its_start() -> None:
    # a 10 MB reply with no newline: its first-line key reads (and looks for the line's
    # end in) what its first 120 characters need, not the whole text
    for text in ("w" * (1 << 22), "  " + "word " * (1 << 20), "x" * 5000 + "\nrest"):
        _Searched.spans = []
        m = make_message("assistant", [Part("text", _Searched(text))])
        assert moved_mod._head_key(m) == _head_key_whole(m)
        assert _Searched.spans and max(_Searched.spans) <= moved_mod._HEAD_READ
