"""Structured JSON logs: one line per request and one per gate decision, never a secret."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest

from proxy.demo_story import DEMO_REVISION, run_story
from proxy.server.logs import configure_logging, reset_logging

from .conftest import GateFactory

API_KEY = "sk-log-test-secret-abcdef123456"


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("info", stream)
    yield stream
    reset_logging()


async def test_one_line_per_request_and_per_decision(gate: GateFactory, log_stream: io.StringIO) -> None:
    url = await gate("audit")
    story = await run_story(url + "/v1", api_key=API_KEY)
    text = log_stream.getvalue()
    records = [json.loads(line) for line in text.splitlines()]
    requests = [r for r in records if r["msg"] == "request"]
    decisions = [r for r in records if r["msg"] == "decision"]
    assert len(requests) == len(story.steps)
    by_event = {d["event"]: d for d in decisions}
    assert set(by_event) == {"summarization", "summary_check", "compaction", "tripwire"}
    compaction = by_event["compaction"]
    assert compaction["verdict"] == "destructive" and compaction["transition"] == "summarize"
    assert compaction["action"] == "warn" and compaction["required_missing"] == 1
    assert compaction["required_kinds"] == ["alembic_revision"]
    assert compaction["conversation"] == story.conversation
    assert compaction["request_id"] in {r["request_id"] for r in requests}
    assert API_KEY not in text and DEMO_REVISION not in text
