"""Digests made ahead (in the worker that decoded a large body) are found again only for
the same fields and the very same text objects, equal to digests made from scratch,
and what they keep alive is bounded."""

from __future__ import annotations

import pytest

from proxy.core import messages as m
from proxy.core.messages import Part, make_message, remember_digests


@pytest.fixture(autouse=True)
def small_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(m, "_AHEAD", {})
    monkeypatch.setattr(m, "_ahead_chars", 0)
    monkeypatch.setattr(m, "_AHEAD_MAX_CHARS", 3 * (m._HASH_ALONE + 10))


def _long(i: int) -> str:
    return f"{i} " + "x" * m._HASH_ALONE


def test_found_for_the_same_text_object_and_fields_only() -> None:
    text = _long(1)
    made = make_message("user", (Part("text", text),))
    remember_digests([made])
    calls = []
    real = m.hashlib.blake2b
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(m.hashlib, "blake2b", lambda *a, **k: calls.append(1) or real(*a, **k))
        again = make_message("user", (Part("text", text),))
        assert calls == [] and again.digest == made.digest  # found, not hashed
        copy = "".join([text[:5], text[5:]])  # equal text, another object
        assert make_message("user", (Part("text", copy),)).digest == made.digest and len(calls) == 1
        assert make_message("assistant", (Part("text", text),)).digest != made.digest  # another field
    assert make_message("assistant", (Part("text", text),)).digest == make_message("assistant", (Part("text", copy),)).digest


def test_what_it_keeps_alive_is_bounded() -> None:
    msgs = [make_message("user", (Part("text", _long(i)),)) for i in range(10)]
    remember_digests(msgs)
    assert m._ahead_chars <= m._AHEAD_MAX_CHARS and len(m._AHEAD) == 3
    assert m._ahead_chars == sum(len(t) for _, texts in m._AHEAD.values() for t in texts)
    kept = {texts[0] for _, texts in m._AHEAD.values()}
    assert kept == {msgs[i].parts[0].text for i in (7, 8, 9)}  # the newest
