"""A conversation seen for the first time that shares with a tracked one only its system
prompt and a commonplace message ("yes") is not that conversation compacted: nothing of
the other conversation — its required bindings above all — reaches its requests (the
lineage's commonplace rule, :func:`proxy.core.lineage.commonplace`)."""

from __future__ import annotations

import json
from typing import Any

import openai

from tests.e2e.stack import GateStack
from tests.support.fake_upstream import Call, Reply, ToolCall

KEY = "7Hq2Lx9Vt4Rb8Nc3Zp1W"
SYSTEM = {"role": "system", "content": "You are an operations agent."}


def test_a_commonplace_shared_message_carries_no_binding_across_conversations() -> None:
    seen: list[list[Any]] = []

    def model(call: Call) -> Reply:
        msgs = call.messages()
        seen.append(msgs)
        if len(msgs) == 2 and "Upload" in str(msgs[1].get("content")):
            return Reply(tool_calls=[ToolCall("bash", {"cmd": f"aws s3api put-object --bucket b --key k --idempotency-key {KEY}"})])
        return Reply(text="done")

    stack = GateStack("default", model)
    try:
        client = openai.OpenAI(api_key="sk-test-commonplace", base_url=stack.openai_base_url, max_retries=0)
        a: list[Any] = [SYSTEM, {"role": "user", "content": "Upload the object, once."}]
        reply = client.chat.completions.create(model="gpt-4o", messages=a).choices[0].message.model_dump(exclude_none=True)
        a += [reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "uploaded"}]
        reply = client.chat.completions.create(model="gpt-4o", messages=a).choices[0].message.model_dump(exclude_none=True)
        a += [reply, {"role": "user", "content": "yes"}]
        client.chat.completions.create(model="gpt-4o", messages=a)
        # another task of the same agent, first seen here, with a "yes" of its own
        b = [SYSTEM, {"role": "user", "content": "List the buckets."}, {"role": "assistant", "content": "Shall I list all?"},
             {"role": "user", "content": "yes"}, {"role": "assistant", "content": "bucket-a bucket-b"},
             {"role": "user", "content": "thanks, now count them"}]
        got = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=b)  # type: ignore[arg-type]
        assert got.headers.get("x-compaction-gate-action") == "none"
        assert seen[-1] == b  # forwarded as sent
        assert KEY not in json.dumps(seen[-1])
        status, convs = stack.get("/gate/conversations")
        assert status == 200
        relations = sorted((c["last_relation"], c["requests"], c["compactions"]) for c in convs["conversations"])
        assert relations == [("extend", 3, 0), ("new", 1, 0)]  # two conversations, nothing compacted
        assert [e for e in stack.events() if e["kind"] != "request"] == []
    finally:
        stack.close()
