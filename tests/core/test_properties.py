"""Properties of the verdict (hypothesis).

1. Appending never yields ``destructive``.
2. Removing a non-regenerable binding from every message that survives the compaction
   always yields ``destructive``, naming that binding.
3. Putting the dropped values back verbatim makes it ``safe``.
"""

from __future__ import annotations

import json
import re

from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from proxy.core.analysis import analyze
from proxy.core.markers import default_markers
from tests.support.conversations import (
    MASK_STYLES,
    STYLES,
    TASKS,
    ToolCall,
    Turn,
    build_task,
    compact,
    scrub,
)

M = default_markers()
# Derandomized (same examples every run) and no shrinking, so a failure reports fast.
PROPS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)

tasks = st.sampled_from(TASKS)
seeds = st.integers(min_value=0, max_value=10_000)
fillers = st.integers(min_value=0, max_value=3)
dialects = st.sampled_from(["openai", "anthropic"])
styles = st.sampled_from(STYLES + MASK_STYLES)

_hex = st.text(alphabet="0123456789abcdef", min_size=7, max_size=40)
_words = st.text(alphabet=st.characters(codec="utf-8", categories=["L", "N", "P", "Zs"]), max_size=80)


@st.composite
def new_turns(draw: st.DrawFn) -> list[Turn]:
    """Turns an agent could append: prose, and tool calls whose results carry fresh ids
    (even ones from mutating commands)."""
    out: list[Turn] = []
    for k in range(draw(st.integers(min_value=0, max_value=4))):
        kind = draw(st.sampled_from(["user", "assistant", "tool"]))
        if kind == "tool":
            cid = f"call_prop_{k}_{draw(st.integers(0, 10**6))}"
            cmd = draw(st.sampled_from(["alembic upgrade head", "git rev-parse HEAD", "ls -la", "terraform apply -auto-approve"]))
            out.append(Turn("assistant", draw(_words), calls=(ToolCall(cid, "bash", {"command": cmd}),)))
            out.append(Turn("tool", f"revision {draw(_hex)} {draw(_words)}", call_id=cid, tool_name="bash"))
        else:
            out.append(Turn(kind, draw(_words) + " " + draw(_hex)))  # type: ignore[arg-type]
    return out


def names(planted: str, reported: str) -> bool:
    return planted == reported or re.search(r"(?<![\w.])" + re.escape(planted) + r"(?![\w])", reported) is not None


@PROPS
@given(task=tasks, seed=seeds, filler=fillers, dialect=dialects, extra=new_turns(), compacted=st.sampled_from([None, *STYLES]))
def test_appending_never_yields_destructive(task: str, seed: int, filler: int, dialect: str, extra: list[Turn], compacted: str | None) -> None:
    conv = build_task(task, seed=seed, filler=filler)
    base = conv if compacted is None else compact(conv, compacted, drop="all").after
    after = base.then(*extra)
    a = analyze(base.snapshot(dialect), after.snapshot(dialect), markers=M)  # type: ignore[arg-type]
    assert a.transition.kind == "append", a.transition.reason
    assert a.verdict == "safe" and not a.dropped


@PROPS
@given(task=tasks, seed=seeds, filler=fillers, dialect=dialects, style=styles, pick=st.integers(0, 100), keep=st.integers(0, 6))
def test_removing_a_binding_from_every_surviving_message_is_destructive(
    task: str, seed: int, filler: int, dialect: str, style: str, pick: int, keep: int
) -> None:
    conv = build_task(task, seed=seed, filler=filler)
    b = conv.bindings[pick % len(conv.bindings)]
    c = compact(conv, style, drop=[b.value], keep_last=keep)
    after = scrub(c.after, (b.value,) + b.aliases)
    a = analyze(conv.snapshot(dialect), after.snapshot(dialect), markers=M)  # type: ignore[arg-type]
    assert a.verdict == "destructive", (b.name, a.transition.kind, a.transition.reason)
    assert any(names(b.value, x.value) for x in a.required_missing), (b.name, b.value, [x.value for x in a.required_missing])


@PROPS
@given(
    task=tasks, seed=seeds, filler=fillers, dialect=dialects, style=styles,
    drop=st.sampled_from(["all", "one"]), keep=st.integers(0, 6), where=st.sampled_from(["end", "after_summary"]),
)
def test_putting_dropped_values_back_verbatim_makes_it_safe(
    task: str, seed: int, filler: int, dialect: str, style: str, drop: str, keep: int, where: str
) -> None:
    conv = build_task(task, seed=seed, filler=filler)
    c = compact(conv, style, drop="all" if drop == "all" else [conv.bindings[0].value], keep_last=keep)
    before, after = conv.snapshot(dialect), c.after.snapshot(dialect)  # type: ignore[arg-type]
    a = analyze(before, after, markers=M)
    assume(a.destructive)
    note = Turn(
        "user",
        "Bindings from before the compaction, verbatim:\n"
        + "\n".join(f"- {x.kind}: {x.value}" for x in a.required_missing),
    )
    turns = list(c.after.turns)
    at = len(turns) if where == "end" else min(len(turns), 1 + (style in ("openhands", "cline")) + (style == "cline"))
    if at < len(turns) and turns[at].role == "tool":
        at = len(turns)
    turns.insert(at, note)
    fixed = c.after.with_turns(turns)
    a2 = analyze(before, fixed.snapshot(dialect), markers=M)  # type: ignore[arg-type]
    assert a2.verdict == "safe", [x.to_json() for x in a2.required_missing]
    assert json.dumps(a2.to_json())
