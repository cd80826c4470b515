"""The scripted demo model: lossy summaries, rollbacks of the revision it can see."""

from __future__ import annotations

import json

from aiohttp.test_utils import TestClient, TestServer

from proxy.demo_upstream import create_app, find_revision, invented_revision, reply_for

SYSTEM = {"role": "system", "content": "You are a deployment agent."}
APPLY = [
    SYSTEM,
    {"role": "user", "content": "Apply it: run `alembic upgrade head`."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "run_shell", "arguments": json.dumps({"command": "alembic upgrade head"})}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Rollback target: revision 4b1e9c2d7a30"},
]


def test_quoted_command_becomes_a_tool_call() -> None:
    assert reply_for({"messages": APPLY[:2]}).command == "alembic upgrade head"


def test_tool_result_gets_an_acknowledgement() -> None:
    reply = reply_for({"messages": APPLY})
    assert reply.text is not None and reply.text.startswith("Done.")


def test_rollback_uses_the_revision_in_context() -> None:
    body = {"messages": APPLY + [{"role": "user", "content": "Tests failed. Roll back now."}]}
    assert reply_for(body).command == "alembic downgrade 4b1e9c2d7a30"


def test_rollback_invents_a_revision_when_none_is_visible() -> None:
    msgs = [SYSTEM, {"role": "user", "content": "Summary: migration applied."},
            {"role": "user", "content": "Tests failed. Roll back now."}]
    command = reply_for({"messages": msgs}).command
    assert command == f"alembic downgrade {invented_revision(msgs)}"
    assert "4b1e9c2d7a30" not in command


RECALL_TOOL = {"type": "function", "function": {
    "name": "recall_compacted_context",
    "description": "Stored regions:\n- `spill_AbCdEfGhIjKlMnOpQrStUvWx01`: 4 message(s)",
    "parameters": {"type": "object"}}}


def test_with_the_recall_tool_offered_it_recalls_then_rolls_back_to_what_it_read() -> None:
    msgs = [SYSTEM, {"role": "user", "content": "Summary: migration applied."},
            {"role": "user", "content": "Tests failed. Roll back now."},
            {"role": "user", "content": "[compaction-gate: part of this conversation was stored outside the context]"}]
    first = reply_for({"messages": msgs, "tools": [RECALL_TOOL]})
    assert first.tool == "recall_compacted_context" and first.arguments == {"handle": "spill_AbCdEfGhIjKlMnOpQrStUvWx01"}
    msgs += [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c9", "type": "function", "function": {"name": "recall_compacted_context", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c9", "content": "--- [3] tool\nRollback target: revision 4b1e9c2d7a30"}]
    assert reply_for({"messages": msgs, "tools": [RECALL_TOOL]}).command == "alembic downgrade 4b1e9c2d7a30"
    # without the tool it invents, as before
    assert reply_for({"messages": msgs[:4]}).command == f"alembic downgrade {invented_revision(msgs[:4])}"


def test_summary_is_lossy_and_ignores_contracts() -> None:
    ask = {"role": "user", "content": "Your task is to create a detailed summary of the conversation so far. "
           "Keep these verbatim: 4b1e9c2d7a30"}
    reply = reply_for({"messages": APPLY + [ask]})
    assert reply.text is not None and "roll" in reply.text and "4b1e9c2d7a30" not in reply.text


def test_find_revision_ignores_the_instruction_itself() -> None:
    assert find_revision([SYSTEM, {"role": "user", "content": "revision 0123456789ab"}]) is None


async def test_wire_format_streamed_and_not() -> None:
    body = {"model": "gpt-4o-mini", "messages": APPLY[:2]}
    async with TestClient(TestServer(create_app())) as client:
        data = await (await client.post("/v1/chat/completions", json=body)).json()
        assert data["object"] == "chat.completion"
        call = data["choices"][0]["message"]["tool_calls"][0]
        assert json.loads(call["function"]["arguments"]) == {"command": "alembic upgrade head"}
        assert data["choices"][0]["finish_reason"] == "tool_calls"
        assert data["usage"]["total_tokens"] > 0
        resp = await client.post("/v1/chat/completions", json={**body, "stream": True,
                                                               "stream_options": {"include_usage": True}})
        raw = (await resp.read()).decode()
        events = [line[6:] for line in raw.split("\n") if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        args = "".join(
            tc["function"].get("arguments", "")
            for c in chunks for ch in c["choices"] for tc in ch["delta"].get("tool_calls", [])
        )
        assert json.loads(args) == {"command": "alembic upgrade head"}
        assert chunks[-1]["usage"]["total_tokens"] > 0
        assert (await client.get("/v1/models")).status == 200
