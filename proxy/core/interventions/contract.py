"""The contract added to a summarization request (the gate, DESIGN §4.1).

The contract lists the bindings the summary must keep verbatim. It is appended to the
final user turn — next to the summarize instruction — so placement never disturbs
tool-call pairing or alternation. Sensitive bindings are never listed: a model is never
asked to reproduce a secret.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .bindings import (
    Binding,
    TokenCounter,
    estimate_tokens,
    render_binding_lines,
    select_within_budget,
)
from .placement import NoteDialect, append_to_last_user

CONTRACT_OPEN = "[compaction-gate: summary contract]"
CONTRACT_CLOSE = "[/compaction-gate]"
SECTION_TITLE = "Verbatim identifiers"

_RULES = (
    "Later steps of this task depend on the identifiers below and cannot regenerate them. "
    f"Your summary MUST end with a section titled \"{SECTION_TITLE}\" that reproduces each of "
    "them exactly, character for character (no shortening, no paraphrase), one per line, each "
    "with what it is and what it is needed for."
)


def contract_bindings(bindings: Sequence[Binding]) -> list[Binding]:
    return [b for b in bindings if not b.sensitive]


def contract_text(bindings: Sequence[Binding]) -> str:
    return "\n".join([CONTRACT_OPEN, _RULES, *render_binding_lines(bindings), CONTRACT_CLOSE])


def add_summary_contract(
    dialect: NoteDialect,
    body: Mapping[str, Any],
    bindings: Sequence[Binding],
    *,
    budget_tokens: int | None = None,
    count_tokens: TokenCounter = estimate_tokens,
) -> tuple[dict[str, Any], list[Binding]]:
    """Return (a copy of ``body`` with the contract appended to its last user turn, the
    bindings listed). With nothing to list, the body is returned unchanged (a copy)."""
    listed, _ = select_within_budget(
        contract_bindings(bindings), budget_tokens, count_tokens, count_tokens(contract_text([]))
    )
    if not listed:
        return dict(body), []
    return append_to_last_user(dialect, body, contract_text(listed)), listed
