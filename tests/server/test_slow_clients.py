"""Slow clients (slowloris): a request head or body trickled in, or a silent connection,
cannot hold a connection for ever. A head not complete within
``server.client_header_timeout`` gets a 408 in the caller's dialect, a body that stops
for ``client_body_timeout`` gets a 408 too, a silent or idle connection is closed
without a word — and a client that is slow but keeps sending is served.

The timeouts here are a fraction of a second; the socket timeouts are only guards
against a hang (a server that never answers fails the test by what it did not send)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from proxy.config import ServerSettings
from proxy.yamlconf import Invalid
from tests.support import ProxyStack
from tests.support.raw_http import RawResponse, _parse

KEY = "sk-live-SLOWCLIENT0123456789abcdefXYZ"
LIMIT = 0.4  # every client timeout under test, seconds
GUARD = 10.0  # a socket read that waits this long means the server never acted


@pytest.fixture(scope="module")
def slow_stack() -> Iterator[ProxyStack]:
    stack = ProxyStack(
        server=ServerSettings(port=0, client_header_timeout=LIMIT, client_body_timeout=LIMIT, keepalive_timeout=LIMIT)
    )
    try:
        yield stack
    finally:
        stack.close()


def _connect(stack: ProxyStack) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", stack.server.port), timeout=GUARD)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        received += chunk
    return received


def _error(raw: bytes, dialect: str) -> tuple[RawResponse, dict[str, object]]:
    resp = _parse(raw)
    assert resp.status == 408, raw[:400]
    assert resp.headers["content-type"].startswith("application/json")
    assert resp.headers["x-compaction-gate-error"] == "request_timeout"
    body = json.loads(resp.body)
    if dialect == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
        assert set(body["error"]) == {"type", "message"}, body
    else:
        assert body["error"]["code"] == "request_timeout", body
    assert KEY not in raw.decode("latin-1")
    return resp, body


def test_a_head_that_never_completes_gets_a_408_in_its_dialect(slow_stack: ProxyStack, json_log) -> None:
    with _connect(slow_stack) as sock:
        sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: " + KEY.encode() + b"\r\nanthropic-ver")
        raw = _read_all(sock)
    _, body = _error(raw, "anthropic")
    assert "client_header_timeout" in str(body)
    logged = json_log.getvalue()
    assert '"client too slow"' in logged and "/v1/messages" in logged
    assert KEY not in logged


def test_a_head_trickled_one_byte_at_a_time_is_cut_at_the_limit(slow_stack: ProxyStack) -> None:
    """Slowloris proper: each byte resets no timer; the head's own deadline holds."""
    head = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() + b"\r\n"
    with _connect(slow_stack) as sock:
        cut = False
        for i in range(len(head)):
            try:
                sock.sendall(head[i : i + 1])
            except (BrokenPipeError, ConnectionResetError):
                cut = True
                break
            time.sleep(LIMIT / 8)
            sock.setblocking(False)
            try:
                data = sock.recv(65536, socket.MSG_PEEK)
            except BlockingIOError:
                data = None
            finally:
                sock.setblocking(True)
            if data is not None:
                cut = True
                break
        assert cut, "the server waited for the whole trickled head"
        sock.settimeout(GUARD)
        raw = _read_all(sock)
    assert i < len(head) - 1  # cut before the head was complete
    _error(raw, "openai")


def test_a_body_that_stops_gets_a_408(slow_stack: ProxyStack) -> None:
    calls = len(slow_stack.fake.requests)
    with _connect(slow_stack) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: 500\r\n\r\n" + b'{"model": "gpt-4o", '
        )
        raw = _read_all(sock)
    _, body = _error(raw, "openai")
    assert "client_body_timeout" in str(body)
    assert len(slow_stack.fake.requests) == calls  # nothing half-read went upstream


def test_a_silent_connection_is_closed_without_a_response(slow_stack: ProxyStack) -> None:
    with _connect(slow_stack) as sock:
        assert _read_all(sock) == b""


def test_an_idle_keep_alive_connection_is_closed_without_a_response(slow_stack: ProxyStack) -> None:
    with _connect(slow_stack) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        raw = _read_all(sock)
    resp = _parse(raw)
    assert resp.status == 200
    assert raw.count(b"HTTP/1.1 ") == 1  # the health answer, then a silent close


def test_a_slow_client_that_keeps_sending_is_served(make_stack) -> None:
    """Pauses shorter than the limit, for longer than the limit in all: the body
    timeout is between reads, not for the whole body. (A limit of its own, four times
    each pause, so a busy machine delaying this thread does not look like a stall.)"""
    limit = 1.0
    slow_stack = make_stack(server=ServerSettings(port=0, client_body_timeout=limit))
    payload = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 400}]}).encode()
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: " + str(len(payload)).encode() + b"\r\n\r\n"
    )
    pieces = [payload[i : i + 60] for i in range(0, len(payload), 60)]
    assert len(pieces) * limit / 4 > limit * 1.5  # the pauses add up to more than one limit
    with _connect(slow_stack) as sock:
        sock.sendall(head)
        for piece in pieces:
            time.sleep(limit / 4)
            sock.sendall(piece)
        raw = _read_all(sock)
    resp = _parse(raw)
    assert resp.status == 200, raw[:400]
    assert json.loads(slow_stack.fake.requests[-1].body) == json.loads(payload)


def test_other_clients_are_served_while_slow_ones_hold_connections(slow_stack: ProxyStack) -> None:
    holders = [_connect(slow_stack) for _ in range(20)]
    try:
        for sock in holders:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        results: list[bytes] = []
        reader = threading.Thread(target=lambda: results.extend(_read_all(s) for s in holders))
        reader.start()
        with _connect(slow_stack) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert _parse(_read_all(sock)).status == 200
        reader.join(GUARD)
        assert len(results) == len(holders)
        assert all(_parse(raw).status == 408 for raw in results)
    finally:
        for sock in holders:
            sock.close()


@pytest.mark.parametrize("key", ["client_header_timeout", "client_body_timeout", "keepalive_timeout"])
def test_the_timeouts_must_be_positive(key: str) -> None:
    with pytest.raises(Invalid, match=key):
        ServerSettings(**{key: 0})


def test_the_config_file_sets_what_the_server_enforces(tmp_path) -> None:
    from proxy.config import load_config
    from proxy.server.protocol import ClientTimeouts
    from proxy.server.runner import client_timeouts

    path = tmp_path / "config.yaml"
    path.write_text("server:\n  client_header_timeout: 5\n  client_body_timeout: 7.5\n  keepalive_timeout: 30\n")
    assert client_timeouts(load_config(path).server) == ClientTimeouts(header=5, body=7.5, keepalive=30)
    assert client_timeouts(load_config(None).server) == ClientTimeouts(header=60, body=60, keepalive=75)
