"""A bounded fuzz of the served gate (tracking + the default policy) over every route,
through raw sockets: whatever arrives — odd methods, paths, header lines with any
bytes, bodies of any shape and encoding — the proxy's own answers are never a 5xx and
always JSON in the caller's dialect, and the proxy stays healthy. (Answers relayed from
upstream carry its ``x-fake-upstream`` header and are upstream's business.)"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.stack import GateStack
from tests.support.fake_upstream import echo_responder
from tests.support.raw_http import RawResponse, request_bytes, send_raw

ROUTES = [
    "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", "/v1/models",
    "/v1/models/gpt-4o", "/v1/messages", "/v1/messages/count_tokens", "/v1/files", "/v1/echo/x",
    "/healthz", "/metrics", "/gate/", "/gate/events", "/gate/conversations", "/gate/policy",
    "/gate/spill/spill_nope", "/", "/chat/completions",
]
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=20,
)
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "tool", "x"]),
                           "content": st.text(max_size=40) | json_values}),
    max_size=4,
)
bodies = st.one_of(
    st.just(b""),
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.builds(lambda m, model, stream: json.dumps({"model": model, "messages": m, "stream": stream,
                                                   "max_tokens": 5}).encode(),
              messages, st.sampled_from(["gpt-4o", "claude-x", ""]), st.booleans()),
    st.integers(min_value=900, max_value=3000).map(lambda n: b'{"a":' + b"[" * n + b"]" * n + b"}"),
)
header_sets = st.lists(
    st.sampled_from([
        ("Content-Type", "application/json"), ("Content-Type", "text/plain"), ("Content-Type", "application/x+json"),
        ("anthropic-version", "2023-06-01"), ("x-api-key", "sk-ant-fuzz-0123456789abcdefghij"),
        ("Authorization", "Bearer sk-live-fuzz-0123456789abcdef"), ("Authorization", "Basic Zm9vOmJhcg=="),
        ("Content-Encoding", "gzip"), ("Content-Encoding", "br"), ("Content-Encoding", "identity"),
        ("Content-Encoding", "x-what"), ("x-compaction-gate-policy", "audit"), ("x-session-id", "s-1"),
        ("Expect", "100-continue"), ("Accept-Encoding", "gzip"), ("Connection", "keep-alive"),
    ]),
    max_size=6,
    unique_by=lambda h: h[0].lower(),
)
paths = st.one_of(
    st.sampled_from(ROUTES),
    st.builds(lambda r, tail: r + "/" + quote(tail, safe="/%.~"), st.sampled_from(ROUTES),
              st.text(max_size=12)),
    st.builds(lambda r, q: r + "?" + quote(q, safe="=&"), st.sampled_from(ROUTES), st.text(max_size=12)),
)


@pytest.fixture(scope="module")
def gate_stack() -> Iterator[GateStack]:
    stack = GateStack("default", echo_responder)
    try:
        yield stack
    finally:
        stack.close()


OPENAI_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings")


def expected_dialect(path: str, headers: list[tuple[str, str]]) -> str | None:
    path = path.split("?", 1)[0].rstrip("/")
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return "anthropic"
    if path in OPENAI_ROUTES or path.startswith("/gate/"):
        return "openai"
    return None  # decided by the headers: either shape is the caller's


def check(resp: RawResponse, method: str, path: str, headers: list[tuple[str, str]]) -> None:
    if resp.status < 400:
        return
    if "x-compaction-gate-error" not in resp.headers:
        # not the proxy's own error: it must be upstream's, relayed (the relay adds the
        # gate's headers; a bare aiohttp error page of the proxy would have none)
        assert path.startswith("/v1/") and "x-compaction-gate-action" in resp.headers, (resp.status, resp.raw[:300])
        return
    assert resp.status < 500, (resp.status, resp.body[:300])
    if method == "HEAD":
        return
    assert resp.headers.get("content-type", "").startswith("application/json"), (resp.status, resp.raw[:300])
    body: Any = json.loads(resp.body)
    anthropic = body.get("type") == "error" and set(body["error"]) == {"type", "message"}
    openai = isinstance(body.get("error"), dict) and "message" in body["error"] and "type" in body["error"]
    assert anthropic or openai, body
    want = expected_dialect(path, headers)
    if want is not None:
        assert (want == "anthropic") == anthropic, (path, body)
    assert "Traceback" not in resp.body.decode("utf-8", "replace")


@FUZZ
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]),
       path=paths, headers=header_sets, body=bodies, compress=st.booleans())
def test_fuzz_requests_over_every_route(gate_stack: GateStack, method: str, path: str,
                                        headers: list[tuple[str, str]], body: bytes, compress: bool) -> None:
    if compress and any(k == "Content-Encoding" and v == "gzip" for k, v in headers):
        body = gzip.compress(body)
    expect = any(k == "Expect" for k, _ in headers)
    data = request_bytes(method, path, headers, body)
    if expect:  # the head first; the body only after "100 Continue"
        head, _, rest = data.partition(b"\r\n\r\n")
        resp = send_raw(gate_stack.url, head + b"\r\n\r\n", then=rest, timeout=15)
    else:
        resp = send_raw(gate_stack.url, data, timeout=15)
    check(resp, method, path, headers)


header_line = st.binary(min_size=1, max_size=120).filter(lambda b: b"\r\n" not in b)


@FUZZ
@given(path=st.sampled_from(ROUTES), lines=st.lists(header_line, min_size=1, max_size=4),
       long_line=st.sampled_from([0, 9000, 20000]))
def test_fuzz_malformed_header_lines(gate_stack: GateStack, path: str, lines: list[bytes], long_line: int) -> None:
    raw = [b"POST " + path.encode() + b" HTTP/1.1", b"Host: proxy", b"Connection: close"]
    raw += lines
    if long_line:
        raw.append(b"Authorization: Bearer sk-live-" + b"k" * long_line)
    data = b"\r\n".join(raw) + b"\r\n\r\n"
    resp = send_raw(gate_stack.url, data, timeout=15)
    check(resp, "POST", path, [])
    assert b"sk-live-kkkk" not in resp.raw


def test_healthy_after_the_fuzz(gate_stack: GateStack) -> None:
    resp = send_raw(gate_stack.url, request_bytes("GET", "/healthz"))
    assert resp.status == 200 and json.loads(resp.body)["status"] == "ok"
    resp = send_raw(gate_stack.url, request_bytes(
        "POST", "/v1/chat/completions", {"Content-Type": "application/json", "Authorization": "Bearer sk-after"},
        json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "still there?"}]}).encode()))
    assert resp.status == 200 and "still there?" in resp.body.decode()
