"""Byte-exact pass-through: bodies, headers, errors, encodings, streams."""

from __future__ import annotations

import asyncio
import gzip
import json
import time

import aiohttp
import pytest
from multidict import CIMultiDict
from yarl import URL

from tests.support import ProxyStack
from tests.support.fake_upstream import Fault

ODD_BODY = (
    b'{"zeta_unknown":{"nested":[3,2,1],"x":null},  "messages":[{"content":"hi \\u00e9",'
    b'"role":"user","vendor_field":true}],"model":"gpt-4o","temperature":0.70,'
    b'"stream":false , "metadata":{"b":1,"a":2}}'
)


async def post(url: str, body: bytes, **headers: str) -> tuple[int, CIMultiDict[str], bytes]:
    async with aiohttp.ClientSession(auto_decompress=False) as s:
        h = {"content-type": "application/json", "authorization": "Bearer sk-test"}
        h.update({k.replace("_", "-"): v for k, v in headers.items()})
        async with s.post(url, data=body, headers=h) as r:
            return r.status, CIMultiDict(r.headers), await r.read()


async def test_request_body_reaches_upstream_byte_exact(stack: ProxyStack) -> None:
    status, _, _ = await post(stack.openai_base_url + "/chat/completions", ODD_BODY)
    assert status == 200
    assert stack.fake.requests[-1].body == ODD_BODY


async def test_response_bytes_identical_to_direct(stack: ProxyStack) -> None:
    direct = await post(stack.fake.openai_base_url + "/chat/completions", ODD_BODY)
    proxied = await post(stack.openai_base_url + "/chat/completions", ODD_BODY)
    assert proxied[0] == direct[0] == 200
    assert proxied[2] == direct[2]
    for name in (
        "x-request-id",
        "x-ratelimit-remaining-requests",
        "openai-processing-ms",
        "content-type",
    ):
        assert proxied[1][name] == direct[1][name]
    assert proxied[1]["Content-Length"] == direct[1]["Content-Length"]


async def test_upstream_raw_body_with_odd_key_order_relayed_verbatim(stack: ProxyStack) -> None:
    from tests.support.fake_upstream import Reply

    stack.fake.script(Reply(raw={"z": 1, "choices": [], "a": {"unknown": [1, {"y": 2, "b": 3}]}}))
    status, _, body = await post(stack.openai_base_url + "/chat/completions", ODD_BODY)
    assert status == 200
    assert body == b'{"z":1,"choices":[],"a":{"unknown":[1,{"y":2,"b":3}]}}'


async def test_non_json_raw_route_byte_exact(stack: ProxyStack) -> None:
    payload = bytes(range(256)) * 40
    async with (
        aiohttp.ClientSession(auto_decompress=False) as s,
        s.put(
            URL(stack.openai_base_url + "/echo/files/upload?part=2&x=%2F", encoded=True),
            data=payload,
            headers={"content-type": "application/octet-stream", "authorization": "Bearer sk"},
        ) as r,
    ):
        assert r.status == 200
        assert await r.read() == payload
        assert r.headers["x-echo-method"] == "PUT"
        assert r.headers["x-echo-path"] == "/v1/echo/files/upload?part=2&x=%2F"
        assert r.headers["content-type"] == "application/octet-stream"
    rec = stack.fake.requests[-1]
    assert rec.body == payload and rec.query == "part=2&x=%2F"


async def test_multipart_raw_route_passes(stack: ProxyStack) -> None:
    form = aiohttp.FormData()
    form.add_field("purpose", "batch")
    form.add_field("file", b'{"a":1}\n', filename="x.jsonl", content_type="application/jsonl")
    async with (
        aiohttp.ClientSession() as s,
        s.post(stack.openai_base_url + "/echo/files", data=form) as r,
    ):
        assert r.status == 200
        echoed = await r.read()
    assert stack.fake.requests[-1].body == echoed
    assert b'filename="x.jsonl"' in echoed


async def test_headers_forwarded_and_hop_by_hop_stripped(stack: ProxyStack) -> None:
    status, _, _ = await post(
        stack.openai_base_url + "/chat/completions",
        ODD_BODY,
        openai_organization="org-1",
        openai_beta="assistants=v2",
        x_stainless_lang="python",
        x_custom_thing="yes",
        anthropic_beta="tools-2024",
        connection="keep-alive, x-hop",
        x_hop="secret-hop",
        te="trailers",
        user_agent="MyAgent/1.0",
    )
    assert status == 200
    h = stack.fake.requests[-1].headers
    assert h["authorization"] == "Bearer sk-test"
    assert h["openai-organization"] == "org-1"
    assert h["openai-beta"] == "assistants=v2"
    assert h["x-stainless-lang"] == "python"
    assert h["x-custom-thing"] == "yes"
    assert h["anthropic-beta"] == "tools-2024"
    assert h["user-agent"] == "MyAgent/1.0"
    assert "x-hop" not in h and "te" not in h
    assert h.get("connection", "keep-alive").lower() != "x-hop"
    assert int(h["content-length"]) == len(ODD_BODY)


async def test_no_headers_invented_for_upstream(stack: ProxyStack) -> None:
    async with (
        aiohttp.ClientSession(skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding")) as s,
        s.get(stack.openai_base_url + "/models", headers={"authorization": "Bearer k"}) as r,
    ):
        assert r.status == 200
    h = stack.fake.requests[-1].headers
    for name in ("user-agent", "accept", "accept-encoding", "content-type"):
        assert name not in h, name


@pytest.mark.parametrize("status", [400, 401, 404, 422, 429, 500, 503, 529])
async def test_upstream_errors_relayed_unchanged(stack: ProxyStack, status: int) -> None:
    body = b'{"error":{"message":"nope","type":"x","param":null,"code":"c","extra":[1]}}'
    stack.fake.inject(
        Fault(
            status=status, body=body, headers={"retry-after": "7", "x-ratelimit-reset-tokens": "1s"}
        )
    )
    got_status, headers, got = await post(stack.openai_base_url + "/chat/completions", ODD_BODY)
    assert (got_status, got) == (status, body)
    assert headers["retry-after"] == "7"
    assert headers["x-ratelimit-reset-tokens"] == "1s"
    assert headers["x-request-id"].startswith("req_")
    assert headers["x-compaction-gate-action"] == "none"
    # and the proxy keeps serving
    assert (await post(stack.openai_base_url + "/chat/completions", ODD_BODY))[0] == 200


async def test_content_encoding_relayed_without_decompressing(stack: ProxyStack) -> None:
    raw = gzip.compress(b'{"id":"x","object":"chat.completion","choices":[]}')
    stack.fake.inject(Fault(status=200, body=raw, headers={"content-encoding": "gzip"}))
    status, headers, body = await post(
        stack.openai_base_url + "/chat/completions", ODD_BODY, accept_encoding="gzip"
    )
    assert status == 200
    assert headers["Content-Encoding"] == "gzip"
    assert body == raw
    assert stack.fake.requests[-1].headers["accept-encoding"] == "gzip"


def _sse_body(model: str = "gpt-4o") -> bytes:
    return json.dumps(
        {
            "model": model,
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "one two three four five six"}],
        }
    ).encode()


@pytest.mark.parametrize("line_ending", ["\n", "\r\n"])
async def test_sse_stream_byte_exact(stack: ProxyStack, line_ending: str) -> None:
    stack.fake.line_ending = line_ending
    stack.fake.write_size = 7  # events straddle TCP writes
    direct = await post(stack.fake.openai_base_url + "/chat/completions", _sse_body())
    proxied = await post(stack.openai_base_url + "/chat/completions", _sse_body())
    assert proxied[2] == direct[2]
    assert proxied[2].endswith(f"data: [DONE]{line_ending}{line_ending}".encode())
    assert proxied[1]["X-Accel-Buffering"] == "no"
    assert proxied[1]["Content-Type"].startswith("text/event-stream")
    assert "Content-Length" not in proxied[1]


async def test_anthropic_sse_byte_exact_all_event_types(stack: ProxyStack) -> None:
    body = json.dumps(
        {
            "model": "claude-fake-1",
            "max_tokens": 10,
            "stream": True,
            "messages": [{"role": "user", "content": "hello"}],
        }
    ).encode()
    direct = await post(
        stack.fake.anthropic_base_url + "/v1/messages", body, anthropic_version="2023-06-01"
    )
    proxied = await post(stack.url + "/v1/messages", body, anthropic_version="2023-06-01")
    assert proxied[2] == direct[2]
    for name in (
        b"message_start",
        b"content_block_start",
        b"ping",
        b"content_block_delta",
        b"content_block_stop",
        b"message_delta",
        b"message_stop",
    ):
        assert b"event: " + name + b"\n" in proxied[2]
    assert proxied[1]["request-id"] == direct[1]["request-id"]


async def test_first_event_does_not_wait_for_last(stack: ProxyStack) -> None:
    stack.fake.stream_delay = 0.15  # ~10 events -> >1.3 s in total
    async with aiohttp.ClientSession() as s:
        started = time.monotonic()
        async with s.post(
            stack.openai_base_url + "/chat/completions",
            data=_sse_body(),
            headers={"content-type": "application/json"},
        ) as r:
            first = await r.content.readline()
            first_at = time.monotonic() - started
            rest = await r.read()
            total = time.monotonic() - started
    assert first.startswith(b"data: ")
    assert rest.endswith(b"data: [DONE]\n\n")
    assert first_at < 0.5 < total


async def test_query_string_and_path_forwarded(stack: ProxyStack) -> None:
    async with (
        aiohttp.ClientSession() as s,
        s.get(stack.openai_base_url + "/models?limit=2&after=a%20b") as r,
    ):
        assert r.status == 200
    rec = stack.fake.requests[-1]
    assert rec.path == "/v1/models" and rec.query == "limit=2&after=a%20b"


async def test_head_request_relayed(stack: ProxyStack) -> None:
    async with aiohttp.ClientSession() as s, s.head(stack.openai_base_url + "/models") as r:
        assert r.status == 200
        assert await r.read() == b""
        assert r.headers["x-compaction-gate-action"] == "none"


async def test_concurrent_streams_do_not_interfere(stack: ProxyStack) -> None:
    stack.fake.stream_delay = 0.01

    async def one(i: int) -> bytes:
        body = json.dumps(
            {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": f"n{i}"}]}
        )
        return (await post(stack.openai_base_url + "/chat/completions", body.encode()))[2]

    results = await asyncio.gather(*(one(i) for i in range(12)))
    for i, res in enumerate(results):
        assert f'"n{i}"'.encode() in res and res.endswith(b"data: [DONE]\n\n")
