"""The Responses API WebSocket mode (``client.responses.connect()`` of the official openai
SDK) through compaction-gate: relayed exactly when the gate has nothing to say, and gated
frame by frame like ``POST /v1/responses`` otherwise — history resolved through
``previous_response_id``, re-injection into the frame, refusal as an error event the SDK
reads, the summarization gate on a server-side compaction, the tripwire."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from proxy.core.interventions.contract import CONTRACT_OPEN
from tests.e2e import story
from tests.e2e.stack import GateStack
from tests.support import ProxyStack
from tests.support.fake_upstream import Call, FakeUpstream, Reply, ToolCall

KEY = "sk-test-responses-ws"
TOOL = {"type": "function", "name": "bash", "description": "Run a shell command",
        "parameters": story.BASH_OPENAI["function"]["parameters"]}
COMPACTION = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-opaque-summary"}

pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager:DeprecationWarning")


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


class SocketAgent:
    """An agent on one Responses socket, continuing each response incrementally (only
    the new items plus ``previous_response_id``), as Codex CLI does."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.items: list[dict[str, Any]] = []  # the whole history, as the agent knows it
        self.sent = 0  # how much of it upstream already has (through previous_response_id)
        self.previous: str | None = None

    def create(self, new: list[dict[str, Any]], *, full: bool = False, **extra: Any) -> tuple[list[Any], Any]:
        """Send one response.create; return (its events, the terminal event)."""
        self.items.extend(new)
        frame: dict[str, Any] = {"type": "response.create", "model": "gpt-4o", "instructions": story.SYSTEM,
                                 "tools": [TOOL], "store": False, "prompt_cache_key": "thread-1", **extra}
        if self.previous is None or full:
            frame["input"] = self.items
        else:
            frame["input"] = self.items[self.sent:]
            frame["previous_response_id"] = self.previous
        self.conn.send(frame)
        events: list[Any] = []
        while True:
            ev = self.conn.recv()
            events.append(ev)
            if ev.type in ("response.completed", "response.failed", "response.incomplete", "error"):
                break
        last = events[-1]
        if last.type == "response.completed":
            output = [o.model_dump(exclude_none=True) for o in last.response.output]
            self.items.extend(output)
            self.sent = len(self.items)
            self.previous = last.response.id
        else:
            del self.items[len(self.items) - len(new):]
        return events, last

    def calls(self, last: Any) -> list[Any]:
        return [o for o in last.response.output if o.type == "function_call"]

    def work(self, ask: str) -> None:
        _, last = self.create([_user(ask)])
        for _ in range(10):
            calls = self.calls(last)
            if not calls:
                return
            outs = [{"type": "function_call_output", "call_id": c.call_id,
                     "output": story.run_tool(json.loads(c.arguments)["cmd"])} for c in calls]
            _, last = self.create(outs)

    def compact_remotely(self) -> Any:
        """A server-side compaction: the history plus a trigger item; the answer (one
        encrypted item) replaces the history, which now starts over on the socket."""
        _, last = self.create([{"type": "compaction_trigger"}])
        assert last.type == "response.completed", last
        compacted = [o.model_dump(exclude_none=True) for o in last.response.output]
        self.items = [self.items[0], *compacted]  # the user's first message, then the summary
        self.previous, self.sent = None, 0
        return last


def remote_responder(call: Call) -> Reply:
    """The migration story's model; a server-side compaction answers one encrypted item
    (a real server keeps what it likes in it — a proxy cannot tell)."""
    items = call.json.get("input") or []
    if items and isinstance(items[-1], dict) and items[-1].get("type") == "compaction_trigger":
        return Reply(items=[COMPACTION])
    return story.responder(call)


@pytest.fixture
def ws_gate() -> Iterator[GateStack]:
    s = GateStack("default", remote_responder)
    yield s
    s.close()


def _connect(stack: Any) -> Any:
    client = openai.OpenAI(api_key=KEY, base_url=stack.openai_base_url, max_retries=0)
    return client.responses.connect()


def _after_remote_compaction(conn: Any) -> SocketAgent:
    """An agent that applied the migration and compacted server-side."""
    agent = SocketAgent(conn)
    agent.work(story.TASK)
    agent.compact_remotely()
    return agent


def _frames(fake: FakeUpstream) -> list[Any]:
    return [r for r in fake.requests if r.method == "WS"]


def test_frames_pass_through_byte_for_byte_without_a_gate() -> None:
    stack = ProxyStack(fake=FakeUpstream(story.responder))
    try:
        with _connect(stack) as conn:
            agent = SocketAgent(conn)
            agent.work(story.TASK)
            sent = [json.loads(r.body) for r in _frames(stack.fake)]
        assert len(sent) >= 3
        assert all(f.get("previous_response_id") for f in sent[1:])  # continued incrementally upstream
        assert [len(f["input"]) for f in sent[1:]] == [1] * (len(sent) - 1)
        # what upstream resolved is the whole history the agent holds
        assert _frames(stack.fake)[-1].json["input"][: len(agent.items) - 1] == agent.items[:-1]
    finally:
        stack.close()


def test_each_frame_is_a_request_of_its_conversation(ws_gate: GateStack) -> None:
    with _connect(ws_gate) as conn:
        agent = SocketAgent(conn)
        agent.work(story.TASK)
    _, body = ws_gate.get("/gate/conversations")
    (conv,) = body["conversations"]
    assert conv["requests"] == len(_frames(ws_gate.fake)) and conv["last_relation"] == "extend"
    assert conv["message_count"] == len(agent.items)  # previous_response_id resolved to the whole history


def test_a_warmup_frame_and_an_unknown_previous_response_pass_untouched(ws_gate: GateStack) -> None:
    with _connect(ws_gate) as conn:
        agent = SocketAgent(conn)
        _, last = agent.create([], generate=False)
        assert last.type == "response.completed" and last.response.output == []
        conn.send({"type": "response.create", "model": "gpt-4o", "input": [_user("hi")],
                   "previous_response_id": "resp_from_another_socket"})
        err = conn.recv()
        assert err.type == "error" and err.error.code == "previous_response_not_found"  # upstream's own answer
    _, body = ws_gate.get("/gate/conversations")
    assert body["count"] == 0  # neither carried a history the gate could judge


def test_remote_compaction_is_gated_and_the_next_frame_gets_the_bindings_back(ws_gate: GateStack) -> None:
    with _connect(ws_gate) as conn:
        agent = _after_remote_compaction(conn)
        trigger = _frames(ws_gate.fake)[-1]
        # the contract went upstream in the compaction request, before the trigger item
        assert trigger.json["input"][-1] == {"type": "compaction_trigger"}
        contract = trigger.json["input"][-2]
        assert contract["role"] == "user" and CONTRACT_OPEN in contract["content"][0]["text"]
        assert story.REVISION in contract["content"][0]["text"]
        _, last = agent.create([_user(story.ROLLBACK_ASK)])
    call = agent.calls(last)[0]
    assert story.rollback_target(call.arguments) == story.REVISION  # re-stated in plain text
    sent = json.loads(_frames(ws_gate.fake)[-1].body)
    assert "previous_response_id" not in sent and story.REVISION in json.dumps(sent["input"])
    kinds = [(e["kind"], e["action"]) for e in ws_gate.events()]
    assert ("summarization", "gate") in kinds and ("compaction", "reinject") in kinds
    summ = next(e for e in ws_gate.events() if e["kind"] == "summarization")
    assert summ["opaque"] is True and summ["agent"] == "codex"


def test_strict_refusal_is_an_error_event_and_the_socket_stays_usable() -> None:
    stack = GateStack("strict", remote_responder)
    try:
        with _connect(stack) as conn:
            agent = _after_remote_compaction(conn)
            before = len(_frames(stack.fake))
            _, last = agent.create([_user(story.ROLLBACK_ASK)])
            assert last.type == "error" and last.status == 400
            assert last.error.code == "destructive_compaction" and story.REVISION in last.error.message
            assert last.headers == {"x-should-retry": "false"}
            assert len(_frames(stack.fake)) == before  # never reached the model
            _, again = agent.create([_user(story.ROLLBACK_ASK)])  # the same request resent
            assert again.type == "error" and again.error.code == "destructive_compaction"
            assert len(_frames(stack.fake)) == before
            # the same socket still works: a re-compaction carries the lost binding in
            # its contract, and the request after it proceeds with the binding re-stated
            agent.compact_remotely()
            contract = _frames(stack.fake)[-1].json["input"][-2]["content"][0]["text"]
            assert story.REVISION in contract
            _, last = agent.create([_user(story.ROLLBACK_ASK)])
            assert last.type == "response.completed"
            assert story.rollback_target(agent.calls(last)[0].arguments) == story.REVISION
    finally:
        stack.close()


def inventing_responder(call: Call) -> Reply:
    if "roll back" in call.last_user_text().lower() and "Running downgrade" not in call.all_text():
        return Reply(tool_calls=[ToolCall("bash", {"cmd": f"alembic downgrade {story.INVENTED}"})])
    return remote_responder(call)


def test_tripwire_blocks_on_the_socket_and_upstream_gets_the_history_the_client_has() -> None:
    stack = GateStack("default", inventing_responder)
    try:
        with _connect(stack) as conn:
            agent = _after_remote_compaction(conn)
            _, last = agent.create([_user(story.ROLLBACK_ASK)])
            assert last.type == "response.completed" and agent.calls(last) == []
            text = last.response.output_text
            assert text.startswith("[compaction-gate]") and story.INVENTED in text and story.REVISION in text
            # upstream remembers a function call the client never got: the next frame
            # goes upstream whole, with the history the client holds
            _, last = agent.create([_user("What now?")])
            assert last.type == "response.completed"
        sent = json.loads(_frames(stack.fake)[-1].body)
        assert "previous_response_id" not in sent
        assert story.INVENTED not in json.dumps([i for i in sent["input"] if i.get("type") == "function_call"])
        assert any(e["kind"] == "tripwire" and e["tripwire"] == "block" for e in stack.events())
    finally:
        stack.close()


class Broken:
    async def before(self, ex: Any) -> Any:
        raise RuntimeError("gate bug")


@pytest.mark.parametrize("fail_open", [True, False])
def test_a_failing_gate_forwards_the_frame_or_refuses_it_per_fail_open(fail_open: bool) -> None:
    from proxy.config import GateSettings

    stack = ProxyStack(fake=FakeUpstream(story.responder), interceptor=Broken(),
                       gate=GateSettings(fail_open=fail_open))
    try:
        with _connect(stack) as conn:
            agent = SocketAgent(conn)
            _, last = agent.create([_user("hello")])
        if fail_open:
            assert last.type == "response.completed" and len(_frames(stack.fake)) == 1
        else:
            assert last.type == "error" and last.status == 502 and last.error.code == "gate_error"
            assert _frames(stack.fake) == []
    finally:
        stack.close()


def test_the_socket_is_not_offered_the_recall_tool_and_gets_the_spill_note(tmp_path: Any) -> None:
    """The Responses WebSocket relays one upstream response per frame (it does not run a
    decision's rounds): a spilled compaction gets the spill note, never the recall tool
    whose calls nobody would resolve."""
    policy = tmp_path / "spill.yaml"
    policy.write_text("extends: default\nname: spill\nactions:\n  destructive: spill\n")
    stack = GateStack(str(policy), remote_responder)
    try:
        with _connect(stack) as conn:
            agent = _after_remote_compaction(conn)
            _, last = agent.create([_user(story.ROLLBACK_ASK)])
        sent = json.loads(_frames(stack.fake)[-1].body)
        assert [t["name"] for t in sent["tools"]] == ["bash"]
        assert "/gate/spill/spill_" in json.dumps(sent["input"])
        assert story.rollback_target(agent.calls(last)[0].arguments) == story.REVISION  # listed in the note
        fb = [e for e in stack.events() if e["kind"] == "recall_fallback"]
        assert fb and fb[-1]["reason"] == "transport"
    finally:
        stack.close()
