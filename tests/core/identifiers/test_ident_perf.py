"""Extraction over a large tool output: what it finds, and that a re-extraction is served
from the cache. Its speed is a benchmark, not a test: ``python -m bench.ident``."""

from __future__ import annotations

from bench.ident import tool_output
from proxy.core.identifiers import Catalog, Source, extract_text
from proxy.core.identifiers.textscan import scan_text


def test_a_200kb_tool_output_yields_its_identifiers() -> None:
    cat = Catalog.load_default()
    text = tool_output()
    assert len(text) == 200_000
    ids = scan_text(text, cat)
    assert len(ids) > 500
    assert scan_text(text, cat) == ids  # deterministic


def test_a_cached_rescan_returns_the_same_identifiers() -> None:
    text = tool_output(50_000, seed=3)
    src = Source(4, "tool", "tool_result", tool_name="bash", command="cat out.log", mutating=False)
    first = extract_text(text, src)
    assert extract_text(text, src) == first
