"""Agent compaction markers as compiled, frozen data (DESIGN §5).

The marker strings live in ``policies/agents.yaml`` (one entry per agent). Loading is two
stages (DESIGN §8): raw YAML text → :func:`compile_markers` (validated, normalised) →
a frozen :class:`Markers`. Only :func:`load_markers` / :func:`default_markers` touch the
file system; the core (``transition``, ``analysis``) takes the compiled object.

Contracts:
- Markers never decide *whether* a transition is a compaction — the structural diff does.
  They name the agent and sharpen the kind (e.g. tell a summary from a new task).
- Matching is a case-insensitive substring test on whitespace-collapsed text (see
  :func:`fold`), optionally restricted to where the text sits (system prompt, user,
  assistant or tool message).
- Unknown keys are errors; errors name the source and, when known, the line.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: Where a piece of text sits: a message role (:data:`proxy.core.messages.Role`), the
#: ``type`` of a Responses request's last input item (``item``), or a request header's
#: value (``header``).
WHERES: frozenset[str] = frozenset({"system", "user", "assistant", "tool", "item", "header"})

#: An XML-style tag with the (already collapsed) space around it.
_TAG = re.compile(r" ?(</?[a-z][\w:.-]*>) ?")


def _fold(text: str) -> str:
    # what ``re.sub(r"\s+", " ", text).strip()`` makes (``\s`` and ``str.split`` agree on
    # whitespace: ``str.isspace``) with a fraction of the regex engine's work per
    # character (a long message's 128 KiB marker view is folded on the event loop)
    folded = " ".join(text.split()).lower()
    if "<" in folded:
        folded = _TAG.sub(r"\1", folded)
    return folded


#: Folded texts are remembered (:func:`fold`): the same system prompt, last user message
#: and header values come back with every request of a conversation. Short texts (up to
#: :data:`_FOLD_SHORT` characters, most of them) in one memo, long ones (a system prompt)
#: in a smaller one: a few MB at most.
_FOLD_SHORT = 4096
_FOLD_LONG = 1 << 18
_fold_short = functools.lru_cache(maxsize=512)(_fold)
_fold_long = functools.lru_cache(maxsize=16)(_fold)


def fold(text: str) -> str:
    """The form markers are matched on: lower case, runs of whitespace collapsed, and no
    whitespace next to an XML-style tag (``<role>\\nX\\n</role>`` folds like
    ``<role>X</role>``: prompts lay tags out on their own lines, marker files inline).
    Pure; remembered for texts up to :data:`_FOLD_LONG` characters (thread-safe)."""
    n = len(text)
    if n <= _FOLD_SHORT:
        return _fold_short(text)
    return _fold_long(text) if n <= _FOLD_LONG else _fold(text)


#: A text longer than twice this many characters is matched on its first and last this
#: many characters (:func:`marker_view`).
MARKER_WINDOW = 1 << 16


def marker_view(text: str, window: int = MARKER_WINDOW, joiner: str = "\n") -> str:
    """What of ``text`` markers are looked for in: all of it, or for a text longer than
    twice ``window`` its first and last ``window`` characters (joined by ``joiner``). A marker frames
    what an agent sends — its summarize instruction comes before or after the history it
    pastes, its continuation note opens the summary — so the middle of a megabyte tool
    output or paste is never read: matching stays a bounded piece of work on the event
    loop however long the text (folding and testing 10 MB took ~1 s)."""
    if len(text) <= 2 * window:
        return text
    return text[:window] + joiner + text[-window:]


class MarkersError(ValueError):
    """A marker file is invalid. The message names the source and, when known, the line."""


@dataclass(frozen=True, slots=True)
class Marker:
    """One marker string. ``folded`` is what is matched; ``where`` empty means anywhere."""

    raw: str
    folded: str
    where: frozenset[str] = frozenset()

    def matches(self, folded_text: str, where: str | None = None) -> bool:
        """``folded_text`` must already be :func:`fold`-ed (fold once, test many)."""
        if self.where and where is not None and where not in self.where:
            return False
        return self.folded in folded_text


@dataclass(frozen=True, slots=True)
class AgentMarkers:
    name: str
    display: str
    summarize_request: tuple[Marker, ...] = ()
    continuation: tuple[Marker, ...] = ()
    masked_placeholders: tuple[Marker, ...] = ()


@dataclass(frozen=True, slots=True)
class Markers:
    """Compiled marker presets for every known agent plus generic heuristics."""

    agents: tuple[AgentMarkers, ...] = ()
    summarize_words: tuple[str, ...] = ()
    summarize_scope_words: tuple[str, ...] = ()
    generic_placeholders: tuple[Marker, ...] = ()
    transcript_labels: tuple[str, ...] = ()
    #: How a message that *starts from* a summary opens ("here is a summary of the
    #: conversation to date:"), matched on the start of the folded text.
    summary_openers: tuple[str, ...] = ()
    #: Every agent's markers of one field flattened, agents in order, as ``(folded,
    #: where, agent)``: matched in one plain loop (derived from :attr:`agents`).
    _summarize: tuple[tuple[str, frozenset[str], str], ...] = field(init=False, repr=False, compare=False)
    _continuation: tuple[tuple[str, frozenset[str], str], ...] = field(init=False, repr=False, compare=False)
    #: :meth:`item_types` of each field (asked of every request: derived once).
    _item_types: dict[str, frozenset[str]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_summarize", _flat(self.agents, "summarize_request"))
        object.__setattr__(self, "_continuation", _flat(self.agents, "continuation"))
        object.__setattr__(self, "_item_types", {
            f: _item_types(self.agents, f) for f in ("summarize_request", "continuation")
        })

    def summarize_request_agent(self, folded_text: str, where: str | None = None) -> str | None:
        """Name of the first agent whose summarization-request marker is in the text."""
        return _first(self._summarize, folded_text, where)

    def item_agent(self, field: str, item_type: str) -> str | None:
        """Agent whose ``field`` markers (``summarize_request`` or ``continuation``) name
        this Responses input item type (``in: [item]``; the whole type, not a substring)."""
        folded = fold(item_type)
        for a in self.agents:
            markers: tuple[Marker, ...] = getattr(a, field)
            if any("item" in m.where and m.folded == folded for m in markers):
                return a.name
        return None

    def item_types(self, field: str) -> frozenset[str]:
        """Every item type a ``field`` marker names (folded)."""
        found = self._item_types.get(field)
        return _item_types(self.agents, field) if found is None else found

    def matches_headers(self) -> bool:
        """Whether any summarization-request marker is about a request header."""
        return any("header" in m.where for a in self.agents for m in a.summarize_request)

    def continuation_agent(self, folded_text: str, where: str | None = None) -> str | None:
        """Name of the first agent whose post-compaction marker is in the text."""
        return _first(self._continuation, folded_text, where)

    def presents_summary(self, folded_text: str, where: str | None = None) -> bool:
        """Whether the text *is* a summary handed to the model (a compacted history starts
        from it) rather than a request for one: it carries an agent's continuation marker,
        or opens like a summary (:attr:`summary_openers`). A summarization request asks
        for a summary of a history it carries; a compacted history starts from one — the
        two must never be confused (the second is checked, the first is gated)."""
        if self.continuation_agent(folded_text, where) is not None:
            return True
        head = folded_text[:160]
        return any(head.startswith(o) for o in self.summary_openers)

    def placeholder_agent(self, folded_text: str) -> tuple[bool, str | None]:
        """``(is_placeholder, agent)``: whether the text carries a known masking placeholder,
        and which agent's (``None`` for a generic one)."""
        for a in self.agents:
            if any(m.matches(folded_text) for m in a.masked_placeholders):
                return True, a.name
        if any(m.matches(folded_text) for m in self.generic_placeholders):
            return True, None
        return False, None

    def display_name(self, agent: str | None) -> str | None:
        for a in self.agents:
            if a.name == agent:
                return a.display
        return agent


def _flat(agents: tuple[AgentMarkers, ...], field_name: str) -> tuple[tuple[str, frozenset[str], str], ...]:
    return tuple((m.folded, m.where, a.name) for a in agents for m in getattr(a, field_name))


def _item_types(agents: tuple[AgentMarkers, ...], field_name: str) -> frozenset[str]:
    return frozenset(m.folded for a in agents for m in getattr(a, field_name) if "item" in m.where)


def _first(flat: tuple[tuple[str, frozenset[str], str], ...], folded_text: str, where: str | None) -> str | None:
    """The agent of the first marker in ``flat`` that :meth:`Marker.matches` the text (the
    first agent with a match: ``flat`` lists agents in order)."""
    for folded, at, name in flat:
        if (not at or where is None or where in at) and folded in folded_text:
            return name
    return None


#: No markers at all: detection then relies on structure alone.
NO_MARKERS = Markers()

# --------------------------------------------------------------------------- compile

_TOP_KEYS = frozenset({"version", "agents", "generic"})
_AGENT_KEYS = frozenset({"display", "summarize_request", "continuation", "masked_placeholders"})
_GENERIC_KEYS = frozenset(
    {"summarize_words", "summarize_scope_words", "masked_placeholders", "transcript_labels", "summary_openers"}
)
_MARKER_KEYS = frozenset({"text", "in"})


class _Lines:
    """Maps a key path to the line it was defined on (1-based), when known."""

    def __init__(self, source: str, lines: Mapping[tuple[Any, ...], int] | None) -> None:
        self.source = source
        self.lines = lines or {}

    def error(self, path: tuple[Any, ...], message: str) -> MarkersError:
        line = None
        for i in range(len(path), -1, -1):
            line = self.lines.get(path[:i])
            if line is not None:
                break
        where = f"{self.source}:{line}" if line is not None else self.source
        dotted = ".".join(str(p) for p in path) or "<top>"
        return MarkersError(f"{where}: {dotted}: {message}")


def _check_keys(obj: Any, allowed: frozenset[str], path: tuple[Any, ...], lines: _Lines) -> Mapping[str, Any]:
    if obj is None:
        return {}
    if not isinstance(obj, Mapping):
        raise lines.error(path, f"expected a mapping, got {type(obj).__name__}")
    for k in obj:
        if k not in allowed:
            raise lines.error(path + (k,), f"unknown key {k!r} (allowed: {', '.join(sorted(allowed))})")
    return obj


def _str_list(obj: Any, path: tuple[Any, ...], lines: _Lines) -> tuple[str, ...]:
    if obj is None:
        return ()
    if not isinstance(obj, list) or not all(isinstance(x, str) and x.strip() for x in obj):
        raise lines.error(path, "expected a list of non-empty strings")
    return tuple(obj)


def _marker_list(obj: Any, path: tuple[Any, ...], lines: _Lines) -> tuple[Marker, ...]:
    if obj is None:
        return ()
    if not isinstance(obj, list):
        raise lines.error(path, "expected a list of markers")
    out: list[Marker] = []
    for i, item in enumerate(obj):
        p = path + (i,)
        text: Any
        if isinstance(item, str):
            text, where = item, frozenset[str]()
        else:
            m = _check_keys(item, _MARKER_KEYS, p, lines)
            text = m.get("text")
            raw_where = m.get("in", [])
            if isinstance(raw_where, str):
                raw_where = [raw_where]
            if not isinstance(raw_where, list) or any(w not in WHERES for w in raw_where):
                raise lines.error(p + ("in",), f"'in' must list some of {sorted(WHERES)}")
            where = frozenset(raw_where)
        if not isinstance(text, str) or not text.strip():
            raise lines.error(p, "marker text must be a non-empty string")
        out.append(Marker(raw=text, folded=fold(text), where=where))
    return tuple(out)


def compile_markers(raw: Any, source: str = "<markers>", lines: Mapping[tuple[Any, ...], int] | None = None) -> Markers:
    """Validate and compile the parsed YAML document (pure). Raises :class:`MarkersError`."""
    ln = _Lines(source, lines)
    top = _check_keys(raw, _TOP_KEYS, (), ln)
    version = top.get("version", 1)
    if version != 1:
        raise ln.error(("version",), f"unsupported version {version!r} (expected 1)")
    agents_raw = _check_keys(top.get("agents"), frozenset(top.get("agents") or {}), ("agents",), ln)
    agents: list[AgentMarkers] = []
    for name, body in agents_raw.items():
        if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            raise ln.error(("agents", name), "agent names are lower_snake_case")
        a = _check_keys(body, _AGENT_KEYS, ("agents", name), ln)
        display = a.get("display", name)
        if not isinstance(display, str):
            raise ln.error(("agents", name, "display"), "expected a string")
        agents.append(
            AgentMarkers(
                name=name,
                display=display,
                summarize_request=_marker_list(a.get("summarize_request"), ("agents", name, "summarize_request"), ln),
                continuation=_marker_list(a.get("continuation"), ("agents", name, "continuation"), ln),
                masked_placeholders=_marker_list(
                    a.get("masked_placeholders"), ("agents", name, "masked_placeholders"), ln
                ),
            )
        )
    g = _check_keys(top.get("generic"), _GENERIC_KEYS, ("generic",), ln)
    return Markers(
        agents=tuple(agents),
        summarize_words=tuple(w.lower() for w in _str_list(g.get("summarize_words"), ("generic", "summarize_words"), ln)),
        summarize_scope_words=tuple(
            fold(w)
            for w in _str_list(g.get("summarize_scope_words"), ("generic", "summarize_scope_words"), ln)
        ),
        generic_placeholders=_marker_list(g.get("masked_placeholders"), ("generic", "masked_placeholders"), ln),
        transcript_labels=tuple(
            w.lower() for w in _str_list(g.get("transcript_labels"), ("generic", "transcript_labels"), ln)
        ),
        summary_openers=tuple(fold(w) for w in _str_list(g.get("summary_openers"), ("generic", "summary_openers"), ln)),
    )


def _scalar(node: yaml.Node) -> Any:
    """The Python value of a scalar node (its tag was resolved when it was composed)."""
    return yaml.constructor.SafeConstructor().construct_object(node, deep=True)


def _node_to_python(node: yaml.Node, path: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> Any:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for k_node, v_node in node.value:
            key = _scalar(k_node)
            lines[path + (key,)] = k_node.start_mark.line + 1
            out[key] = _node_to_python(v_node, path + (key,), lines)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_node_to_python(v, path + (i,), lines) for i, v in enumerate(node.value)]
    return _scalar(node)


def parse_markers_yaml(text: str, source: str = "<markers>") -> Markers:
    """Parse YAML *text* (already read) and compile it. Errors name ``source:line``."""
    try:
        node = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise MarkersError(f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    lines: dict[tuple[Any, ...], int] = {}
    raw = _node_to_python(node, (), lines) if node is not None else {}
    return compile_markers(raw, source, lines)


# --------------------------------------------------------------------------- I/O (thin)

#: The shipped presets file.
DEFAULT_MARKERS_PATH = Path(__file__).resolve().parent.parent.parent / "policies" / "agents.yaml"


def load_markers(path: str | Path | None = None) -> Markers:
    """Read and compile a markers file (the shipped ``policies/agents.yaml`` by default)."""
    p = Path(path) if path is not None else DEFAULT_MARKERS_PATH
    if path is None and not p.exists():  # installed as a package: use the package data
        try:
            from importlib.resources import files

            text = (files("policies") / "agents.yaml").read_text(encoding="utf-8")
            return parse_markers_yaml(text, "policies/agents.yaml")
        except (ModuleNotFoundError, FileNotFoundError):
            return NO_MARKERS
    return parse_markers_yaml(p.read_text(encoding="utf-8"), str(p))


@functools.lru_cache(maxsize=1)
def default_markers() -> Markers:
    """The shipped presets, loaded once per process."""
    return load_markers()

