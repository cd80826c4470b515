"""Agent markers: data in policies/agents.yaml, compiled to a frozen object."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.markers import (
    DEFAULT_MARKERS_PATH,
    NO_MARKERS,
    Markers,
    MarkersError,
    default_markers,
    fold,
    load_markers,
    parse_markers_yaml,
)

DESIGN_AGENTS = ("claude_code", "codex", "langchain", "openhands", "aider", "letta", "cline", "goose")


def test_shipped_file_has_every_agent_of_design_section_5() -> None:
    m = load_markers(DEFAULT_MARKERS_PATH)
    assert tuple(a.name for a in m.agents) == DESIGN_AGENTS
    for a in m.agents:
        assert a.summarize_request, a.name
        assert a.continuation, a.name
    assert m.summarize_words and m.transcript_labels


def test_markers_are_frozen() -> None:
    m = default_markers()
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.agents = ()  # type: ignore[misc]
    assert default_markers() is m  # loaded once


@pytest.mark.parametrize(
    "text, where, agent",
    [
        ("Your task is to create a detailed summary of the conversation so far, paying…", "user", "claude_code"),
        ("You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff", "user", "codex"),
        ("<role>Context Extraction Assistant</role>\n<primary_objective>", "user", "langchain"),
        ("You are maintaining a context-aware state summary for an interactive agent", "user", "openhands"),
        ("*Briefly* summarize this partial conversation about programming.", "system", "aider"),
        ("The following messages are being evicted from the BEGINNING of your context window.", "user", "letta"),
        ('<explicit_instructions type="summarize_task">', "user", "cline"),
        ("Please summarize the conversation history provided in the system prompt.", "user", "goose"),
    ],
)
def test_summarize_request_markers(text: str, where: str, agent: str) -> None:
    assert default_markers().summarize_request_agent(fold(text), where) == agent


@pytest.mark.parametrize(
    "text, where, agent",
    [
        ("This session is being continued from a previous conversation that ran out of context. The", "user", "claude_code"),
        ("This session is being continued from a previous conversation that ran out of context. The", "tool", "cline"),
        ("Another language model started to solve this problem and produced a summary", "user", "codex"),
        ("Here is a summary of the conversation to date:\n\nGoal", "user", "langchain"),
        ("I spoke to you previously about a number of things.\nGoal", "user", "aider"),
        ('{\n  "type": "system_alert",\n  "message": "Note: prior messages', "user", "letta"),
        ("Your context was compacted. The previous conversation", "assistant", "goose"),
        ("Your context was compacted. The previous conversation", "user", None),
        ("Nothing to see here", "user", None),
    ],
)
def test_continuation_markers_respect_where(text: str, where: str, agent: str | None) -> None:
    assert default_markers().continuation_agent(fold(text), where) == agent


def test_placeholders() -> None:
    m = default_markers()
    assert m.placeholder_agent(fold("[Old tool result content cleared]")) == (True, "claude_code")
    assert m.placeholder_agent(fold("<MASKED>")) == (True, "openhands")
    assert m.placeholder_agent(fold("[omitted]")) == (True, None)
    assert m.placeholder_agent(fold("total 12\ndrwxr-xr-x")) == (False, None)


def test_fold_collapses_whitespace_and_case() -> None:
    assert fold("  Here   IS\n a\tSummary ") == "here is a summary"


def test_no_markers_matches_nothing() -> None:
    assert NO_MARKERS.summarize_request_agent("your task is to create a detailed summary") is None
    assert NO_MARKERS.continuation_agent("this session is being continued") is None
    assert NO_MARKERS.placeholder_agent("<masked>") == (False, None)


@pytest.mark.parametrize(
    "text, message",
    [
        ("agents:\n  x:\n    bogus: 1\n", "f.yaml:3: agents.x.bogus: unknown key 'bogus'"),
        ("version: 2\n", "f.yaml:1: version: unsupported version 2"),
        ("agents:\n  x:\n    continuation:\n      - text: hi\n        in: [robot]\n", "f.yaml:5: agents.x.continuation.0.in"),
        ("agents:\n  x:\n    continuation: [\"\"]\n", "f.yaml:3: agents.x.continuation.0: marker text must be a non-empty string"),
        ("agents:\n  Bad-Name:\n    display: x\n", "f.yaml:2: agents.Bad-Name: agent names are lower_snake_case"),
        ("generic:\n  summarize_words: [1, 2]\n", "f.yaml:2: generic.summarize_words: expected a list"),
        ("agents: [\n", "f.yaml"),
    ],
)
def test_bad_files_name_file_and_line(text: str, message: str) -> None:
    with pytest.raises(MarkersError) as exc:
        parse_markers_yaml(text, "f.yaml")
    assert str(exc.value).startswith(message)


def test_custom_file_extends_nothing_but_itself(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "m.yaml"
    p.write_text('agents:\n  myagent:\n    continuation: ["CONTEXT RESET NOTE"]\n', encoding="utf-8")
    m = load_markers(p)
    assert isinstance(m, Markers)
    assert m.continuation_agent(fold("context reset note: we did x")) == "myagent"
    assert m.summarize_request_agent(fold("Your task is to create a detailed summary")) is None


#: The head of LangChain's ``SummarizationMiddleware`` prompt exactly as langchain 1.x
#: ships it (``langchain.agents.middleware.summarization.DEFAULT_SUMMARY_PROMPT``): the
#: role tag on lines of its own, which the marker file writes inline.
LANGCHAIN_PROMPT_HEAD = (
    "<role>\nContext Extraction Assistant\n</role>\n\n<primary_objective>\n"
    "Your sole objective in this task is to extract the highest quality/most relevant context "
    "from the conversation history below.\n</primary_objective>\n"
)


def test_fold_drops_whitespace_next_to_tags() -> None:
    assert fold("<role>\n Context  Extraction\n</role>\n\n<x>") == "<role>context extraction</role><x>"
    assert fold("a < b") == "a < b"  # not a tag


def test_langchain_summarization_prompt_is_recognised_by_its_marker() -> None:
    assert default_markers().summarize_request_agent(fold(LANGCHAIN_PROMPT_HEAD), "user") == "langchain"


def test_langchain_installed_prompt_is_recognised_by_its_marker() -> None:
    summarization = pytest.importorskip("langchain.agents.middleware.summarization")
    prompt = summarization.DEFAULT_SUMMARY_PROMPT
    assert prompt.startswith(LANGCHAIN_PROMPT_HEAD)
    assert default_markers().summarize_request_agent(fold(prompt), "user") == "langchain"


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("aB <>/\t\n\u00e9\u0130x-:."), max_size=60), st.integers(0, 3))
def test_fold_remembered_is_fold_computed(text: str, scale: int) -> None:
    """``fold`` remembers its results (short and long texts in their own memos): asked
    again, for a text of any length, it gives what folding the text afresh gives."""
    from proxy.core.markers import _fold

    long = text * (1 + 2_000 * scale)  # up to ~120,000 characters: the long memo
    for t in (text, long, text):
        assert fold(t) == _fold(t)
        assert fold(t) == fold(t)



def _first_agent_by_scan(agents: tuple[Any, ...], field: str, folded: str, where: str | None) -> str | None:
    """The definition: the first agent with any marker of ``field`` matching the text."""
    for a in agents:
        if any(m.matches(folded, where) for m in getattr(a, field)):
            return a.name  # type: ignore[no-any-return]
    return None


_SHIPPED = default_markers()
_PIECES = [m.folded for a in _SHIPPED.agents for m in (*a.summarize_request, *a.continuation)] + ["", " x ", "summary"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=4), st.sampled_from([None, "user", "system", "assistant", "tool", "item", "header"]))
def test_marker_lookup_is_the_first_agent_with_a_match(pieces: list[str], where: str | None) -> None:
    """The flattened lookup answers what scanning agent by agent answers, for texts that
    carry any mix of the shipped markers, wherever the text sits."""
    text = " ".join(pieces)
    for field, lookup in (("summarize_request", _SHIPPED.summarize_request_agent), ("continuation", _SHIPPED.continuation_agent)):
        assert lookup(text, where) == _first_agent_by_scan(_SHIPPED.agents, field, text, where)


_SPACES = "".join(c for c in map(chr, range(0x3001)) if c.isspace())


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.one_of(st.sampled_from(_SPACES + "<>/aZ:.-"), st.characters()), max_size=60))
def test_fold_collapses_whitespace_as_the_regex_did(text: str) -> None:
    """``fold``'s whitespace collapse (``str.split``) is the regex's it replaced, for
    every whitespace character (``\\x1c``-``\\x1f``, NEL, the Unicode spaces...)."""
    import re

    from proxy.core.markers import _TAG, _fold

    expected = re.sub(r"\s+", " ", text).strip().lower()
    if "<" in expected:
        expected = _TAG.sub(r"\1", expected)
    assert _fold(text) == expected


def test_item_types_are_derived_once_and_equal_the_markers_they_come_from() -> None:
    # asked of every request (RequestHints.continued_by_item): derived at construction
    markers = default_markers()
    for field in ("summarize_request", "continuation"):
        want = frozenset(m.folded for a in markers.agents for m in getattr(a, field) if "item" in m.where)
        assert markers.item_types(field) == want
        assert markers.item_types(field) is markers.item_types(field)
    assert "compaction" in markers.item_types("continuation")  # Codex's server-side compaction item
