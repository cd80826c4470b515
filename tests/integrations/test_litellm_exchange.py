"""LiteLLM request data ↔ the gate's Exchange (pure translation, no LiteLLM needed)."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.integrations.litellm_exchange import (
    apply_body,
    call_kind,
    event_payload,
    exchange_of,
    request_body,
)
from proxy.server.headers import tenant_of


def litellm_data(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """What LiteLLM's pre-call hook receives: the client's body plus its own keys."""
    return {
        "model": "gpt-4o",
        "messages": messages,
        "stream": True,
        "metadata": {"user_api_key_hash": "88dc28d0f030c55ed4ab77ed8faf098196cb1c05df778539800c9f1243fe6b4b", "user_api_key_team_id": "t1"},
        "litellm_call_id": "call-123",
        "litellm_logging_obj": object(),
        "proxy_server_request": {
            "url": "http://127.0.0.1:4000/v1/chat/completions?foo=1",
            "method": "POST",
            "headers": {
                "X-LiteLLM-Session-Id": "sess-42",
                "Authorization": "Bearer sk-should-never-pass",
                "x-api-key": "sk-nor-this",
                "connection": "keep-alive",
            },
            "body": {"model": "gpt-4o"},
        },
        "secret_fields": {"raw_headers": {"authorization": "Bearer sk-secret"}},
        **extra,
    }


def test_call_types_map_to_the_gated_apis() -> None:
    assert call_kind("acompletion").kind == "chat"  # type: ignore[union-attr]
    assert call_kind("aresponses").path == "/v1/responses"  # type: ignore[union-attr]
    assert call_kind("anthropic_messages").dialect == "anthropic"  # type: ignore[union-attr]

    class Enum:
        value = "completion"

    assert call_kind(Enum()).kind == "chat"  # type: ignore[union-attr]
    assert call_kind("aembedding") is None and call_kind(None) is None


def test_the_exchange_is_the_clients_request_without_litellms_keys_or_secrets() -> None:
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    call = call_kind("acompletion")
    assert call is not None
    ex = exchange_of(litellm_data(msgs), call, "hashed-virtual-key")
    assert ex.json == {"model": "gpt-4o", "messages": msgs, "stream": True}
    assert json.loads(ex.body) == ex.json
    assert ex.stream is True and ex.model == "gpt-4o" and ex.request_id == "call-123"
    assert ex.path == "/v1/chat/completions" and ex.kind == "chat" and ex.dialect == "openai"
    assert ex.query == "foo=1"
    assert ex.headers == {"x-litellm-session-id": "sess-42"}  # no credential, no hop-by-hop
    assert ex.tenant == tenant_of("hashed-virtual-key") != tenant_of(None)
    assert "sk-" not in repr(ex)


def test_a_client_metadata_user_id_survives_and_litellms_metadata_does_not() -> None:
    data = litellm_data([{"role": "user", "content": "x"}])
    data["metadata"]["user_id"] = '{"session_id": "abc"}'
    assert request_body(data)["metadata"] == {"user_id": '{"session_id": "abc"}'}


message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"]), "content": st.text(max_size=40)}
)


@given(before=st.lists(message, max_size=6), after=st.lists(message, max_size=8))
def test_a_replacement_body_changes_only_the_fields_it_rewrote(
    before: list[dict[str, Any]], after: list[dict[str, Any]]
) -> None:
    data = litellm_data(before)
    keep = {k: v for k, v in data.items() if k not in ("messages", "litellm_logging_obj")}
    logging_obj = data["litellm_logging_obj"]
    replacement = dict(request_body(data), messages=after)
    changed = apply_body(data, json.dumps(replacement).encode())
    assert changed == ([] if after == before else ["messages"])
    assert data["messages"] == after
    assert request_body(data) == replacement
    assert {k: v for k, v in data.items() if k not in ("messages", "litellm_logging_obj")} == copy.deepcopy(keep)
    assert data["litellm_logging_obj"] is logging_obj


def test_stream_event_payloads() -> None:
    assert event_payload(b'event: response.created\ndata: {"type": "response.created"}\n\n') == (
        "response.created",
        {"type": "response.created"},
    )
    assert event_payload(b"data: [DONE]\n\n") == (None, None)
