"""A history's joined text, content keys and long messages, extended from a remembered prefix, equal
building them from scratch (:mod:`proxy.core.histtext`), whatever the requests do."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core import histtext
from proxy.core.dialects import from_openai_chat
from proxy.core.messages import Snapshot

_TEXT = st.sampled_from(["", "ok", "run the migration", "  spaced   out  ", "rev 1a2b3c4d5e6f", "line\nbreak"])
_MSG = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, _TEXT),
    st.builds(lambda t: {"role": "assistant", "content": t or None}, _TEXT),
    st.builds(lambda i, t: {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": t or "{}"}}]},
        st.integers(0, 3), _TEXT),
)
#: each step: keep how many of the last request's messages, then append these
_STEP = st.tuples(st.integers(0, 3), st.lists(_MSG, max_size=4))


def _key(m: object) -> object:
    from proxy.core.moved import _content_key

    return _content_key(m)  # type: ignore[arg-type]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_MSG, min_size=1, max_size=6), st.lists(_STEP, min_size=1, max_size=8), _TEXT,
       st.sets(st.integers(0, 12), max_size=2))
def test_extended_facts_equal_facts_built_from_scratch(head: list, steps: list, system: str,  # type: ignore[type-arg]
                                                       undigested: set[int]) -> None:
    msgs = [{"role": "system", "content": system}] + head if system else list(head)
    for drop, added in steps:
        msgs = msgs[: max(1, len(msgs) - drop)] + added  # a replaced / edited tail, or a plain extension
        snap: Snapshot = from_openai_chat({"messages": msgs})
        # messages built without a digest (nothing to key them by) at some places
        snap = Snapshot(snap.dialect, snap.system, tuple(
            dataclasses.replace(m, digest="") if i in undigested else m for i, m in enumerate(snap.messages)))
        assert histtext.visible_text(snap) == snap.visible_text()
        assert histtext.joined_text(snap.digests, snap.messages) == "\n".join(
            m.text for m in snap.messages if m.text)
        assert histtext.content_keys(snap.digests, snap.messages, _key) == frozenset(
            _key(m) for m in snap.messages)
        for least in (1, 10):
            assert histtext.long_messages(snap.digests, snap.messages, least) == frozenset(
                m.digest for m in snap.messages if any(len(p.text) >= least for p in m.parts if p.text))
