"""Explicit conversation ids: every header, prompt_cache_key, metadata.user_id; order."""

from __future__ import annotations

import pytest

from proxy.gate.identity import MAX_ID_LEN, explicit_id

SESSION = "7f9c2ba4-e88f-4b1c-9e6a-1c2d3e4f5a6b"


@pytest.mark.parametrize(
    "header",
    ["x-conversation-id", "x-session-id", "x-litellm-session-id", "x-claude-code-session-id",
     "x-acme-agent-session-id", "session-id", "helicone-session-id"],
)
def test_each_header(header: str) -> None:
    got = explicit_id({header: "abc-123", "content-type": "application/json"}, {})
    assert got is not None and (got.value, got.source) == ("abc-123", f"header:{header}")


def test_header_order_first_match_wins() -> None:
    h = {"helicone-session-id": "h", "x-session-id": "s", "x-conversation-id": "c", "x-claude-code-session-id": "cc"}
    assert explicit_id(h, {}).value == "c"  # type: ignore[union-attr]
    del h["x-conversation-id"]
    assert explicit_id(h, {}).value == "s"  # type: ignore[union-attr]
    del h["x-session-id"]
    assert explicit_id(h, {}).value == "cc"  # type: ignore[union-attr]
    del h["x-claude-code-session-id"]
    assert explicit_id(h, {}).value == "h"  # type: ignore[union-attr]


def test_prompt_cache_key() -> None:
    got = explicit_id({}, {"model": "gpt-5", "prompt_cache_key": "thread_42"})
    assert got is not None and (got.value, got.source) == ("thread_42", "body:prompt_cache_key")
    # headers win over the body
    assert explicit_id({"x-session-id": "s"}, {"prompt_cache_key": "k"}).value == "s"  # type: ignore[union-attr]


def test_anthropic_metadata_user_id_session_suffix() -> None:
    uid = f"user_5f1e0a_account_2b7c9d1e-0000-4000-8000-000000000000_session_{SESSION}"
    got = explicit_id({}, {"metadata": {"user_id": uid}})
    assert got is not None and (got.value, got.source) == (SESSION, "body:metadata.user_id")
    js = f'{{"device_id": "d", "session_id": "{SESSION}"}}'
    assert explicit_id({}, {"metadata": {"user_id": js}}).value == SESSION  # type: ignore[union-attr]


def test_no_explicit_id() -> None:
    assert explicit_id({}, {"messages": []}) is None
    assert explicit_id({}, {"metadata": {"user_id": "just-a-user"}}) is None
    assert explicit_id({"x-session-id": "  "}, None) is None


def test_ids_are_cleaned_and_bounded() -> None:
    got = explicit_id({"x-session-id": "a b\r\n<script>" + "x" * 500}, {})
    assert got is not None and len(got.value) == MAX_ID_LEN
    assert all(c.isalnum() or c in "._:@/+=-_" for c in got.value)


def test_vendor_session_headers_read_in_order_whatever_else_is_sent() -> None:
    # the header names are looked up once per set of names a client sends (issue 15)
    for _ in range(2):
        h = {"x-foo-session-id": "foo-1", "x-bar-session-id": "bar-1", "user-agent": "x"}
        found = explicit_id(h, {})
        assert found is not None and (found.value, found.source) == ("bar-1", "header:x-bar-session-id")
        found = explicit_id({**h, "x-session-id": "s-1"}, {})
        assert found is not None and found.source == "header:x-session-id"
        found = explicit_id({"x-foo-session-id": "foo-1", "session-id": "plain"}, {})
        assert found is not None and found.source == "header:x-foo-session-id"
        assert explicit_id({"x-Foo-session-id": "f", "my-session-id": "m"}, {}) is None
