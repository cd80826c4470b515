"""Raw HTTP/1.1 over a socket: for requests no HTTP client will send (malformed header
lines, bare CRs, NULs, lying Content-Lengths, Expect: 100-continue timing)."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes
    #: everything received, interim responses (``100 Continue``) included
    raw: bytes = field(repr=False, default=b"")

    def json(self) -> Any:
        return json.loads(self.body)


def _parse(data: bytes) -> RawResponse:
    rest = data
    while True:
        head, sep, body = rest.partition(b"\r\n\r\n")
        if not sep:
            raise AssertionError(f"no complete response head in {data[:200]!r}")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        if 100 <= status < 200:
            rest = body
            continue
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            body = body[: int(headers["content-length"])]
        return RawResponse(status, headers, body, data)


def send_raw(url: str, data: bytes, *, timeout: float = 10.0, then: bytes | None = None) -> RawResponse:
    """Send ``data`` to the server at ``url`` and read until it closes the connection
    (or a complete response with Content-Length arrived). ``then`` is sent after the
    first bytes of a response arrive (the body after a ``100 Continue``)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=timeout) as sock:
        sock.sendall(data)
        received = b""
        sent_then = then is None
        while True:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            received += chunk
            if not sent_then and b"\r\n\r\n" in received:
                sock.sendall(then or b"")
                sent_then = True
                continue
            try:
                resp = _parse(received)
            except (AssertionError, ValueError, IndexError):
                continue
            if "content-length" in resp.headers and len(resp.body) >= int(resp.headers["content-length"]):
                return resp
    return _parse(received)


def request_bytes(
    method: str, path: str, headers: dict[str, str] | list[tuple[str, str]] | None = None, body: bytes = b""
) -> bytes:
    """A well-formed request (``Host`` and ``Content-Length`` added), as bytes."""
    items = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    lines = [f"{method} {path} HTTP/1.1", "Host: proxy", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in items]
    if body and not any(k.lower() in ("content-length", "transfer-encoding") for k, _ in items):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
