"""The rejection of a destructive compaction (DESIGN §6).

The message names every dropped binding (sensitive ones redacted) and says what to do.
It deliberately never says ``context_length_exceeded`` or "prompt is too long": agents
treat those as "compact now" and would loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from .bindings import Binding, render_binding_lines

ERROR_CODE = "destructive_compaction"
HALLUCINATION_CODE = "hallucinated_identifier"

#: Phrases an agent would read as "your context is too long" — never emitted.
FORBIDDEN_PHRASES = ("context_length_exceeded", "prompt is too long", "maximum context length")


def rejection_message(bindings: Sequence[Binding], *, spill_hint: str | None = None) -> str:
    lines = [
        (
            "compaction-gate refused this request: the compacted history dropped "
            f"{len(bindings)} identifier(s) that later steps need verbatim and cannot be regenerated:"
        ),
        *render_binding_lines(bindings),
        (
            "How to recover (either way works): (1) compact again (in Claude Code: /compact; "
            "any agent: its summarize step) — compaction-gate adds the values above to that "
            "summarization request, and a summary that keeps each one verbatim is accepted; "
            "or (2) resend with each value above anywhere in the messages (for example, paste "
            "this list into your next message). Retrying this same request unchanged will be "
            "refused the same way."
        ),
    ]
    if spill_hint:
        lines.append(spill_hint)
    return "\n".join(lines)


def error_body(
    dialect: Literal["openai", "anthropic"], message: str, *, code: str = ERROR_CODE, param: str | None = None
) -> dict[str, Any]:
    """The error JSON of DESIGN §6 in the caller's dialect."""
    if dialect == "anthropic":
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
