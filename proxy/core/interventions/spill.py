"""Pure parts of ``spill``: render the lost region as text, and the note that tells the
model (and the agent's operator) how to get it back. Storage lives in
:mod:`proxy.gate.spill`."""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import Message
from .bindings import Binding, render_binding_lines

SPILL_OPEN = "[compaction-gate: part of this conversation was stored outside the context]"
SPILL_CLOSE = "[/compaction-gate]"


def render_region(messages: Sequence[Message]) -> str:
    """The lost messages as plain text (role headers, tool names and call ids kept)."""
    chunks: list[str] = []
    for i, m in enumerate(messages):
        head = f"--- [{i}] {m.role}"
        chunks.append(head)
        for p in m.parts:
            if p.kind == "tool_call":
                chunks.append(f"(tool call {p.tool_name or '?'} id={p.tool_call_id or '?'}) {p.text}")
            elif p.kind == "tool_result":
                chunks.append(f"(tool result id={p.tool_call_id or '?'}) {p.text}")
            elif p.kind in ("text", "thinking"):
                chunks.append(p.text)
            else:
                chunks.append(f"({p.kind} content omitted)")
    return "\n".join(chunks)


def spill_note(handle: str, bindings: Sequence[Binding], *, url_path: str) -> str:
    lines = [
        SPILL_OPEN,
        (
            f"The compaction removed a region of earlier turns. It is stored under handle `{handle}`: "
            f"an operator or tool with this conversation's API key can read it at GET {url_path}."
        ),
    ]
    if bindings:
        lines.append("It contains these identifiers that later steps need verbatim:")
        lines.extend(render_binding_lines(bindings))
    lines.append(SPILL_CLOSE)
    return "\n".join(lines)


def recall_note(handle: str, bindings: Sequence[Binding], *, tool: str) -> str:
    """The spill note when the gate offers its recall tool in the same request: the model
    reads the region back by calling it (the gate resolves the call itself)."""
    lines = [
        SPILL_OPEN,
        (
            f"The compaction removed a region of earlier turns. It is stored under handle `{handle}`: "
            f'call the tool `{tool}` with {{"handle": "{handle}"}} to read it back verbatim '
            '(add "query" to get only the passages that mention a value).'
        ),
    ]
    if bindings:
        lines.append("It contains these identifiers that later steps need verbatim:")
        lines.extend(render_binding_lines(bindings))
    lines.append(SPILL_CLOSE)
    return "\n".join(lines)
