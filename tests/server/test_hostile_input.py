"""Hostile input: every error the proxy itself produces is JSON in the caller's dialect
with the right status — parser-level errors included — and nothing odd reaches upstream
(dot-segment paths, undecodable bodies, bodies over the limit behind 100-continue)."""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import brotli
import pytest

from proxy.config import ServerSettings
from tests.support import ProxyStack
from tests.support.raw_http import RawResponse, request_bytes, send_raw

KEY = "sk-live-HOSTILE0123456789abcdefXYZ"
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}


def assert_dialect(resp: RawResponse, dialect: str, status: int) -> dict[str, Any]:
    assert resp.status == status, resp.raw[:400]
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    body = resp.json()
    if dialect == "anthropic":
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert KEY not in resp.raw.decode("latin-1")
    return dict(body)


# ----------------------------------------------------------------- parser-level errors

PARSER_CASES = [
    # (name, raw request, dialect, status)
    (
        "header line too long",
        b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() + b"a" * 9000 + b"\r\n\r\n",
        "anthropic",
        431,
    ),
    (
        "bare CR in a header",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() + b"\rX\r\n\r\n",
        "openai",
        400,
    ),
    ("NUL in a header", b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", "openai", 400),
    (
        "Anthropic by header name",
        b"POST /v1/files HTTP/1.1\r\nHost: x\r\nanthropic-version: 2023-06-01\r\nX-A: a\x00b\r\n\r\n",
        "anthropic",
        400,
    ),
    ("request line too long", b"GET /v1/" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", "openai", 414),
    (
        "too many headers",
        b"GET /v1/messages HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(200)) + b"\r\n",
        "anthropic",
        431,
    ),
    ("bad method", b"G@T /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", "openai", 400),
    ("TLS on the HTTP port", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "openai", 400),
    ("bad Content-Length", b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", "anthropic", 400),
    (
        "Content-Length with Transfer-Encoding",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "openai",
        400,
    ),
    (
        "unsupported encoding at parse time",
        b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Encoding: zstd\r\nContent-Length: 4\r\n\r\nabcd",
        "anthropic",
        415,
    ),
]


@pytest.mark.parametrize(("name", "data", "dialect", "status"), PARSER_CASES, ids=[c[0] for c in PARSER_CASES])
def test_parser_errors_are_json_in_the_callers_dialect(
    stack: ProxyStack, name: str, data: bytes, dialect: str, status: int
) -> None:
    resp = send_raw(stack.url, data)
    if name == "unsupported encoding at parse time" and resp.status != 415:
        # aiohttp decodes zstd when backports.zstd is installed; then the (bad) body is a 400
        status = 400
    body = assert_dialect(resp, dialect, status)
    assert "Traceback" not in json.dumps(body)
    assert resp.headers["x-compaction-gate-action"] == "none"
    assert stack.fake.requests == []  # nothing malformed ever reaches upstream


def test_the_proxy_is_healthy_after_parser_errors(stack: ProxyStack) -> None:
    for _, data, _, _ in PARSER_CASES:
        send_raw(stack.url, data)
    ok = send_raw(stack.url, request_bytes("GET", "/healthz"))
    assert ok.status == 200 and ok.json()["status"] == "ok"


# ----------------------------------------------------------------- bodies


def _post(stack: ProxyStack, body: bytes, headers: dict[str, str], path: str = "/v1/chat/completions") -> RawResponse:
    base = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
    return send_raw(stack.url, request_bytes("POST", path, {**base, **headers}, body))


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("br", brotli.compress),
    ],
)
def test_compressed_request_bodies_are_decoded_and_forwarded_decoded(
    stack: ProxyStack, encoding: str, encode: Any
) -> None:
    raw = json.dumps(CHAT).encode()
    resp = _post(stack, encode(raw), {"Content-Encoding": encoding})
    assert resp.status == 200, resp.body
    (seen,) = stack.fake.requests
    assert seen.body == raw and "content-encoding" not in seen.headers
    assert seen.json == CHAT


def test_a_zip_bomb_is_a_413_by_decoded_size(make_stack: Any) -> None:
    stack: ProxyStack = make_stack(server=ServerSettings(port=0, max_body_bytes=1 << 20))
    bomb = gzip.compress(b'{"model": "m", "messages": [], "pad": "' + b"0" * (64 << 20) + b'"}')
    assert len(bomb) < 200_000  # small on the wire, 64 MiB decoded
    assert_dialect(_post(stack, bomb, {"Content-Encoding": "gzip"}), "openai", 413)
    assert_dialect(_post(stack, bomb, {"Content-Encoding": "gzip"}, "/v1/messages"), "anthropic", 413)
    assert stack.fake.requests == []


def test_a_broken_compressed_body_is_a_400(stack: ProxyStack) -> None:
    body = assert_dialect(_post(stack, b"not gzip at all", {"Content-Encoding": "gzip"}), "openai", 400)
    assert "gzip" in body["error"]["message"]


@pytest.mark.parametrize("encoding", ["compress", "gzip, br", "x-made-up"])
def test_an_undecodable_content_encoding_is_a_415_saying_why(stack: ProxyStack, encoding: str) -> None:
    body = assert_dialect(_post(stack, b"{}", {"Content-Encoding": encoding}, "/v1/messages"), "anthropic", 415)
    assert "gzip, deflate and br" in body["error"]["message"]
    assert stack.fake.requests == []


def test_json_nested_too_deep_is_a_400(stack: ProxyStack) -> None:
    deep = b'{"model": "m", "messages": [], "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    body = assert_dialect(_post(stack, deep, {}), "openai", 400)
    assert "nested" in body["error"]["message"]
    assert send_raw(stack.url, request_bytes("GET", "/healthz")).status == 200


def test_a_non_utf8_authorization_is_a_400_not_a_crash(stack: ProxyStack) -> None:
    data = (
        b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer sk-\xff\xfe-live\r\nContent-Length: 2\r\n\r\n{}"
    )
    body = assert_dialect(send_raw(stack.url, data), "anthropic", 400)
    assert "Authorization" in body["error"]["message"] or "authorization" in body["error"]["message"]
    assert stack.fake.requests == []


# ----------------------------------------------------------------- paths


@pytest.mark.parametrize(
    "path",
    [
        "/v1/../../x",
        "/v1/chat/../../admin",
        "/v1/%2e%2e/%2e%2e/x",
        "/v1/%2E%2E/x",
        "/v1/.%2E/x",
        "/v1/%2e./x",
        "/v1/./chat/completions",
        "/v1/files/%252e%252e/x",
        "/v1/files/..%2fx",
        "/v1/messages/..",
    ],
)
def test_dot_segment_paths_are_refused_before_routing(stack: ProxyStack, path: str) -> None:
    resp = _post(stack, json.dumps(CHAT).encode(), {}, path)
    dialect = "anthropic" if path.startswith("/v1/messages") else "openai"
    body = assert_dialect(resp, dialect, 400)
    assert body["error"]["message"].startswith("The request path contains")
    assert stack.fake.requests == []


def test_dots_inside_a_segment_are_fine(stack: ProxyStack) -> None:
    resp = send_raw(stack.url, request_bytes("GET", "/v1/models/gpt-4.1..x", {"Authorization": f"Bearer {KEY}"}))
    assert resp.status != 400 or "path contains" not in resp.body.decode()
    assert [r.path for r in stack.fake.requests] == ["/v1/models/gpt-4.1..x"]


# ----------------------------------------------------------------- Expect: 100-continue


def test_expect_100_continue_over_the_limit_is_413_without_100(make_stack: Any) -> None:
    stack: ProxyStack = make_stack(server=ServerSettings(port=0, max_body_bytes=1000))
    head = request_bytes(
        "POST",
        "/v1/messages",
        {"Content-Type": "application/json", "Expect": "100-continue", "Content-Length": "5000"},
    )
    resp = send_raw(stack.url, head)
    assert b"100 Continue" not in resp.raw
    assert_dialect(resp, "anthropic", 413)
    assert stack.fake.requests == []


def test_expect_100_continue_within_the_limit_continues(stack: ProxyStack) -> None:
    raw = json.dumps(CHAT).encode()
    head = request_bytes(
        "POST",
        "/v1/chat/completions",
        {"Content-Type": "application/json", "Expect": "100-continue", "Content-Length": str(len(raw))},
    )
    resp = send_raw(stack.url, head, then=raw)
    assert resp.raw.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert resp.status == 200
    assert stack.fake.requests[0].json == CHAT


# ----------------------------------------------------------------- aiohttp's own HTTP errors


def test_aiohttp_http_errors_are_json(stack: ProxyStack) -> None:
    resp = send_raw(stack.url, request_bytes("POST", "/healthz"))
    body = assert_dialect(resp, "openai", 405)
    assert body["error"]["code"] == "method_not_allowed"
    resp = send_raw(stack.url, request_bytes("GET", "/gate/no-such-thing"))
    assert_dialect(resp, "openai", 404)
