"""Request hints: summarization markers a request carries outside its messages."""

from __future__ import annotations

from proxy.core.markers import parse_markers_yaml
from proxy.gate.hints import RequestHints


def test_header_markers_are_those_a_header_can_carry() -> None:
    """A request header's value is matched on the markers ``in: [header]`` or anywhere,
    never on those restricted to elsewhere (a user message's marker in a header is not a
    summarization request)."""
    m = parse_markers_yaml(
        "agents:\n"
        "  alpha:\n    summarize_request:\n      - text: ALPHA USER ONLY\n        in: [user]\n"
        "  beta:\n    summarize_request:\n      - text: beta anywhere\n"
        "  gamma:\n    summarize_request:\n      - text: gamma-compact\n        in: [header]\n",
        "m.yaml",
    )
    hints = RequestHints(lambda: m)
    assert hints.request_agent({"x-a": "alpha user only"}, {}) is None
    assert hints.request_agent({"x-a": "  BETA\n anywhere "}, {}) == "beta"
    assert hints.request_agent({"x-meta": '{"kind": "gamma-compact"}'}, {}) == "gamma"
    assert hints.request_agent({"x-a": "x" * 9000 + "gamma-compact"}, {}) is None  # too long to be read
    only_user = parse_markers_yaml("agents:\n  alpha:\n    summarize_request:\n      - text: beta anywhere\n", "u.yaml")
    assert RequestHints(lambda: only_user).request_agent({"x-a": "beta anywhere"}, {}) is None  # no header marker at all
