"""A large request body forwarded upstream, and a large reply relayed to the client, are
written a bounded slice at a time (issue 16: one 10 MB write is three 10 MB copies holding
the GIL) — and the bytes on the wire are the same."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from aiohttp import http_writer

from proxy.server import sliced
from tests.e2e.stack import GateStack
from tests.support.fake_upstream import Call, Reply

BIG = sliced.LARGE * 2 + 12345


def _reply(call: Call) -> Reply:
    return Reply(text="R" * BIG + f" answer to {len(call.messages())} messages")


@pytest.fixture
def stack() -> Any:
    s = GateStack("default", _reply)
    yield s
    s.close()


def test_large_bodies_are_written_in_slices_and_arrive_unchanged(stack: GateStack, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[int] = []
    real = http_writer.StreamWriter.write

    async def write(self: http_writer.StreamWriter, chunk: Any, *args: Any, **kwargs: Any) -> None:
        writes.append(len(chunk))
        await real(self, chunk, *args, **kwargs)

    monkeypatch.setattr(http_writer.StreamWriter, "write", write)
    body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "é" + "x" * BIG}]},
                      separators=(",", ":")).encode()
    req = urllib.request.Request(stack.openai_base_url + "/chat/completions", data=body,
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer sk-test-sliced"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        got = resp.read()
        length = int(resp.headers["Content-Length"])
    assert stack.fake.requests[-1].body == body  # the upstream got every byte, in order
    assert length == len(got)
    assert json.loads(got)["choices"][0]["message"]["content"] == "R" * BIG + " answer to 1 messages"
    # both large bodies went out a slice at a time: upstream's request and the client's reply
    assert writes and max(writes) <= sliced.SLICE
    assert sum(1 for n in writes if n == sliced.SLICE) >= 2 * (BIG // sliced.SLICE)


def test_a_small_body_is_one_write() -> None:
    assert sliced.body_payload(b"{}") == b"{}"
    big = sliced.body_payload(b"x" * sliced.LARGE)
    assert isinstance(big, sliced.SlicedBytesPayload) and big.size == sliced.LARGE
