"""A stateful fuzz of the served gate (tracking + a policy): whole conversations in the
three dialects, each request a transition real clients make (append, compaction to a
summary, truncation, edit, regeneration, summarization request) or a hostile shape, and
hostile frames on the Responses WebSocket. Whatever arrives, the gate's analysis never
fails (no ``gate_error``, nothing logged at ERROR), its own answers are JSON errors in the
caller's dialect and never 5xx, a request it lets through reaches upstream byte for
byte, and the secrets in the traffic are in none of its events or listings."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.stack import GateStack
from tests.server.test_responses_websocket import remote_responder
from tests.support import conversation_fuzz as cf
from tests.support.fake_upstream import echo_responder

FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                HealthCheck.function_scoped_fixture])
SECRET = re.compile(r"sk-live-[a-z0-9]{32}|ghp_[A-Za-z0-9]{36}")


class Errors(logging.Handler):
    """ERROR records of the proxy (the fake upstream's own are not the proxy's)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "tests/support" not in record.pathname.replace("\\", "/"):
            self.records.append(record)


@pytest.fixture(scope="module")
def errors() -> Iterator[Errors]:
    handler = Errors()
    logging.getLogger().addHandler(handler)
    try:
        yield handler
    finally:
        logging.getLogger().removeHandler(handler)


@pytest.fixture(scope="module", params=["default", "strict"])
def gate(request: pytest.FixtureRequest, errors: Errors) -> Iterator[GateStack]:
    stack = GateStack(request.param, echo_responder)
    try:
        yield stack
    finally:
        stack.close()


def _post(url: str, data: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **headers}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()


def _headers(dialect: str, session: str | None) -> dict[str, str]:
    if dialect == "anthropic":
        h = {"x-api-key": "sk-ant-fuzz-" + "a" * 30, "anthropic-version": "2023-06-01"}
        if session:
            h["x-claude-code-session-id"] = session
        return h
    h = {"Authorization": "Bearer sk-fuzz-" + "b" * 30}
    if session:
        h["session_id"] = session
    return h


def _check_own_error(status: int, headers: dict[str, str], data: bytes, dialect: str) -> None:
    if status < 400 or "x-fake-upstream" in headers:
        return  # not the proxy's own answer
    assert status < 500, (status, data[:300])
    body: Any = json.loads(data)
    if dialect == "anthropic":
        assert body.get("type") == "error" and {"type", "message"} <= set(body["error"]), body
    else:
        assert isinstance(body.get("error"), dict) and "message" in body["error"], body


@FUZZ
@given(seed=st.integers(0, 2**32 - 1), dialect=st.sampled_from(["chat", "anthropic", "responses"]),
       steps=st.lists(st.tuples(st.integers(0, cf.STEPS - 1), st.booleans()), min_size=1, max_size=5),
       session=st.booleans())
def test_any_sequence_of_transitions_is_analysed_without_failure(
    gate: GateStack, errors: Errors, seed: int, dialect: str, steps: list[tuple[int, bool]], session: bool
) -> None:
    r = random.Random(seed)
    msgs = cf.conversation(r, r.randrange(1, 6))
    headers = _headers(dialect, f"sess-{seed}" if session else None)
    before = len(errors.records)
    for kind, stream in [(0, False), *steps]:
        path, body = cf.request(dialect, msgs, stream)
        data = json.dumps(body).encode()
        status, resp_headers, answer = _post(gate.url + path, data, headers)
        _check_own_error(status, resp_headers, answer, dialect)
        action = resp_headers.get("x-compaction-gate-action")
        if status < 400:
            assert action is not None, resp_headers
        if action == "none":
            assert gate.fake.requests[-1].body == data  # let through: byte for byte
        if status == 200 and not stream and dialect == "chat":
            msgs = msgs + [json.loads(answer)["choices"][0]["message"]]
        msgs = cf.mutate(r, msgs, kind)
    failures = [rec.getMessage() for rec in errors.records[before:]]
    assert not failures, failures
    events = gate.events()
    assert not [e for e in events if e["kind"] == "gate_error"], events[-3:]
    _, listing = gate.get("/gate/conversations")
    details = [gate.get(f"/gate/conversations/{c['id']}")[1] for c in listing["conversations"][:5]]
    with urllib.request.urlopen(gate.url + "/metrics", timeout=10) as resp:
        metrics = resp.read().decode()
    shown = json.dumps(events) + json.dumps(listing) + json.dumps(details) + metrics
    assert not SECRET.findall(shown)  # the traffic's keys (of every example so far) in clear nowhere


def _frame(r: random.Random, previous: list[str]) -> str | bytes:
    k = r.randrange(8)
    if k == 0:
        return "not json" * r.randrange(3)
    if k == 1:
        return bytes(r.getrandbits(8) for _ in range(r.randrange(50)))
    if k == 2:
        return json.dumps(cf.weird(r))
    items = r.choice([cf.weird(r), [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": f"revision {r.getrandbits(160):040x}"}]}]])
    frame: dict[str, Any] = {"type": r.choice(["response.create", "response.create", "response.cancel", None]),
                             "model": r.choice(["gpt-4o", None, 5]), "input": items}
    if previous and r.random() < 0.5:
        frame["previous_response_id"] = r.choice(previous)
    if r.random() < 0.3:
        frame["previous_response_id"] = cf.weird(r)
    if r.random() < 0.3:
        frame["instructions"] = cf.weird(r)
    return json.dumps(frame)


async def _socket_session(url: str, seed: int, frames: int) -> tuple[list[Any], bool]:
    """Hostile frames on one socket, then a valid one on a fresh socket; returns the
    events received and whether the valid frame completed."""
    r = random.Random(seed)
    previous: list[str] = []
    events: list[Any] = []
    auth = {"Authorization": "Bearer sk-ws-fuzz-" + "e" * 30}
    async with aiohttp.ClientSession() as s:
        async with s.ws_connect(url + "/v1/responses", headers=auth) as ws:
            for _ in range(frames):
                frame = _frame(r, previous)
                await (ws.send_str(frame) if isinstance(frame, str) else ws.send_bytes(frame))
                while not ws.closed:
                    try:
                        msg = await asyncio.wait_for(ws.receive(), 1.0)
                    except asyncio.TimeoutError:
                        break  # nothing to answer (a frame upstream ignores)
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        break
                    ev = json.loads(msg.data)  # every event is JSON
                    events.append(ev)
                    if ev.get("type") == "response.completed":
                        previous.append(ev["response"]["id"])
                    if ev.get("type") in ("response.completed", "response.failed", "error"):
                        break
                if ws.closed:
                    break
        async with s.ws_connect(url + "/v1/responses", headers=auth) as ws:
            await ws.send_str(json.dumps({"type": "response.create", "model": "gpt-4o", "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}))
            for _ in range(50):
                ev = json.loads((await asyncio.wait_for(ws.receive(), 5)).data)
                if ev.get("type") == "response.completed":
                    return events, True
    return events, False


@pytest.fixture(scope="module")
def ws_gate(errors: Errors) -> Iterator[GateStack]:
    stack = GateStack("default", remote_responder)
    try:
        yield stack
    finally:
        stack.close()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), frames=st.integers(1, 5))
def test_hostile_frames_on_the_responses_socket(ws_gate: GateStack, errors: Errors, seed: int, frames: int) -> None:
    before = len(errors.records)
    events, valid_ok = asyncio.run(_socket_session(ws_gate.url, seed, frames))
    assert valid_ok  # the gate still serves a valid frame afterwards
    for ev in events:
        assert isinstance(ev, dict) and isinstance(ev.get("type"), str), ev
    failures = [rec.getMessage() for rec in errors.records[before:]]
    assert not failures, failures
    assert not [e for e in ws_gate.events() if e["kind"] == "gate_error"]
    assert ws_gate.get("/healthz")[0] == 200
