"""``reinject``: put the bindings a compaction dropped back, right after the summary.

The note lists each binding verbatim (sensitive ones redacted) with a short source line,
within a token budget (highest priority first); what did not fit is counted, never
silently lost. Placement rules are in :mod:`.placement`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .bindings import (
    Binding,
    TokenCounter,
    estimate_tokens,
    render_binding_lines,
    select_within_budget,
)
from .placement import NoteDialect, NoteRole, Placement, insert_note

NOTE_OPEN = "[compaction-gate: identifiers preserved from before this conversation was compacted]"
NOTE_CLOSE = "[/compaction-gate]"

_INTRO = (
    "The summary of earlier turns dropped these values. Later steps need them exactly as "
    "written: use them verbatim, do not re-derive, shorten or invent replacements."
)


@dataclass(frozen=True, slots=True)
class ReinjectResult:
    body: dict[str, Any]
    text: str
    kept: tuple[Binding, ...]
    omitted: tuple[Binding, ...]
    placement: Placement
    extra: dict[str, Any] = field(default_factory=dict)


def reinject_text(
    kept: Sequence[Binding], omitted: Sequence[Binding] = (), *, footer: str | None = None
) -> str:
    lines = [NOTE_OPEN, _INTRO, *render_binding_lines(kept)]
    if omitted:
        lines.append(
            f"({len(omitted)} more binding(s) did not fit the re-injection budget: "
            + ", ".join(sorted({b.kind for b in omitted}))
            + ".)"
        )
    if footer:
        lines.append(footer)
    lines.append(NOTE_CLOSE)
    return "\n".join(lines)


def reinject(
    dialect: NoteDialect,
    body: Mapping[str, Any],
    bindings: Sequence[Binding],
    *,
    anchor: int | None,
    role: NoteRole = "user",
    budget_tokens: int | None = None,
    count_tokens: TokenCounter = estimate_tokens,
    footer: str | None = None,
    after_text: str | None = None,
) -> ReinjectResult:
    """Return a copy of ``body`` with one note listing ``bindings`` right after raw index
    ``anchor`` (the summary message; ``None`` = start of the conversation), after its
    block ``after_text`` when given (see :func:`.placement.insert_note`)."""
    overhead = count_tokens(reinject_text([], footer=footer))
    kept, omitted = select_within_budget(bindings, budget_tokens, count_tokens, overhead)
    text = reinject_text(kept, omitted, footer=footer)
    new_body, placement = insert_note(dialect, body, text, anchor=anchor, role=role, after_text=after_text)
    return ReinjectResult(new_body, text, tuple(kept), tuple(omitted), placement)
