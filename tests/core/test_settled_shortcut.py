""":func:`proxy.core.analysis.settled_safe` answers a replaced or edited last reply whose
values cannot be required without searching the request's text for them — and answers as
the quick path's whole test does (:func:`proxy.core.analysis._quick_gone`), whatever went,
stayed, or is a plan tool's item (a rule that does not judge each value by itself)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core import analysis
from proxy.core.analysis import settled_safe
from proxy.core.dialects import from_body
from proxy.core.diff import VisibleText
from proxy.core.identifiers.extract import extract_messages
from proxy.core.messages import Snapshot
from proxy.core.signals import default_obligations
from proxy.core.transition import classify
from proxy.policy.loader import load_policy
from proxy.policy.obligations import PolicyObligations

UPLOAD = "2~Zk4XbR7sQpLw9TnVd3HcYa"
#: what a lost reply may call: reads (names only), a write with a key it made, a kept
#: handle, a plan tool's items (one value a name, one minted)
_CALLS = [
    ("bash", {"cmd": "kubectl rollout status deploy/api -n prod"}),
    ("bash", {"cmd": "aws s3 ls s3://b/k1"}),
    ("bash", {"cmd": "aws s3api put-object --bucket b --key k --idempotency-key 7Hq2Lx9Vt4Rb8Nc3Zp1W"}),
    ("bash", {"cmd": f"aws s3api upload-part --bucket b --key k1 --upload-id {UPLOAD}0001 --part-number 2"}),
    ("todo_write", {"todos": ["deploy/api rollout", "check s3://b/k1"]}),
    ("TodoWrite", {"todos": ["keep upload 9fceb02d0ae598e95dc970b74767f19372d61af8"]}),
]
_RULES = {"default": default_obligations, "policy": PolicyObligations(load_policy("default"))}


def _call(i: int, tool: str, args: dict[str, Any], cid: str) -> dict[str, Any]:
    return {"id": f"{cid}{i}", "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}


def _pair(history: list[int], lost: list[int], own: list[int]) -> tuple[Snapshot, Snapshot]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are an operations agent."},
                                  {"role": "user", "content": "Roll it out and keep every handle."}]
    for n, c in enumerate(history):
        msgs += [{"role": "assistant", "content": None, "tool_calls": [_call(n, *_CALLS[c], "h")]},
                 {"role": "tool", "tool_call_id": f"h{n}", "content": "ok"}]
    reply = {"role": "assistant", "content": None, "tool_calls": [_call(n, *_CALLS[c], "m") for n, c in enumerate(lost)]}
    mine = {"role": "assistant", "content": None, "tool_calls": [_call(n, *_CALLS[c], "o") for n, c in enumerate(own)]}
    results = [{"role": "tool", "tool_call_id": f"o{n}", "content": "done"} for n in range(len(own))]
    return (from_body("chat", {"model": "gpt-4o", "messages": [*msgs, reply]}),
            from_body("chat", {"model": "gpt-4o", "messages": [*msgs, mine, *results]}))


_IDX = st.integers(0, len(_CALLS) - 1)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(_IDX, max_size=3), lost=st.lists(_IDX, min_size=1, max_size=3),
       own=st.lists(_IDX, min_size=1, max_size=2), rule=st.sampled_from(sorted(_RULES)))
def test_settled_safe_answers_as_the_quick_paths_whole_test(history: list[int], lost: list[int], own: list[int],
                                                            rule: str) -> None:
    before, after = _pair(history, lost, own)
    t = classify(before, after)
    lost_idx = analysis._lost_indexes(t)
    whole = analysis._quick_gone(before, after, lost_idx, None, _RULES[rule]) is not None
    assert settled_safe(before, after, t, obligation_rule=_RULES[rule]) == whole


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = VisibleText.contains

    def spy(self: VisibleText, value: str, case_insensitive: bool) -> bool:
        seen.append(value)
        return real(self, value, case_insensitive)

    monkeypatch.setattr(VisibleText, "contains", spy)
    return seen


@pytest.mark.parametrize("rule", sorted(_RULES))
def test_a_lost_reply_of_names_is_settled_without_searching_the_request(rule: str, searches: list[str]) -> None:
    before, after = _pair([1, 3], [0], [1])  # the model's read of deploy/api, replaced by the client's own
    t = classify(before, after)
    assert extract_messages(before, t.lost_region)  # it held a value, gone from the request
    assert settled_safe(before, after, t, obligation_rule=_RULES[rule])
    assert searches == []


def test_a_lost_handle_or_plan_item_is_still_looked_up(searches: list[str]) -> None:
    rule = _RULES["policy"]
    for lost in ([3], [4]):  # a kept upload handle; a plan tool's items (not judged one by one)
        before, after = _pair([1], lost, [1])
        settled_safe(before, after, classify(before, after), obligation_rule=rule)
        assert searches
        searches.clear()
    before, after = _pair([], [0, 4], [1])
    ids = extract_messages(before, classify(before, after).lost_region)
    reads = [i for i in ids if i.source.tool_name == "bash"]
    assert reads and len(reads) < len(ids)
    assert not rule.judges_each(ids) and rule.judges_each(reads)
