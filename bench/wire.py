"""A lean load harness on raw HTTP/1.1: a fake upstream and client connections that
cost a small fraction of what the servers under test do per request.

On a machine with few cores the harness shares them with the servers it measures:
every CPU-millisecond the client and the fake upstream spend per request is one the
servers do not get, and it caps what extra workers can show. ``bench.load``'s harness
(aiohttp client, :class:`tests.support.fake_upstream.FakeUpstream`, which parses and
token-counts every request) costs about as much CPU per request as the gate itself.
This one does only what the wire needs:

- :func:`serve_upstream`: answers every ``POST`` with one OpenAI ``chat.completion``
  (the real wire format; its usage numbers are the body size over four) without parsing
  the request body; keep-alive.
- :class:`Connection`: one keep-alive connection, as one agent holds it: sends a
  prepared request, reads the status, headers and body (``content-length`` or chunked).

Run the upstream alone:  python -m bench.wire [--port N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

REPLY_TEXT = "ok, continuing."


def _reply(n: int, prompt_tokens: int) -> bytes:
    body = json.dumps(
        {
            "id": f"chatcmpl-lean{n}",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": REPLY_TEXT, "refusal": None, "annotations": []},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 4, "total_tokens": prompt_tokens + 4},
            "service_tier": "default",
            "system_fingerprint": "fp_lean",
        },
        separators=(",", ":"),
    ).encode()
    head = (
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nx-request-id: req-lean{n}\r\n\r\n"
    )
    return head.encode() + body


class _Upstream(asyncio.Protocol):
    served = 0

    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in bytes(self.buf[:end]).split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            del self.buf[: end + 4 + length]
            _Upstream.served += 1
            assert self.transport is not None
            self.transport.write(_reply(_Upstream.served, max(1, length // 4)))


async def serve_upstream(host: str = "127.0.0.1", port: int = 0) -> tuple[asyncio.Server, str]:
    """Start the lean upstream; returns the server and its base URL."""
    server = await asyncio.get_running_loop().create_server(_Upstream, host, port)
    bound = server.sockets[0].getsockname()[1]
    return server, f"http://{host}:{bound}"


class Connection:
    """One keep-alive HTTP/1.1 connection to ``host:port`` (opened on first use)."""

    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self.host, self.port = host, port
        self.head = "".join(f"{k}: {v}\r\n" for k, v in {"host": f"{host}:{port}", **headers}.items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """``(status, body)`` of one request (a connection the server closed is opened
        again once)."""
        for attempt in (1, 2):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            assert self.reader is not None
            self.writer.write(f"POST {path} HTTP/1.1\r\n{self.head}content-length: {len(body)}\r\n\r\n".encode() + body)
            try:
                return await self._response(self.reader)
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _response(self, reader: asyncio.StreamReader) -> tuple[int, bytes]:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length: int | None = None
        chunked = close = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and b"close" in value.lower():
                close = True
        if chunked:
            parts = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    break
                parts.append(await reader.readexactly(size + 2))
            body = b"".join(p[:-2] for p in parts)
        elif length is not None:
            body = await reader.readexactly(length)
        else:
            body = await reader.read()
            close = True
        if close:
            self.close()
        return status, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)

    async def run() -> None:
        server, url = await serve_upstream(port=args.port)
        print(url, flush=True)
        await server.serve_forever()

    asyncio.run(run())
    return 0


def upstream_process(q: Any) -> None:
    """Serve the lean upstream in this process; put its URL on ``q``."""

    async def run() -> None:
        server, url = await serve_upstream()
        q.put(url)
        await server.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    raise SystemExit(main())
