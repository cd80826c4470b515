"""replay's pieces without the gate: input parsing, the loop, event normalisation, reports."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from proxy.replay import (
    Progress,
    ReplayInputError,
    ReplayRecord,
    exchange_for,
    iter_records,
    normalise_events,
    parse_line,
    render_html,
    render_table,
    replay_records,
    write_reports,
)
from proxy.server.hooks import Decision, Exchange

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
ANTHROPIC = {"model": "claude-sonnet-4-5", "max_tokens": 10, "system": "s",
             "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}


def test_bare_and_wrapped_lines() -> None:
    bare = parse_line(json.dumps(CHAT), 1)
    assert bare is not None and bare.path == "/v1/chat/completions" and bare.headers == {}
    wrapped = parse_line(json.dumps({"conversation_id": "c-1", "request": ANTHROPIC,
                                     "response": {"id": "msg_1"},
                                     "headers": {"Authorization": "Bearer sk-secret", "x-session-id": "s"}}), 2)
    assert wrapped is not None
    assert wrapped.path == "/v1/messages"
    assert wrapped.headers == {"x-conversation-id": "c-1", "x-session-id": "s"}
    assert wrapped.response == {"id": "msg_1"}
    responses = parse_line(json.dumps({"request": {"model": "o4", "input": "hi"}}), 3)
    assert responses is not None and responses.path == "/v1/responses"
    assert parse_line("   ", 4) is None and parse_line("# comment", 5) is None


@pytest.mark.parametrize("text", ["{not json", "[1,2]", json.dumps({"model": "x"})])
def test_bad_lines_name_their_line(text: str) -> None:
    with pytest.raises(ReplayInputError, match="line 7"):
        parse_line(text, 7)


def test_iter_records_keeps_going_after_a_bad_line(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps(CHAT) + "\n{oops\n\n" + json.dumps(CHAT) + "\n")
    items = list(iter_records(f))
    assert [type(i).__name__ for i in items] == ["ReplayRecord", "ReplayInputError", "ReplayRecord"]
    assert isinstance(items[2], ReplayRecord) and items[2].line == 4


def test_exchange_matches_what_the_server_builds() -> None:
    record = parse_line(json.dumps({"conversation_id": "c-1", "request": {**ANTHROPIC, "stream": True}}), 1)
    assert record is not None
    ex = exchange_for(record, "abcd")
    assert (ex.dialect, ex.kind, ex.stream, ex.model, ex.tenant) == ("anthropic", "messages", True,
                                                                       "claude-sonnet-4-5", "abcd")
    assert json.loads(ex.body) == ex.json
    assert ex.headers["x-conversation-id"] == "c-1"
    assert "authorization" not in ex.headers


class _Tap:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def feed_json(self, status: int, body: bytes) -> bytes:
        self.log.append(f"json {status} {json.loads(body)['id']}")
        return body

    def feed_event(self, raw: bytes) -> list[bytes]:
        self.log.append("event " + raw.decode().strip().replace("\n", "|"))
        return [raw]

    def finish(self) -> list[bytes]:
        self.log.append("finish")
        return []

    def closed(self, reason: str) -> None:
        self.log.append(f"closed {reason}")


class _Engine:
    """Flags a request whose last message says DROP as a destructive compaction."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self._events: dict[str, list[dict[str, Any]]] = {}

    @property
    def interceptor(self) -> _Engine:
        return self

    async def before(self, ex: Exchange) -> Decision:
        cid = ex.headers.get("x-conversation-id", "auto")
        text = ex.json["messages"][-1]["content"]
        if text == "DROP":
            self._events.setdefault(cid, []).append(
                {"seq": 1, "at": 123.4, "kind": "compaction", "action": "warn", "request_seq": 2,
                 "message": f"conversation {cid} lost a binding",
                 "details": {"verdict": "destructive", "transition": "summarize",
                             "dropped": [{"value": "4b1e9c2d7a30", "kind": "migration_revision"}]}})
            return Decision(action="warn", conversation_id=cid, tap=_Tap(self.log))
        if text == "BOOM":
            raise RuntimeError("analysis failed")
        return Decision(conversation_id=cid, tap=_Tap(self.log))

    def events(self, conversation_id: str) -> list[dict[str, Any]]:
        return self._events.get(conversation_id, [])

    def conversation_ids(self) -> list[str]:
        return list(self._events)

    async def close(self) -> None:
        pass


def _rec(line: int, text: str, cid: str, response: Any = None) -> ReplayRecord:
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return ReplayRecord(line=line, path="/v1/chat/completions",
                        headers={"x-conversation-id": cid}, request=body, response=response)


async def test_replay_loop_feeds_taps_and_attributes_events_to_lines() -> None:
    engine = _Engine()
    records = [
        _rec(1, "hello", "a", {"id": "r1"}),
        _rec(2, "hi", "b", [{"id": "x", "choices": []}, "data: [DONE]"]),
        ReplayInputError("line 3: not valid JSON"),
        _rec(4, "DROP", "a"),
        _rec(5, "BOOM", "b"),
    ]
    stream = io.StringIO()
    result = await replay_records(records, engine, source="t.jsonl", policy="audit",
                                  progress=Progress(len(records), stream=stream, enabled=True))
    assert engine.log == ['json 200 r1', 'event data: {"id": "x", "choices": []}', "event data: [DONE]",
                          "finish", "closed upstream_error"]
    assert result.requests == 4 and result.gate_errors == 1 and result.bad_lines == ["line 3: not valid JSON"]
    assert [f.line for f in result.destructive] == [4]
    assert result.dropped_kinds == {"migration_revision": 1}
    assert result.actions == {"none": 3, "warn": 1}
    assert "5/5" in stream.getvalue() and stream.getvalue().endswith("\n")
    table = render_table(result)
    assert "destructive compactions" in table and "line 4: summarize lost 4b1e9c2d7a30 -> warn" in table


def test_normalise_events_drops_volatile_fields_and_renames_conversations() -> None:
    a = {"conv-xyz": [{"seq": 1, "at": 1.0, "kind": "k", "message": "in conv-xyz", "details": {"handle": "h1"}}]}
    b = {"conv-abc": [{"seq": 1, "at": 9.0, "kind": "k", "message": "in conv-abc", "details": {"handle": "h2"}}]}
    assert normalise_events(a) == normalise_events(b)
    assert normalise_events(a)[0]["message"] == "in c1"


def test_reports_escape_everything(tmp_path: Path) -> None:
    engine_result = {"seq": 1, "kind": "compaction", "details": {
        "verdict": "destructive", "dropped": [{"value": "<script>alert(1)</script>", "kind": "path"}]}}
    from proxy.replay import DestructiveFinding, ReplayResult

    result = ReplayResult(source="x", policy="audit", requests=1)
    result.destructive.append(DestructiveFinding(1, "<b>c</b>", "warn", engine_result))
    page = render_html(result)
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;b&gt;c&lt;/b&gt;" in page
    json_path, html_path = write_reports(result, tmp_path / "out")
    data = json.loads(json_path.read_text())
    assert data["destructive_compactions"][0]["dropped"][0]["value"] == "<script>alert(1)</script>"
    assert html_path.read_text() == page


def test_skipped_lines_make_the_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's contract: 2 on bad input — a file whose unparsable lines were skipped
    is bad input even when the readable ones are safe."""
    from proxy.cli import main

    good = json.dumps({"conversation_id": "c1", "request": CHAT})
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text(good + "\n{not json\n")
    assert main(["replay", str(traffic), "--policy", "audit", "--out", str(tmp_path / "r")]) == 2
    assert "skipped line 2: not valid JSON" in capsys.readouterr().err
    traffic.write_text(good + "\n")
    assert main(["replay", str(traffic), "--policy", "audit", "--out", str(tmp_path / "r")]) == 0
