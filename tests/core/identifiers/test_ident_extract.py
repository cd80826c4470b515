"""Extraction behaviour: overlaps, composites, secrets, context, snapshots, caching."""

from __future__ import annotations

import json

import pytest
from ident_helpers import found, tool_source, values

from proxy.core.dialects import from_openai_chat
from proxy.core.identifiers import (
    Identifier,
    ScanCache,
    Source,
    extract_snapshot,
    extract_text,
    redact,
)
from proxy.core.messages import Part, Snapshot, ToolDef, make_message

SHA = "4ab09790de1eec4f5973f19c2dc3d58654165a62"
UUID = "a989aba5-6cbc-478c-8fc5-f6e6c01f99f5"


def kinds(ids: list[Identifier]) -> list[tuple[str, str]]:
    return [(i.kind, i.value) for i in ids]


# --------------------------------------------------------------------------- overlaps


def test_composite_gtid_wins_over_its_uuid() -> None:
    assert kinds(found(f"Executed_Gtid_Set: {UUID}:1-42")) == [("mysql_gtid", f"{UUID}:1-42")]


def test_kafka_composite_wins_and_normalises_across_forms() -> None:
    a = found("paused at topic orders partition 3 offset 1234", tool_source("kafka-consumer-groups --describe"))
    b = found("committed offsets: orders-3@1234")
    c = found('{"topic": "orders", "partition": 3, "offset": 1234}')
    assert [i.kind for i in a] == ["kafka_offset"]
    assert a[0].norm == b[0].norm == c[0].norm == "orders:3@1234"


def test_image_digest_ref_wins_over_bare_digest() -> None:
    d = "sha256:0c254fd85e02e47b5800ea8e8146bd32547f739a856ef283a485bf996162792e"
    assert kinds(found(f"image ghcr.io/acme/web@{d}")) == [("oci_image", f"ghcr.io/acme/web@{d}")]
    assert kinds(found(f"Digest: {d}")) == [("oci_digest", d)]


def test_locators_nest_specific_ids() -> None:
    ids = found(f"GET https://api.acme.io/v1/uploads/{UUID}/parts 200")
    assert ("url", f"https://api.acme.io/v1/uploads/{UUID}/parts") in kinds(ids)
    assert ("uuid", UUID) in kinds(ids)
    path = found("wrote migrations/versions/d1bf7246cf12_add_users.py", tool_source("alembic revision -m x"))
    assert ("path", "migrations/versions/d1bf7246cf12_add_users.py") in kinds(path)
    assert ("alembic_revision", "d1bf7246cf12") in kinds(path)


def test_more_specific_contextual_kind_wins_same_span() -> None:
    assert kinds(found(f'"UploadId": "{UUID}"')) == [("upload_id", UUID)]
    assert kinds(found(f"Revision ID: d1bf7246cf12 (git commit {SHA[:7]})"))[0] == ("alembic_revision", "d1bf7246cf12")


def test_arn_swallows_nested_parts() -> None:
    assert kinds(found("arn:aws:s3:::acme-media/uploads/big.bin")) == [("aws_arn", "arn:aws:s3:::acme-media/uploads/big.bin")]


def test_values_are_trimmed_and_offsets_exact() -> None:
    text = f"See (https://docs.acme.io/x). Then commit {SHA}."
    for i in found(text):
        assert text[i.start : i.end] == i.value
    assert "https://docs.acme.io/x" in values(text)


def test_hex_norms_are_case_folded_across_kinds() -> None:
    up = found(f'"UploadId": "{UUID.upper()}"')[0]
    plain = found(f"uuid {UUID}")[0]
    assert up.norm == plain.norm == UUID


# --------------------------------------------------------------------------- context rules


@pytest.mark.parametrize(
    "text,command,expected",
    [
        ("HEAD is now at d1bf724 fix", None, ["d1bf724"]),
        ("d1bf724 fix\n1655c56 add", "git log --oneline", ["d1bf724", "1655c56"]),
        ("d1bf724 fix\n1655c56 add", None, []),  # no git context: not short SHAs
        ("build 1234567 ok", None, []),
        ("deadbee is a commit", None, []),  # no digit
    ],
)
def test_short_sha_needs_git_context_digit_and_letter(text: str, command: str | None, expected: list[str]) -> None:
    assert values(text, "git_sha", tool_source(command)) == expected


def test_fallback_is_conservative() -> None:
    assert values("got handle x7Fq9LmZ2pR8 from the server", "opaque_token") == ["x7Fq9LmZ2pR8"]
    assert values("x7Fq9LmZ2pR8 alone, no keyword", "opaque_token") == []
    assert values("the id is user_id_2", "opaque_token") == []
    assert values("token: production", "opaque_token") == []


def test_placeholders_are_filtered() -> None:
    for text in [
        "00000000-0000-0000-0000-000000000000",
        "123e4567-e89b-12d3-a456-426614174000",
        "commit 0000000000000000000000000000000000000000",
        "instance i-1234567890abcdef0",
        "AKIAIOSFODNN7EXAMPLE",
        "https://example.com/api/items/1",
        "git commit deadbeef",
    ]:
        assert not [i for i in found(text) if i.kind != "path"], text


# --------------------------------------------------------------------------- secrets


SECRETS = [
    "sk-proj-J0vdpdD1sEB08Mjp6ScUg7MFT3BlbkFJMba4Vbye1EAzHX",
    "sk-ant-api03-PvDUjnz7ZsIt6EAwmPSSZklLoShl8R6CqLb4soXg-ZV7WS3deUk",
    "AKIA4QXR7ZB2LNMT6YWD",
    "ghp_ZV7WS3deUkmbxKv7cx5ljlDS9TXWUTZdo31W",
    "xoxb-2401830721-5402811220-J0vdpdD1sEB08Mjp6ScUg7MF",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_secrets_are_sensitive_and_never_shown(secret: str) -> None:
    text = f"config: KEY={secret} and the upload id is 2~Mba4Vbye1EAzHXJ0vdpdD1sE"
    ids = found(text)
    sec = [i for i in ids if i.value == secret]
    assert sec and sec[0].sensitive
    s = sec[0]
    assert s.norm.startswith("secret:") and secret not in s.norm
    assert secret not in s.context and redact(secret) in s.context
    assert secret not in repr(s) and secret not in s.display
    for other in ids:  # no other identifier's snippet leaks it either
        assert secret not in other.context


def test_pem_block_is_one_sensitive_identifier() -> None:
    pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----"
    ids = found(f"key file:\n{pem}\nend")
    assert [(i.kind, i.sensitive) for i in ids] == [("private_key", True)]
    assert "MIIEvQ" not in ids[0].context


def test_url_with_password_becomes_sensitive() -> None:
    ids = found("DATABASE_URL=postgres://app:Zq8rT2vLx9@db.internal:5432/app")
    url = [i for i in ids if i.kind == "url"]
    assert url and url[0].sensitive and "Zq8rT2vLx9" not in url[0].context and "Zq8rT2vLx9" not in url[0].norm


# --------------------------------------------------------------------------- snapshots


def test_snapshot_scans_system_messages_and_tools_but_not_binary() -> None:
    s = Snapshot(
        "plain",
        f"Repo HEAD was {SHA}.",
        (
            make_message("user", (Part("text", f"tenant {UUID}"), Part("binary", payload_digest="abc"))),
            make_message("assistant", (Part("thinking", "upload_id=2~Mba4Vbye1EAzHXJ0vdpdD1sE"),)),
        ),
        (ToolDef("fetch", "Fetch s3://acme-media/static objects", "{}"),),
    )
    ids = extract_snapshot(s, cache=None)
    where = {(i.source.message_index, i.source.origin, i.kind) for i in ids}
    assert (-1, "system", "git_sha") in where
    assert (0, "user", "uuid") in where
    assert (1, "thinking", "upload_id") in where
    assert (-2, "tool_def", "s3_uri") in where


def test_extract_snapshot_orders_by_message_and_offset() -> None:
    s = from_openai_chat({"messages": [{"role": "user", "content": f"{UUID} then {SHA}"}, {"role": "assistant", "content": f"ok {SHA}"}]})
    ids = extract_snapshot(s, cache=None)
    assert [(i.source.message_index, i.value) for i in ids] == [(0, UUID), (0, SHA), (1, SHA)]


def test_cache_scans_each_message_once_and_rebinds_indices() -> None:
    cache = ScanCache(64)
    m1 = {"role": "user", "content": f"tenant {UUID}"}
    m2 = {"role": "assistant", "content": f"commit {SHA}"}
    first = extract_snapshot(from_openai_chat({"messages": [m1, m2]}), cache=cache)
    misses = cache.misses
    # the head was dropped: same messages at new indices, scanned from the cache
    second = extract_snapshot(from_openai_chat({"messages": [m2]}), cache=cache)
    assert cache.misses == misses
    assert [(i.value, i.source.message_index) for i in second] == [(SHA, 0)]
    assert [(i.value, i.source.message_index) for i in first] == [(UUID, 0), (SHA, 1)]


def test_a_short_text_in_another_message_is_scanned_once() -> None:
    """The same tool call text in two replies (different ids, so different messages) is
    scanned once, and each copy's identifiers are bound to its own message."""
    cache = ScanCache(64)
    call = {"type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": f"git show {SHA}"})}}
    r1 = {"role": "assistant", "content": None, "tool_calls": [{**call, "id": "call_1"}]}
    r2 = {"role": "assistant", "content": None, "tool_calls": [{**call, "id": "call_2"}]}
    snap = from_openai_chat({"messages": [{"role": "user", "content": "go"}, r1, r2]})
    assert snap.messages[1].digest != snap.messages[2].digest
    ids = extract_snapshot(snap, cache=cache)
    assert [(i.value, i.source.message_index) for i in ids] == [(SHA, 1), (SHA, 2)]
    assert cache.hits >= 1  # the second copy came from the cache
    fresh = extract_snapshot(snap, cache=None)  # and it is what scanning it gives
    assert [(i.value, i.source.message_index, i.source.tool_call_id) for i in ids] == [
        (i.value, i.source.message_index, i.source.tool_call_id) for i in fresh]


def test_cache_key_includes_the_producing_command() -> None:
    cache = ScanCache(64)
    out = "d1bf724 fix typo"
    a = extract_text(out, tool_source("git log --oneline"), cache=cache)
    b = extract_text(out, tool_source("cat notes.txt"), cache=cache)
    assert [i.value for i in a] == ["d1bf724"] and b == []


def test_cache_is_bounded() -> None:
    cache = ScanCache(4)
    for k in range(10):
        extract_text(f"tenant {UUID} #{k}", Source(0, "user", "user"), cache=cache)
    assert len(cache) == 4


def test_tool_call_arguments_are_scanned() -> None:
    s = from_openai_chat(
        {
            "messages": [
                {"role": "user", "content": "roll back"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": f"git reset --hard {SHA}"})}}]},
            ]
        }
    )
    (i,) = [i for i in extract_snapshot(s, cache=None) if i.kind == "git_sha"]
    assert i.source.origin == "tool_call" and i.source.mutating is True and i.source.command == f"git reset --hard {SHA}"
