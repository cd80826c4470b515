"""After scripted compactions through the real gate, /metrics shows the expected counters."""

from __future__ import annotations

import json

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from proxy.demo_story import DEMO_REVISION, run_story

from .conftest import GateFactory

API_KEY = "sk-metrics-test-0123456789"


async def _metrics(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        return await resp.text()


def _lines(text: str) -> set[str]:
    return {line for line in text.splitlines() if line and not line.startswith("#")}


def _no_private_material(text: str, conversation: str) -> None:
    assert conversation and conversation not in text
    assert API_KEY not in text and DEMO_REVISION not in text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert set(sample.labels) <= {"route", "status", "kind", "action", "le"}, sample


async def test_destructive_summarize_under_audit(gate: GateFactory) -> None:
    url = await gate("audit")
    story = await run_story(url + "/v1", api_key=API_KEY)
    assert not story.rollback_correct
    text = await _metrics(url)
    lines = _lines(text)
    for expected in (
        'compaction_gate_requests_total{route="/v1/chat/completions",status="200"} 12.0',
        'compaction_gate_added_latency_seconds_count{route="/v1/chat/completions"} 12.0',
        "compaction_gate_conversations_tracked 1.0",
        'compaction_gate_compactions_total{kind="summarize"} 1.0',
        "compaction_gate_destructive_compactions_total 1.0",
        'compaction_gate_bindings_dropped_total{kind="alembic_revision"} 1.0',
        'compaction_gate_actions_total{action="warn"} 2.0',
        "compaction_gate_tripwire_hits_total 1.0",
        "compaction_gate_summarization_calls_gated_total 0.0",
        "compaction_gate_analysis_errors_total 0.0",
    ):
        assert expected in lines, expected
    assert not any(line.startswith("compaction_gate_request_errors_total{") for line in lines)
    assert not any(line.startswith("compaction_gate_bindings_reinjected_total{") for line in lines)
    _no_private_material(text, story.conversation)


async def test_destructive_truncation_under_default_is_reinjected(gate: GateFactory) -> None:
    url = await gate("default")
    story = await run_story(url + "/v1", api_key=API_KEY, compaction="truncate")
    assert story.rollback_correct and story.action_of("next action") == "reinject"
    text = await _metrics(url)
    lines = _lines(text)
    for expected in (
        'compaction_gate_requests_total{route="/v1/chat/completions",status="200"} 11.0',
        'compaction_gate_compactions_total{kind="truncate"} 1.0',
        "compaction_gate_destructive_compactions_total 1.0",
        'compaction_gate_bindings_dropped_total{kind="alembic_revision"} 1.0',
        'compaction_gate_bindings_reinjected_total{kind="alembic_revision"} 1.0',
        'compaction_gate_actions_total{action="reinject"} 1.0',
        "compaction_gate_tripwire_hits_total 0.0",
    ):
        assert expected in lines, expected
    _no_private_material(text, story.conversation)


async def test_gated_summarization_and_streamed_bytes_under_default(gate: GateFactory) -> None:
    url = await gate("default")
    story = await run_story(url + "/v1", api_key=API_KEY)
    assert story.rollback_correct and story.summary_kept_revision
    body = {"model": "gpt-4o-mini", "stream": True,
            "messages": [{"role": "user", "content": "Say hello, a fresh conversation."}]}
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", json=body,
                                headers={"Authorization": f"Bearer {API_KEY}"}) as resp:
            streamed = await resp.read()
        async with session.post(url + "/v1/chat/completions", data=b"{not json",
                                headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 400
    assert streamed.endswith(b"data: [DONE]\n\n")
    text = await _metrics(url)
    lines = _lines(text)
    for expected in (
        "compaction_gate_summarization_calls_gated_total 1.0",
        'compaction_gate_actions_total{action="gate"} 1.0',
        'compaction_gate_compactions_total{kind="summarize"} 1.0',
        "compaction_gate_destructive_compactions_total 0.0",
        "compaction_gate_conversations_tracked 2.0",
        f'compaction_gate_streamed_bytes_total{{route="/v1/chat/completions"}} {float(len(streamed))}',
        'compaction_gate_requests_total{route="/v1/chat/completions",status="400"} 1.0',
        'compaction_gate_request_errors_total{route="/v1/chat/completions",status="400"} 1.0',
    ):
        assert expected in lines, expected
    _no_private_material(text, story.conversation)


async def test_metrics_and_dashboard_need_the_admin_key_when_configured(gate: GateFactory) -> None:
    url = await gate("default", admin_key="operator-key-for-tests")
    async with aiohttp.ClientSession() as session:
        for path in ("/metrics", "/gate/", "/gate/conversations", "/gate/events"):
            async with session.get(url + path) as resp:
                assert resp.status == 401, path
                assert "operator-key-for-tests" not in await resp.text()
            async with session.get(url + path, headers={"x-gate-admin-key": "operator-key-for-tests"}) as resp:
                assert resp.status == 200, path
        async with session.get(url + "/healthz") as resp:
            assert resp.status == 200
        body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
        async with session.post(url + "/v1/chat/completions", data=body,
                                headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 200  # proxied traffic never needs the admin key
