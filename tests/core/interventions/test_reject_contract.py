from __future__ import annotations

from proxy.core.interventions import Binding, add_summary_contract, error_body, rejection_message
from proxy.core.interventions.reject import FORBIDDEN_PHRASES

from . import conversations as conv
from .validity import check_anthropic, check_chat

REV = Binding("3f9a1c2b7d4e", "migration_revision", "tool result of bash `alembic upgrade head`")
UP = Binding("2~abcDEF_upload-XYZ", "upload_id", "tool result of aws s3api create-multipart-upload")
SECRET = Binding("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "github_token", sensitive=True)


def test_rejection_names_each_binding_and_what_to_do() -> None:
    msg = rejection_message([REV, UP, SECRET])
    assert REV.value in msg and UP.value in msg
    assert SECRET.value not in msg
    assert "How to recover" in msg
    # both ways forward are named: compact again (the gate contracts the values), or
    # send the values back; and retrying unchanged is said to fail
    assert "compact again" in msg and "/compact" in msg and "paste this list" in msg
    assert "unchanged will be refused" in msg
    low = msg.lower()
    assert not any(p in low for p in FORBIDDEN_PHRASES)


def test_error_bodies_per_dialect() -> None:
    o = error_body("openai", "m")
    assert o == {"error": {"message": "m", "type": "invalid_request_error", "param": None, "code": "destructive_compaction"}}
    a = error_body("anthropic", "m")
    assert a == {"type": "error", "error": {"type": "invalid_request_error", "message": "m"}}


def test_contract_appended_to_last_user_turn_chat() -> None:
    body = conv.chat([("user", "work"), ("assistant", "ok"), ("user", "Summarize the conversation so far.")])
    out, listed = add_summary_contract("openai_chat", body, [REV, SECRET])
    assert listed == [REV]
    last = out["messages"][-1]
    assert last["content"].startswith("Summarize the conversation so far.")
    assert REV.value in last["content"] and SECRET.value not in str(out)
    check_chat(out["messages"])
    assert len(out["messages"]) == len(body["messages"])


def test_contract_after_tool_result_adds_user_message_chat() -> None:
    body = conv.chat([("user", "x"), ("calls", [("c1", "bash", {}, "r")])])
    out, _ = add_summary_contract("openai_chat", body, [REV])
    assert out["messages"][-1]["role"] == "user"
    check_chat(out["messages"])


def test_contract_anthropic_keeps_alternation_and_prefill() -> None:
    body = conv.anthropic([("user", "Summarize"), ("assistant", "Summary:")])
    out, _ = add_summary_contract("anthropic", body, [REV])
    check_anthropic(out["messages"])
    assert out["messages"][-1] == body["messages"][-1]
    assert REV.value in out["messages"][0]["content"][-1]["text"]


def test_contract_responses_list_content() -> None:
    body = conv.responses([("user", "Summarize")])
    out, _ = add_summary_contract("openai_responses", body, [REV])
    parts = out["input"][-1]["content"]
    assert parts[-1]["type"] == "input_text" and REV.value in parts[-1]["text"]


def test_nothing_to_contract_leaves_body_alone() -> None:
    body = conv.chat([("user", "Summarize")])
    out, listed = add_summary_contract("openai_chat", body, [SECRET])
    assert listed == [] and out == body
