"""Unit tests for the defects issue 13 found with the real clients, with the official
SDKs against the gate and the fake upstream (request shapes as Claude Code 2.1.332,
LangChain and aider send them)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from proxy.config import StateSettings
from proxy.core.dialects import from_body
from proxy.core.markers import default_markers, fold
from proxy.core.signals import default_obligations
from proxy.core.summarize_request import detect_summarize_request
from proxy.core.transition import classify
from proxy.core.volatile import stable_system
from proxy.gate.identity import explicit_id
from tests.e2e.stack import GateStack
from tests.support.fake_upstream import Call, Reply

FROM, TO = "1a2b3c4d5e6f", "4f9a2c1e7b3d"
UPGRADE_OUT = f"INFO  [alembic.runtime.migration] Running upgrade {FROM} -> {TO}, add orders table"
#: the line as a note shows it (whitespace collapsed)
UPGRADE_LINE = " ".join(UPGRADE_OUT.split())
CONTINUATION = "This session is being continued from a previous conversation that ran out of context. Summary: the migration was applied."


def _reply(call: Call) -> Reply:
    return Reply(text="ok")


def billing(suffix: str) -> dict[str, str]:
    return {
        "type": "text",
        "text": f"x-anthropic-billing-header: cc_version=2.1.332.{suffix}; cc_entrypoint=sdk-cli;",
    }


def cc_history(suffix: str = "fa7") -> dict[str, Any]:
    return {
        "system": [billing(suffix), {"type": "text", "text": "You are Claude Code."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Apply the migration."}]},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Bash",
                        "input": {"command": "alembic upgrade head"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": UPGRADE_OUT}
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Applied."}]},
            {"role": "user", "content": [{"type": "text", "text": "Check the service."}]},
        ],
    }


def cc_compacted(suffix: str = "cf6", latest: str = "Roll back the migration.") -> dict[str, Any]:
    # no kept tail: the summary and the user's latest text merged in one user message
    return {
        "system": [billing(suffix), {"type": "text", "text": "You are Claude Code."}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>Today's date is 2026-12-01.</system-reminder>"},
                {"type": "text", "text": CONTINUATION},
                {"type": "text", "text": latest},
            ]},
        ],
    }  # fmt: skip


def send(stack: GateStack, body: dict[str, Any], sid: str | None, **extra: Any) -> Any:
    client = anthropic.Anthropic(base_url=stack.url, api_key="sk-ant-test", max_retries=0)
    headers = {"x-claude-code-session-id": sid} if sid else {}
    meta = (
        {"user_id": json.dumps({"device_id": "d" * 64, "account_uuid": "", "session_id": sid})}
        if sid
        else None
    )
    kwargs: dict[str, Any] = {"metadata": meta} if meta else {}
    return client.messages.with_raw_response.create(
        model="claude-sonnet-4-5", max_tokens=64, extra_headers=headers, **body, **kwargs, **extra
    )


@pytest.fixture
def stacks() -> Any:
    made: list[GateStack] = []

    def make(policy: str, **kw: Any) -> GateStack:
        s = GateStack(policy, _reply, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        if s.bg.loop.is_running():
            s.close()


# ----------------------------------------------------------------------------- identity


def test_metadata_user_id_json_of_claude_code_2_1() -> None:
    sid = str(uuid.uuid4())
    uid = json.dumps(
        {"device_id": "50b7" * 16, "account_uuid": "", "session_id": sid}, separators=(",", ":")
    )
    got = explicit_id({}, {"metadata": {"user_id": uid}})
    assert got is not None and got.value == sid and got.source == "body:metadata.user_id"


def test_billing_line_is_not_part_of_the_system_identity() -> None:
    a = "x-anthropic-billing-header: cc_version=2.1.332.fa7; cc_entrypoint=sdk-cli;\nYou are Claude Code."
    b = "x-anthropic-billing-header: cc_version=2.1.332.cf6; cc_entrypoint=sdk-cli;\nYou are Claude Code."
    assert stable_system(a) == stable_system(b) == "You are Claude Code."
    assert (
        stable_system("You are Claude Code.\nUse x-header: values")
        == "You are Claude Code.\nUse x-header: values"
    )
    t = classify(from_body("messages", cc_history("fa7")), from_body("messages", cc_history("cf6")))
    assert t.kind == "append" and not t.system_changed


@pytest.mark.parametrize("explicit", [True, False])
def test_claude_code_keeps_one_conversation_across_compaction(stacks: Any, explicit: bool) -> None:
    stack = stacks("audit")
    sid = str(uuid.uuid4()) if explicit else None
    first = send(stack, cc_history("fa7"), sid)
    cid = first.headers["x-compaction-gate-conversation"]
    assert cid == (sid or cid)
    second = send(stack, cc_compacted("cf6"), sid)
    # same conversation (no "<sid>.2"): the after-compaction check ran and saw the loss
    assert second.headers["x-compaction-gate-conversation"] == cid
    comp = [e for e in stack.events() if e["kind"] == "compaction"]
    assert comp and comp[0]["verdict"] == "destructive" and FROM in comp[0]["required"]


# ------------------------------------------------- summarization request vs compacted history


def test_claude_code_summarize_prompt_variants_are_recognised() -> None:
    m = default_markers()
    for prompt in (
        "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\nYour task is to create a detailed summary of the conversation so far",
        "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\nYour task is to create a detailed summary of this conversation.",
        "Your task is to create a detailed summary of the RECENT portion of the conversation — the messages that follow",
    ):
        assert m.summarize_request_agent(fold(prompt), "user") == "claude_code", prompt


def _langchain(messages_after: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": messages_after}


LC_BEFORE = [
    {"role": "system", "content": "You are a database agent."},
    {"role": "user", "content": "Apply the migration."},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": "alembic upgrade head"})}}]},
    {"role": "tool", "tool_call_id": "c1", "content": UPGRADE_OUT},
    {"role": "assistant", "content": "Applied."},
    {"role": "user", "content": "Check the service."},
]  # fmt: skip
LC_AFTER = [
    {"role": "system", "content": "You are a database agent."},
    {
        "role": "user",
        "content": "Here is a summary of the conversation to date:\n\nThe user applied a migration and the service checks passed.",
    },
]


def test_a_history_that_starts_from_a_summary_is_not_a_summarization_request() -> None:
    snap = from_body("chat", _langchain(LC_AFTER))
    assert detect_summarize_request(snap, default_markers()) is None
    asked = from_body(
        "chat",
        _langchain([*LC_BEFORE, {"role": "user", "content": "Summarize the conversation so far."}]),
    )
    assert detect_summarize_request(asked, default_markers()) is not None


def test_langchain_continuation_as_last_user_message_is_refused_live_under_strict(
    stacks: Any,
) -> None:
    stack = stacks("strict")
    client = openai.OpenAI(base_url=stack.openai_base_url, api_key="sk-test", max_retries=0)
    client.chat.completions.create(model="gpt-4o", messages=LC_BEFORE)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="gpt-4o", messages=LC_AFTER)  # type: ignore[arg-type]
    assert err.value.code == "destructive_compaction" and FROM in str(err.value)
    assert err.value.response.headers["x-should-retry"] == "false"
    assert not [e for e in stack.events() if e["kind"] == "summarization"]


# ----------------------------------------------------------------------------- the note


def _note_of(body: dict[str, Any]) -> tuple[int, str]:
    blocks = body["messages"][0]["content"]
    for i, b in enumerate(blocks):
        if "[compaction-gate:" in b.get("text", ""):
            return i, b["text"]
    raise AssertionError(blocks)


def test_note_goes_right_after_the_summary_is_byte_stable_and_shows_the_line(stacks: Any) -> None:
    stack = stacks("default")
    sid = str(uuid.uuid4())
    send(stack, cc_history(), sid)
    send(stack, cc_compacted(), sid)
    first = stack.fake.model_requests()[-1].json
    idx, note = _note_of(first)
    blocks = first["messages"][0]["content"]
    # right after the summary block, before the user's latest text of the same message
    assert (
        blocks[idx - 1]["text"] == CONTINUATION
        and blocks[idx + 1]["text"] == "Roll back the migration."
    )
    # each binding with the line it came from: which revision is the old head is visible
    assert f'"{UPGRADE_LINE}"' in note and f"`{FROM}`" in note
    # the next request repeats it byte for byte, in the same place (prompt caching)
    later = cc_compacted()
    later["messages"] += [
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        {"role": "user", "content": [{"type": "text", "text": "Go on."}]},
    ]
    send(stack, later, sid)
    again = stack.fake.model_requests()[-1].json
    assert _note_of(again) == (idx, note)
    assert json.dumps(again["messages"][0]) == json.dumps(first["messages"][0])


def test_a_regenerated_turn_after_the_repair_keeps_the_note_where_it_was(stacks: Any) -> None:
    """The model acts on the re-injected value; the client withdraws that turn and asks
    again (a regenerate, a retry after an error): the value is still lost to the client,
    and the repair stays one note right after the summary, byte for byte (not a second
    note after the user's latest text, which would hide the question from the model)."""
    from tests.support.fake_upstream import ToolCall

    def downgrade(call: Call) -> Reply:
        return Reply(tool_calls=[ToolCall("Bash", {"command": f"alembic downgrade {FROM}"})])

    stack = stacks("default")
    stack.fake.responder = downgrade
    sid = str(uuid.uuid4())
    send(stack, cc_history(), sid)
    send(stack, cc_compacted(), sid)
    first = stack.fake.model_requests()[-1].json
    send(stack, cc_compacted(), sid)  # the tool call withdrawn, the same request again
    again = stack.fake.model_requests()[-1].json
    assert json.dumps(again["messages"]) == json.dumps(first["messages"])
    assert json.dumps(again["messages"]).count("[compaction-gate:") == 1
    assert again["messages"][-1]["content"][-1]["text"] == "Roll back the migration."


def test_note_without_summary_never_splits_leading_system_and_kept_context() -> None:
    from proxy.core.analysis import analyze
    from proxy.gate.compaction import summary_anchor

    before = from_body("chat", {"messages": [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "<environment_context>cwd=/srv</environment_context>"},
        *LC_BEFORE[1:],
    ]})  # fmt: skip
    after = from_body("chat", {"messages": [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "<environment_context>cwd=/srv</environment_context>"},
        {"role": "user", "content": "Check the service."},
    ]})  # fmt: skip
    a = analyze(before, after, markers=default_markers())
    assert a.kind == "truncate"
    # the seam is after the kept client context (message 0 of the snapshot), not before it
    assert summary_anchor(a) == 0


# ------------------------------------------------------------- strict's way forward, restart


def test_strict_refusal_then_summarization_call_contracts_the_lost_bindings(stacks: Any) -> None:
    stack = stacks("strict")
    sid = str(uuid.uuid4())
    send(stack, cc_history(), sid)
    with pytest.raises(anthropic.BadRequestError) as err:
        send(stack, cc_compacted(), sid)
    assert "How to recover" in str(err.value) and "/compact" in str(err.value)
    # resent with other tools: still refused, and recorded as refused (not "safe")
    tool = {"name": "Bash", "description": "run", "input_schema": {"type": "object"}}
    with pytest.raises(anthropic.BadRequestError):
        send(stack, cc_compacted(), sid, tools=[tool])
    kinds = [(e["kind"], e["action"], e.get("verdict")) for e in stack.events()]
    assert ("reject_sticky", "reject", None) in kinds
    assert not [k for k in kinds[1:] if k[0] == "compaction" and k[2] == "safe"]
    # re-compaction: the summarization call gets a contract naming the lost binding
    summarize = cc_compacted()
    summarize["messages"][0]["content"].append(
        {"type": "text", "text": "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools."}
    )
    send(stack, summarize, sid)
    sent = json.dumps(stack.fake.model_requests()[-1].json)
    assert "[compaction-gate: summary contract]" in sent and FROM in sent
    gated = [e for e in stack.events() if e["kind"] == "summarization"][-1]
    assert FROM in gated["restore"]
    # a compacted history that keeps them passes
    fixed = cc_compacted(latest=f"Summary kept: {FROM} -> {TO}. Roll back.")
    ok = send(stack, fixed, sid)
    assert ok.status_code == 200


def test_repair_state_survives_a_restart(stacks: Any, tmp_path: Path) -> None:
    state = StateSettings(backend="sqlite", path=str(tmp_path / "state.sqlite3"))
    sid = str(uuid.uuid4())
    one = stacks("default", state=state)
    send(one, cc_history(), sid)
    send(one, cc_compacted(), sid)
    assert "[compaction-gate:" in json.dumps(one.fake.model_requests()[-1].json)
    one.bg.run(one.gate.tracker.flush())
    one.close()  # the process ends ...
    two = stacks("default", state=state)  # ... and a new one starts on the same state
    r = send(two, cc_compacted(), sid)
    assert r.headers["x-compaction-gate-action"] == "reinject"
    body = json.dumps(two.fake.model_requests()[-1].json)
    assert FROM in body and UPGRADE_LINE in body


# ----------------------------------------------------------------------------- aider


AIDER_RUN = (
    f"I ran this command:\n\nalembic upgrade head\n\nAnd got this output:\n\n{UPGRADE_OUT}\n"
)


def test_pasted_command_output_opens_obligations() -> None:
    snap = from_body(
        "chat",
        {
            "messages": [
                {"role": "user", "content": AIDER_RUN},
                {"role": "user", "content": f"I think {FROM} is fine"},
            ]
        },
    )
    from proxy.core.identifiers.extract import extract_snapshot

    ids = list(extract_snapshot(snap))
    required = {n for o in default_obligations(ids, snap) for n in o.bindings}
    by_msg = {(i.source.message_index, i.value) for i in ids if i.norm in required}
    assert (0, FROM) in by_msg and (0, TO) in by_msg
    assert (1, FROM) not in by_msg  # prose that merely mentions it opens nothing


def test_aider_setup_shuffle_is_not_a_compaction() -> None:
    setup_u = "I have *added these files to the chat* so you can edit them.\n\nnotes.md\n```\n# Notes\n```"
    setup_u2 = "I have *added these files to the chat* so you can edit them.\n\nnotes.md\n```\n# Notes\n- one\n```"
    reminder = {"role": "system", "content": "# *SEARCH/REPLACE block* Rules: ..."}
    before = from_body("chat", {"messages": [
        {"role": "system", "content": "Act as an expert software developer."},
        {"role": "user", "content": setup_u}, {"role": "assistant", "content": "Ok."},
        {"role": "user", "content": AIDER_RUN}, {"role": "assistant", "content": "Ok."},
        {"role": "user", "content": "Is it healthy?"}, reminder, {"role": "assistant", "content": "Yes."},
    ]})  # fmt: skip
    after = from_body("chat", {"messages": [
        {"role": "system", "content": "Act as an expert software developer."},
        {"role": "user", "content": AIDER_RUN}, {"role": "assistant", "content": "Ok."},
        {"role": "user", "content": "Is it healthy?  \n"}, {"role": "assistant", "content": "Yes."},
        {"role": "user", "content": setup_u2}, {"role": "assistant", "content": "Ok."},
        {"role": "user", "content": "Check the table."}, reminder,
    ]})  # fmt: skip
    assert classify(before, after, default_markers()).kind == "append"
    # a real compaction of the same history still is one
    compacted = from_body("chat", {"messages": [
        {"role": "system", "content": "Act as an expert software developer."},
        {"role": "user", "content": "I spoke to you previously about a number of things.\nA migration was applied."},
        {"role": "assistant", "content": "Ok."},
        {"role": "user", "content": setup_u2}, {"role": "assistant", "content": "Ok."},
        {"role": "user", "content": "Check the table."}, reminder,
    ]})  # fmt: skip
    assert classify(before, compacted, default_markers()).kind == "summarize"
