"""The metrics API: families, label hygiene, exposition, and isolation between apps."""

from __future__ import annotations

import re

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from proxy.metrics import MAX_LABEL_VALUES, METRICS_KEY, Metrics, metrics_handler, normalise_route


def samples(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(m.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_every_family_is_exposed_with_help_and_type() -> None:
    text = Metrics().render().decode()
    for name in (
        "compaction_gate_requests_total",
        "compaction_gate_request_errors_total",
        "compaction_gate_added_latency_seconds",
        "compaction_gate_streamed_bytes_total",
        "compaction_gate_conversations_tracked",
        "compaction_gate_compactions_total",
        "compaction_gate_destructive_compactions_total",
        "compaction_gate_actions_total",
        "compaction_gate_bindings_dropped_total",
        "compaction_gate_bindings_reinjected_total",
        "compaction_gate_summarization_calls_gated_total",
        "compaction_gate_tripwire_hits_total",
        "compaction_gate_analysis_errors_total",
    ):
        assert f"# HELP {name} " in text, name
        assert f"# TYPE {name} " in text or f"# TYPE {name.removesuffix('_total')} " in text, name


def test_typed_api_records_what_it_is_told() -> None:
    m = Metrics()
    m.observe_request("/v1/chat/completions", 200, 0.003)
    m.observe_request("/v1/chat/completions", 200, 0.002)  # the second time from the resolved series
    m.observe_request("/v1/chat/completions", 400, 0.001)
    m.observe_request("/v1/messages", 502, None)
    m.observe_request("/v1/messages", 502, None)
    m.streamed_bytes(1234, "/v1/messages")
    m.streamed_bytes(0, "/v1/messages")
    m.set_conversations_tracked(7)
    m.observe_transition("summarize", destructive=True, dropped_kinds=["alembic_revision"])
    m.observe_transition("append", destructive=False)
    m.action("reinject")
    m.binding_reinjected("alembic_revision")
    m.summarization_gated()
    m.tripwire_hit()
    s = samples(m)
    assert s[("compaction_gate_requests_total", (("route", "/v1/chat/completions"), ("status", "200")))] == 2
    assert s[("compaction_gate_request_errors_total", (("route", "/v1/chat/completions"), ("status", "400")))] == 1
    assert s[("compaction_gate_request_errors_total", (("route", "/v1/messages"), ("status", "502")))] == 2
    assert ("compaction_gate_request_errors_total", (("route", "/v1/chat/completions"), ("status", "200"))) not in s
    assert s[("compaction_gate_added_latency_seconds_count", (("route", "/v1/chat/completions"),))] == 3
    assert s[("compaction_gate_streamed_bytes_total", (("route", "/v1/messages"),))] == 1234
    assert s[("compaction_gate_conversations_tracked", ())] == 7
    assert s[("compaction_gate_compactions_total", (("kind", "summarize"),))] == 1
    assert ("compaction_gate_compactions_total", (("kind", "append"),)) not in s
    assert s[("compaction_gate_destructive_compactions_total", ())] == 1
    assert s[("compaction_gate_bindings_dropped_total", (("kind", "alembic_revision"),))] == 1
    assert s[("compaction_gate_bindings_reinjected_total", (("kind", "alembic_revision"),))] == 1
    assert s[("compaction_gate_actions_total", (("action", "reinject"),))] == 1
    assert s[("compaction_gate_summarization_calls_gated_total", ())] == 1
    assert s[("compaction_gate_tripwire_hits_total", ())] == 1


def test_conversation_gauge_can_follow_a_callback() -> None:
    m = Metrics()
    live = {"n": 3}
    m.track_conversations(lambda: live["n"])
    assert samples(m)[("compaction_gate_conversations_tracked", ())] == 3
    live["n"] = 5
    assert samples(m)[("compaction_gate_conversations_tracked", ())] == 5


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("/v1/chat/completions", "/v1/chat/completions"),
        ("/v1/chat/completions/", "/v1/chat/completions"),
        ("/v1/messages?beta=true", "/v1/messages"),
        ("/v1/files/file-abc123", "/v1/other"),
        ("/v1/models/gpt-4o", "/v1/other"),
        ("/gate/conversations/conv_9f8e7d", "/gate"),
        ("/gate/spill/4f9a0c1b2d3e4f5a6b7c8d9e", "/gate"),
        ("/metrics", "/metrics"),
        ("/etc/passwd", "other"),
    ],
)
def test_routes_are_bounded_and_never_raw_paths(path: str, label: str) -> None:
    assert normalise_route(path) == label


def test_label_values_are_sanitised_and_cardinality_is_capped() -> None:
    m = Metrics()
    m.binding_dropped('Alembic Revision"}\n')
    for i in range(MAX_LABEL_VALUES + 20):
        m.compaction(f"kind{i}")
    s = samples(m)
    dropped = [labels for (name, labels) in s if name == "compaction_gate_bindings_dropped_total"]
    assert dropped == [(("kind", "alembic_revision"),)]
    kinds = {dict(labels)["kind"] for (name, labels) in s if name == "compaction_gate_compactions_total"}
    assert len(kinds) == MAX_LABEL_VALUES + 1 and "other" in kinds
    assert s[("compaction_gate_compactions_total", (("kind", "other"),))] == 20


def test_no_secret_or_conversation_material_can_become_a_label() -> None:
    m = Metrics()
    m.observe_request("/v1/threads/thread_abc/runs?api_key=sk-live-123", 200, 0.001)
    text = m.render().decode()
    assert "sk-live" not in text and "thread_abc" not in text
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        for _, value in re.findall(r'(\w+)="([^"]*)"', line):
            assert len(value) <= 48


def test_each_instance_has_its_own_registry_and_the_global_one_is_untouched() -> None:
    a, b = Metrics(), Metrics()
    a.destructive()
    assert samples(a)[("compaction_gate_destructive_compactions_total", ())] == 1
    assert samples(b)[("compaction_gate_destructive_compactions_total", ())] == 0
    assert REGISTRY.get_sample_value("compaction_gate_destructive_compactions_total") is None


async def test_metrics_handler_serves_the_exposition_format() -> None:
    app = web.Application()
    m = Metrics()
    app[METRICS_KEY] = m
    app.router.add_get("/metrics", metrics_handler)
    m.tripwire_hit()
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/metrics")
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
    assert "compaction_gate_tripwire_hits_total 1.0" in text
