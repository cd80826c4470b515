"""The binding as the interventions see it, its one-line rendering, and budgeting.

Contracts:
- A binding's ``value`` is rendered verbatim (never trimmed, re-cased or re-quoted) unless
  it is ``sensitive``: sensitive values are never rendered in clear, only as a redacted
  fingerprint with the advice to re-read them from their source.
- Budget selection keeps the highest-priority bindings first (ties keep input order), and
  always keeps at least one line when any binding exists, so a tiny budget never silently
  re-injects nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

TokenCounter = Callable[[str], int]

#: Longest source line kept (characters); longer ones are cut with an ellipsis.
MAX_SOURCE_CHARS = 140
#: Longest line-it-came-from kept (characters).
MAX_LINE_CHARS = 170


def estimate_tokens(text: str) -> int:
    """Cheap fallback estimate (~4 characters a token) when no tokenizer is given."""
    return max(1, (len(text) + 3) // 4)


@dataclass(frozen=True, slots=True)
class Binding:
    """One identifier a later step needs verbatim.

    ``source`` is a short human line saying where it came from ("tool result of bash
    `alembic upgrade head`, message 7"); ``priority`` orders it under a token budget
    (higher first); ``status`` says whether it vanished or survived only in an altered form.
    """

    value: str
    kind: str
    source: str = ""
    regenerable: bool = False
    sensitive: bool = False
    priority: int = 0
    status: Literal["dropped", "altered"] = "dropped"
    #: The identifier's diff identity (a fingerprint for secrets): how a repair tells that
    #: a secret it cannot show came back.
    norm: str = ""
    #: The line the value came from (secrets redacted), shown beside it so that related
    #: values stay distinguishable (``1a2b3c4d5e6f -> 4f9a2c1e7b3d``: which is the old head).
    line: str = ""

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.value.encode("utf-8", "surrogatepass")).hexdigest()[:12]

    def display(self) -> str:
        """The value as it may be shown to a model or a user: verbatim, or redacted."""
        if self.sensitive:
            return f"<redacted {self.kind} sha256:{self.fingerprint}>"
        if "`" in self.value:
            return f"`` {self.value} ``"
        return f"`{self.value}`"


def _short(text: str, limit: int = MAX_SOURCE_CHARS) -> str:
    text = " ".join(text.split())
    if len(text) > limit:
        return text[: limit - 1] + "…"
    return text


def render_binding_line(b: Binding) -> str:
    """``- `value` — kind (not regenerable); from <source>: "<the line it came from>"``."""
    regen = "regenerable" if b.regenerable else "not regenerable"
    line = f"- {b.display()} — {b.kind} ({regen})"
    if b.source:
        line += f"; from {_short(b.source)}"
    if b.line and b.line.strip() != b.value and not b.sensitive:
        line += f': "{_short(b.line, MAX_LINE_CHARS)}"'
    if b.sensitive:
        line += "; secret value withheld, re-read it from its source"
    return line


def render_binding_lines(bindings: Sequence[Binding]) -> list[str]:
    return [render_binding_line(b) for b in bindings]


def dedupe(bindings: Sequence[Binding]) -> list[Binding]:
    """First occurrence of each value wins."""
    seen: set[str] = set()
    out: list[Binding] = []
    for b in bindings:
        if b.value in seen:
            continue
        seen.add(b.value)
        out.append(b)
    return out


def select_within_budget(
    bindings: Sequence[Binding],
    budget_tokens: int | None,
    count_tokens: TokenCounter = estimate_tokens,
    overhead_tokens: int = 0,
) -> tuple[list[Binding], list[Binding]]:
    """Split bindings into (kept, omitted) so the rendered lines of ``kept`` plus
    ``overhead_tokens`` fit in ``budget_tokens`` (``None`` = unlimited).

    Order of ``kept`` is by priority (desc), non-regenerable before regenerable, then
    input order."""
    ordered = sorted(
        enumerate(dedupe(bindings)),
        key=lambda ib: (-ib[1].priority, ib[1].regenerable, ib[0]),
    )
    kept: list[Binding] = []
    omitted: list[Binding] = []
    used = overhead_tokens
    for _, b in ordered:
        cost = count_tokens(render_binding_line(b)) + 1
        if budget_tokens is None or used + cost <= budget_tokens or not kept:
            kept.append(b)
            used += cost
        else:
            omitted.append(b)
    return kept, omitted
