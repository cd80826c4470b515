"""The recall tool's pure parts: offering it, reading its calls, the follow-up request,
the final answer, and what a call returns."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.dialects import from_openai_chat
from proxy.core.interventions.recall import (
    client_calls,
    final_json,
    followup_body,
    passages,
    recall_calls,
    recall_result,
    strip_json,
    sum_usage,
    turn_of_json,
    with_deferred,
)
from proxy.core.interventions.recall_tool import (
    RecallHandle,
    choose_name,
    offer,
    tool_definition,
    tool_description,
    tools_refused,
)
from proxy.core.interventions.spill import render_region

NAME = "recall_compacted_context"
H = RecallHandle("spill_" + "a" * 32, 12, 0, 11, 1_700_000_000.0, 1_700_000_600.0,
                 (("3f9a1c2b7d4e", "alembic_revision"),), 1_800_000_000.0)

BASH_CHAT = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
BASH_RESP = {"type": "function", "name": "bash", "parameters": {"type": "object"}}
BASH_ANTH = {"name": "bash", "input_schema": {"type": "object"}}


# --------------------------------------------------------------------------- the tool


@pytest.mark.parametrize(("api", "path"), [
    ("chat", lambda t: (t["type"], t["function"]["name"], t["function"]["parameters"])),
    ("responses", lambda t: (t["type"], t["name"], t["parameters"])),
    ("messages", lambda t: ("function", t["name"], t["input_schema"])),
])
def test_the_tool_in_each_dialects_own_format(api: Any, path: Any) -> None:
    kind, name, schema = path(tool_definition(api, NAME, [H]))
    assert (kind, name) == ("function", NAME)
    assert schema["required"] == ["handle"] and set(schema["properties"]) == {"handle", "query"}
    assert schema["properties"]["handle"]["type"] == "string"


def test_the_description_names_each_handle_what_it_covers_and_its_bindings() -> None:
    other = RecallHandle("spill_" + "b" * 32, 3, 4, 6, None, None, (), 0.0)
    text = tool_description([H, other])
    assert H.handle in text and other.handle in text
    assert "12 message(s) (indices 0–11" in text and "2023-11-14 22:13 UTC – 2023-11-14 22:23 UTC" in text
    assert "`3f9a1c2b7d4e` (alembic_revision)" in text
    assert tool_description([H, other]) == text  # deterministic: prompt caches keep hitting


def test_many_bindings_are_capped_and_counted() -> None:
    many = RecallHandle("spill_x", 1, 0, 0, None, None, tuple((f"v{i:03d}", "uuid") for i in range(40)), 0.0)
    text = tool_description([many])
    assert "v011" in text and "v012" not in text and "and 28 more" in text


@pytest.mark.parametrize(("api", "tools", "expected"), [
    ("chat", [BASH_CHAT], NAME),
    ("chat", [BASH_CHAT, {"type": "function", "function": {"name": NAME}}], NAME + "_2"),
    ("responses", [{"type": "function", "name": NAME}, {"type": "custom", "name": NAME + "_2"}], NAME + "_3"),
    ("messages", [{"name": NAME, "input_schema": {}}], NAME + "_2"),
    ("messages", [], NAME),
])
def test_never_clashes_with_a_client_tool(api: Any, tools: list[Any], expected: str) -> None:
    body = {"model": "m", "tools": tools}
    got = offer(api, body, NAME, [H])
    assert not isinstance(got, str)
    assert got.name == expected
    assert got.body["tools"][:-1] == tools and body["tools"] == tools  # appended to a copy
    names = [t.get("name") or t.get("function", {}).get("name") for t in got.body["tools"]]
    assert names.count(expected) == 1


def test_choose_name_skips_every_taken_suffix() -> None:
    assert choose_name("r", {"r", "r_2", "r_3"}) == "r_4"


@pytest.mark.parametrize(("api", "choice", "refused"), [
    ("chat", None, None), ("chat", "auto", None), ("chat", "required", None),
    ("chat", "none", "tool_choice_none"),
    ("chat", {"type": "function", "function": {"name": "bash"}}, "tool_choice_forced"),
    ("chat", {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}, "tool_choice_forced"),
    ("responses", "none", "tool_choice_none"), ("responses", "auto", None),
    ("responses", {"type": "function", "name": "bash"}, "tool_choice_forced"),
    ("messages", {"type": "none"}, "tool_choice_none"), ("messages", {"type": "auto"}, None),
    ("messages", {"type": "any"}, None), ("messages", {"type": "tool", "name": "bash"}, "tool_choice_forced"),
])
def test_respects_the_clients_tool_choice(api: Any, choice: Any, refused: str | None) -> None:
    body: dict[str, Any] = {"model": "m", "tools": []}
    if choice is not None:
        body["tool_choice"] = choice
    assert tools_refused(api, body) == refused
    got = offer(api, body, NAME, [H])
    assert (got == refused) if refused else not isinstance(got, str)


def test_legacy_chat_functions_get_the_note_instead() -> None:
    assert offer("chat", {"functions": [{"name": "bash"}]}, NAME, [H]) == "legacy_functions"


# --------------------------------------------------------------------------- calls


def _chat(calls: list[tuple[str, str, str]], content: str | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]
    return {"id": "c1", "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}


def test_recall_calls_are_parsed_and_bad_arguments_say_why() -> None:
    body = _chat([("a", NAME, '{"handle": "spill_x", "query": "upgrade"}'), ("b", NAME, "{not json"),
                  ("c", NAME, '{"query": "x"}'), ("d", NAME, '{"handle": "spill_y", "query": "  "}'),
                  ("e", "bash", '{"cmd": "ls"}')])
    calls = recall_calls("chat", turn_of_json("chat", body), NAME)
    assert [(c.call_id, c.handle, c.query, c.problem is None) for c in calls] == [
        ("a", "spill_x", "upgrade", True), ("b", None, None, False), ("c", None, None, False), ("d", "spill_y", None, True)]
    assert [c.name for c in client_calls("chat", turn_of_json("chat", body), NAME)] == ["bash"]


def test_recall_calls_in_anthropic_and_responses_turns() -> None:
    anth = {"type": "message", "content": [{"type": "text", "text": "hm"},
            {"type": "tool_use", "id": "t1", "name": NAME, "input": {"handle": "spill_x"}},
            {"type": "tool_use", "id": "t2", "name": "bash", "input": {"cmd": "ls"}}]}
    resp = {"object": "response", "output": [{"type": "function_call", "call_id": "f1", "name": NAME,
                                              "arguments": '{"handle":"spill_z"}'}]}
    assert [(c.call_id, c.handle) for c in recall_calls("messages", turn_of_json("messages", anth), NAME)] == [("t1", "spill_x")]
    assert [(c.call_id, c.handle) for c in recall_calls("responses", turn_of_json("responses", resp), NAME)] == [("f1", "spill_z")]


# --------------------------------------------------------------------------- follow-up


def test_chat_follow_up_keeps_the_recall_calls_only_and_answers_each() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "roll back"}], "tools": [BASH_CHAT]}
    before = copy.deepcopy(body)
    turn = turn_of_json("chat", _chat([("a", NAME, '{"handle":"h"}'), ("b", "bash", '{"cmd":"x"}')], "let me check"))
    out = followup_body("chat", body, turn, NAME, [("a", "REGION")])
    assert body == before
    assert out["messages"][:1] == body["messages"]
    assert out["messages"][1] == {"role": "assistant", "content": "let me check", "tool_calls": [turn["tool_calls"][0]]}
    assert out["messages"][2] == {"role": "tool", "tool_call_id": "a", "content": "REGION"}
    assert out["tools"] == body["tools"] and len(out["messages"]) == 3


def test_anthropic_follow_up_appends_the_turn_and_a_user_tool_result() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "roll back"}]}
    turn = [{"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "tool_use", "id": "t1", "name": NAME, "input": {"handle": "h"}},
            {"type": "tool_use", "id": "t2", "name": "bash", "input": {"cmd": "x"}}]
    out = followup_body("messages", body, turn, NAME, [("t1", "REGION")])
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user"]
    assert out["messages"][1]["content"] == turn[:2]  # thinking kept, the client's call not
    assert out["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "t1", "content": "REGION"}]
    # a prefilled assistant turn is continued, not followed by a second assistant message
    pre = followup_body("messages", {"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "I will"}]},
                        turn[1:2], NAME, [("t1", "R")])
    assert [m["role"] for m in pre["messages"]] == ["user", "assistant", "user"]
    assert pre["messages"][1]["content"][0] == {"type": "text", "text": "I will"}


def test_responses_follow_up_appends_items_and_outputs() -> None:
    turn = [{"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "f1", "name": NAME, "arguments": "{}"},
            {"type": "function_call", "call_id": "f2", "name": "bash", "arguments": "{}"}]
    out = followup_body("responses", {"input": "roll back", "previous_response_id": "resp_0"}, turn, NAME, [("f1", "R")])
    assert out["input"][0] == {"role": "user", "content": "roll back"}
    assert [i.get("type") for i in out["input"][1:]] == ["reasoning", "function_call", "function_call_output"]
    assert out["input"][-1] == {"type": "function_call_output", "call_id": "f1", "output": "R"}
    assert out["previous_response_id"] == "resp_0"
    # stateless: a reasoning item without its encrypted content could not be referred to
    stateless = followup_body("responses", {"input": [], "store": False}, turn, NAME, [("f1", "R")])
    assert [i.get("type") for i in stateless["input"]] == ["function_call", "function_call_output"]


# --------------------------------------------------------------------------- final answer


usage_dicts = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 10**6), min_size=1)


@given(st.lists(st.fixed_dictionaries({"n": st.integers(0, 10**6), "d": usage_dicts}), min_size=1, max_size=5))
def test_usage_is_summed_field_by_field(usages: list[dict[str, Any]]) -> None:
    total = sum_usage(usages)
    assert total["n"] == sum(u["n"] for u in usages)
    for k in {k for u in usages for k in u["d"]}:
        assert total["d"][k] == sum(u["d"].get(k, 0) for u in usages)


def test_usage_keeps_non_counts_from_the_last_round() -> None:
    assert sum_usage([{"input_tokens": 1, "service_tier": "standard", "x": None}, {"input_tokens": 2, "service_tier": "priority"}]) == {
        "input_tokens": 3, "service_tier": "priority", "x": None}


def test_final_json_is_the_last_round_with_summed_usage() -> None:
    first, last = _chat([("a", NAME, "{}")]), _chat([], "done")
    last["id"] = "c2"
    out = final_json("chat", last, [first["usage"], last["usage"]], NAME)
    assert out["id"] == "c2" and out["choices"] == last["choices"]
    assert out["usage"] == {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}
    echoed = final_json("responses", {"tools": [{"type": "function", "name": NAME}, BASH_RESP]}, [], NAME)
    assert echoed["tools"] == [BASH_RESP]


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_strip_leaves_no_recall_call_and_says_why(api: Any) -> None:
    bodies = {
        "chat": _chat([("a", NAME, "{}")]),
        "messages": {"type": "message", "content": [{"type": "tool_use", "id": "t", "name": NAME, "input": {}}], "stop_reason": "tool_use"},
        "responses": {"object": "response", "output": [{"type": "function_call", "call_id": "f", "name": NAME, "arguments": "{}"}]},
    }
    out = strip_json(api, bodies[api], NAME, "NOTE")
    assert recall_calls(api, turn_of_json(api, out), NAME) == []
    assert "NOTE" in json.dumps(out)
    if api == "chat":
        assert out["choices"][0]["finish_reason"] == "stop"
    if api == "messages":
        assert out["stop_reason"] == "end_turn"


def test_strip_keeps_the_clients_calls() -> None:
    out = strip_json("chat", _chat([("a", NAME, "{}"), ("b", "bash", "{}")]), NAME, "NOTE")
    assert [c.name for c in client_calls("chat", turn_of_json("chat", out), NAME)] == ["bash"]
    assert out["choices"][0]["finish_reason"] == "tool_calls" and "NOTE" not in json.dumps(out)


# --------------------------------------------------------------------------- results


REGION = render_region(from_openai_chat({"messages": [
    {"role": "user", "content": "apply the migration"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd":"alembic upgrade head"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "Running upgrade -> add orders\nrevision 3f9a1c2b7d4e applied"},
    {"role": "user", "content": "now check the service"},
]}).messages)


def test_a_query_returns_only_the_passages_that_mention_it() -> None:
    out = recall_result("spill_x", REGION, "REVISION 3f9a", 10_000)
    assert "3f9a1c2b7d4e applied" in out and "now check the service" not in out and "apply the migration" not in out
    assert "1 passage(s)" in out
    none = recall_result("spill_x", REGION, "nothing like it", 10_000)
    assert "No passage" in none and "3f9a" not in none
    assert REGION in recall_result("spill_x", REGION, None, 10_000)


def test_a_result_is_cut_to_its_limit_and_says_so() -> None:
    out = recall_result("spill_h", "Q" * 5000, None, 1000)
    kept = out.count("Q")
    assert len(out.encode()) <= 1000 and kept > 700
    assert f"{5000 - kept} more byte(s) not returned" in out


@given(st.text(max_size=3000), st.integers(1024, 4000), st.one_of(st.none(), st.text(min_size=1, max_size=5)))
def test_a_result_never_exceeds_its_limit_and_keeps_a_verbatim_prefix(text: str, limit: int, query: str | None) -> None:
    out = recall_result("spill_h", text, query, limit)
    assert len(out.encode("utf-8", "surrogatepass")) <= limit
    head, _, rest = out.partition("\n")
    assert head.startswith("[compaction-gate recall of spill_h")
    if "more byte(s) not returned" in out:
        body = rest[: rest.rindex("\n[… ")]
        whole = text if query is None else "\n".join(p for p in passages(text) if query.casefold() in p.casefold())
        assert whole.startswith(body)
        n = int(out[out.rindex("[… ") + 3 :].split(" ", 1)[0])
        assert n == len(whole.encode("utf-8", "surrogatepass")) - len(body.encode("utf-8", "surrogatepass"))


@given(st.lists(st.text(min_size=0, max_size=30), max_size=8))
def test_passages_cover_the_region_exactly(lines: list[str]) -> None:
    text = "\n".join(f"--- [{i}] user\n{t}" if i % 2 else t for i, t in enumerate(lines))
    assert "\n".join(passages(text)) == text


def test_deferred_client_calls_are_named_in_the_result() -> None:
    from proxy.core.interventions.recall import TurnCall

    out = with_deferred("R", [TurnCall("b", "bash", "{}")])
    assert out.startswith("R\n") and "bash" in out and "not run" in out
