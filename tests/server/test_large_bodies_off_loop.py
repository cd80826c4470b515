"""Large bodies are decoded in a worker process, not on the event loop (issue 16), and
nothing a client or the gate sees changes: the bytes forwarded and relayed (written a
bounded slice at a time, ``proxy.server.sliced``), the history tracked, every message's digest (made in the worker and found again by the
gate) equal to the digest made from scratch; a broken large body is the same 400."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest
from aiohttp import http_writer

from proxy.core import messages as messages_mod
from proxy.core.messages import make_message
from proxy.server import bodyparse, sliced
from proxy.server.forward import BODY_CACHE
from proxy.state import offload
from tests.e2e.stack import GateStack
from tests.support.fake_upstream import Call, Reply

#: past every threshold of the worker (request body, reply, long-text digest)
BIG = (bodyparse.OFFLOAD_BYTES * 3) // 2


def _reply(call: Call) -> Reply:
    return Reply(text="R" * BIG + f" answer to {len(call.messages())} messages")


@pytest.fixture
def stack() -> Any:
    s = GateStack("default", _reply)
    yield s
    s.close()


def _fresh_digest(m: Any) -> str:
    """The digest computed again from scratch (the worker's digests forgotten)."""
    saved = dict(messages_mod._AHEAD)
    messages_mod._AHEAD.clear()
    try:
        return make_message(m.role, m.parts, m.name).digest
    finally:
        messages_mod._AHEAD.update(saved)


@pytest.mark.skipif(not offload.can_offload(), reason="no worker process can be spawned from this interpreter")
def test_a_large_request_and_reply_go_through_the_worker_and_are_tracked_the_same(stack: GateStack) -> None:
    client = openai.OpenAI(api_key="sk-test-large", base_url=stack.openai_base_url, max_retries=0)
    before = BODY_CACHE.stats.walks, BODY_CACHE.stats.hits
    big = "é" + "x" * BIG + " ghp_" + "a1B2" * 9  # not ASCII: byte and character offsets differ
    msgs: list[dict[str, Any]] = [{"role": "user", "content": big}]
    first = client.chat.completions.create(model="gpt-4o", messages=msgs)  # type: ignore[arg-type]
    answer = first.choices[0].message.content
    assert answer == "R" * BIG + " answer to 1 messages"
    msgs += [{"role": "assistant", "content": answer}, {"role": "user", "content": "y" * BIG}]
    second = client.chat.completions.create(model="gpt-4o", messages=msgs)  # type: ignore[arg-type]
    assert second.choices[0].message.content == "R" * BIG + " answer to 3 messages"

    assert offload._REQUEST._pool is not None  # the worker decoded them
    assert len(messages_mod._AHEAD) >= 2  # and digested the two long user messages
    assert BODY_CACHE.stats.walks == before[0] + 1 and BODY_CACHE.stats.hits == before[1] + 1
    # the upstream got what the client sent
    assert [m["content"] for m in json.loads(stack.fake.requests[-1].body)["messages"]] == [m["content"] for m in msgs]

    async def history() -> Any:
        [rec] = stack.gate.tracker.conversations()
        return await stack.gate.tracker.history(rec.id)

    snap = stack.bg.run(history())
    texts = [m.text for m in snap.messages]
    assert texts[:3] == [big, answer, "y" * BIG] and texts[3] == "R" * BIG + " answer to 3 messages"
    for m in snap.messages:
        assert m.digest == _fresh_digest(m)


def test_a_broken_large_body_is_the_same_400_as_a_small_one(stack: GateStack) -> None:
    good = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * BIG}]}).encode()
    for broken in (good[:-3] + b"x}", good[: len(good) // 2], b'{"model": "gpt-4o", "messages": [' + b"1," * BIG + b"]}"):
        with pytest.raises(json.JSONDecodeError) as ref:
            json.loads(broken)
        req = urllib.request.Request(stack.openai_base_url + "/chat/completions", data=broken, method="POST",
                                     headers={"content-type": "application/json", "authorization": "Bearer sk-test-broken"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=60)
        assert err.value.code == 400
        body = json.loads(err.value.read())["error"]
        assert body["code"] == "invalid_json" and ref.value.msg in body["message"], body


def test_large_bodies_are_written_in_slices_and_arrive_unchanged(stack: GateStack, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[int] = []
    real = http_writer.StreamWriter.write

    async def write(self: http_writer.StreamWriter, chunk: Any, *args: Any, **kwargs: Any) -> None:
        writes.append(len(chunk))
        await real(self, chunk, *args, **kwargs)

    monkeypatch.setattr(http_writer.StreamWriter, "write", write)
    assert BIG >= sliced.LARGE  # both bodies are large
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
