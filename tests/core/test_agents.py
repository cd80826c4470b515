"""Table-driven: every agent of DESIGN §5, in both dialects, over every task kind.

For each (agent, task): a benign compaction (the summary keeps every required binding
verbatim) is ``safe``; a destructive one is ``destructive`` and lists exactly the
bindings it dropped — no more, no fewer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import pytest

from proxy.core.analysis import Analysis, analyze
from proxy.core.diff import LostBinding
from proxy.core.markers import NO_MARKERS, default_markers
from tests.support.conversations import (
    MASK_STYLES,
    STYLES,
    TASKS,
    Compaction,
    benign_truncation,
    build_task,
    compact,
)

M = default_markers()
SEED = 11
DIALECTS = ("openai", "anthropic")

KIND = {s: "summarize" for s in STYLES} | {"truncation": "truncate"} | {s: "mask" for s in MASK_STYLES}
AGENT: dict[str, str | None] = {s: s for s in STYLES} | {
    "truncation": None,
    "claude_code_clear": "claude_code",
    "openhands_mask": "openhands",
}

#: The binding each task's destructive compaction drops (the rollback / resume target).
TARGET = {
    "migration": "prev_revision",
    "upload": "upload_id",
    "git": "head_before",
    "k8s": "image_before",
    "terraform": "snapshot_arn",
    "refund": "refund_id",
    "kafka": "offset_before_1",
    "refactor": "checkpoint_sha",
}


def names(planted_value: str, reported: str) -> bool:
    """A reported binding names a planted value: the same value, or a composite value
    that contains it as a whole token (a Kafka table row holds its offset)."""
    return planted_value == reported or re.search(r"(?<![\w.])" + re.escape(planted_value) + r"(?![\w])", reported) is not None


def assert_exactly(missing: Iterable[LostBinding], expected: Iterable[str], a: Analysis) -> None:
    got = [b.value for b in missing]
    exp = sorted(expected)
    unmatched_expected = [p for p in exp if not any(names(p, g) for g in got)]
    unexpected = [g for g in got if not any(names(p, g) for p in exp)]
    assert not unmatched_expected and not unexpected, (
        f"missed {unmatched_expected}, extra {unexpected}; transition {a.transition.kind}: {a.transition.reason}"
    )


def conv_for(task: str):  # type: ignore[no-untyped-def]
    return build_task(task, seed=SEED, filler=2)


def _check(c: Compaction, dialect: str, style: str) -> Analysis:
    a = analyze(*c.snapshots(dialect), markers=M)  # type: ignore[arg-type]
    assert a.transition.kind == KIND[style], a.transition.reason
    assert a.agent == AGENT[style]
    return a


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("style", STYLES + MASK_STYLES)
def test_benign_compaction_is_safe(style: str, task: str, dialect: str) -> None:
    conv = conv_for(task)
    if style == "truncation":
        c = benign_truncation(conv)
    elif style in MASK_STYLES:
        # clear only the read-only tool results before the first binding
        c = compact(conv, style, keep_last=len(conv.turns) - conv.first_binding_step())
    else:
        c = compact(conv, style)
    assert c.compacted_turns and c.expected_verdict == "safe"
    a = _check(c, dialect, style)
    assert a.verdict == "safe", [b.to_json() for b in a.required_missing]
    assert not a.required_missing
    # regenerable listings may go; they never count
    assert all(not b.required for b in a.dropped)


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("style", STYLES + MASK_STYLES)
def test_destructive_compaction_lists_exactly_what_it_dropped(style: str, task: str, dialect: str) -> None:
    conv = conv_for(task)
    # masking clears results only: the upload id stays visible in the later part-upload calls
    name = "etag_1" if (style in MASK_STYLES and task == "upload") else TARGET[task]
    target = conv.binding(name).value
    c = compact(conv, style, drop=[target], keep_last=2)
    assert c.expected_verdict == "destructive" and target in c.dropped
    a = _check(c, dialect, style)
    assert a.verdict == "destructive"
    assert_exactly(a.required_missing, c.dropped, a)
    # without any marker the verdict and the list are the same
    b = analyze(*c.snapshots(dialect), markers=NO_MARKERS)  # type: ignore[arg-type]
    assert b.verdict == "destructive" and b.agent is None
    assert_exactly(b.required_missing, c.dropped, b)


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("style", [s for s in STYLES if s != "truncation"])
def test_summary_dropping_every_binding(style: str, task: str, dialect: str) -> None:
    conv = conv_for(task)
    c = compact(conv, style, drop="all", keep_last=2)
    assert c.dropped
    a = _check(c, dialect, style)
    assert a.verdict == "destructive"
    assert_exactly(a.required_missing, c.dropped, a)
    s = a.signals
    assert s.obligations.asymmetry and s.obligations.bindings_resolved_after < s.obligations.obligations_open
    assert s.density.identifier_retention < s.density.prose_retention
    assert s.next_action.dropped_kinds


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    "task, name, damage",
    [
        ("git", "head_before", lambda v: v[:7]),
        ("migration", "migration_path", lambda v: v.split("/srv/shop/", 1)[1]),
        ("k8s", "image_before", lambda v: v[: v.index("@sha256:") + 8 + 12]),
    ],
)
def test_altered_values_are_reported_as_altered_never_surviving(task: str, name: str, damage, dialect: str) -> None:  # type: ignore[no-untyped-def]
    conv = conv_for(task)
    v = conv.binding(name).value
    c = compact(conv, "langchain", alter={v: damage(v)})
    assert v in c.dropped
    a = analyze(*c.snapshots(dialect), markers=M)  # type: ignore[arg-type]
    assert a.verdict == "destructive"
    assert any(names(v, b.value) and b.status == "altered" for b in a.altered), [b.to_json() for b in a.dropped + a.altered]
    assert all(not names(v, b.value) for b in a.dropped)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_summary_keeping_the_full_sha_keeps_its_short_forms(dialect: str) -> None:
    conv = conv_for("git")
    c = compact(conv, "claude_code")  # summary states the full HEAD; the push output (gone) had its short form
    a = analyze(*c.snapshots(dialect), markers=M)  # type: ignore[arg-type]
    short = conv.binding("head_before_short").value
    assert a.verdict == "safe" and not any(names(short, b.value) for b in a.dropped + a.altered)


def test_claude_code_metadata_does_not_matter_for_detection() -> None:
    conv = conv_for("upload")
    conv = conv.with_turns(conv.turns, metadata={"user_id": "user_abc_account_x_session_5b1d3a8e-2f6c-4d1a-9e7b-0c4f2a6d8e91"})
    c = compact(conv, "claude_code", drop=[conv.binding("upload_id").value])
    before, after = c.bodies("anthropic")
    assert after["metadata"] == before["metadata"]
    a = analyze(*c.snapshots("anthropic"), markers=M)
    assert a.verdict == "destructive" and a.agent == "claude_code"


@pytest.mark.parametrize(
    "output, command, expected",
    [
        # git push after a rewrite: "+ old...new" (forced) and "old..new" (fast-forward)
        ("To github.com:acme/shop.git\n + a4dea18...e92e272 feature/payments -> feature/payments (forced update)",
         "git push --force-with-lease origin feature/payments", {"a4dea18", "e92e272"}),
        ("To github.com:acme/shop.git\n   a4dea18..e92e272  main -> main", "git push origin main", {"a4dea18", "e92e272"}),
        ("[main 22b3437] wip: checkpoint before client rename", 'git commit -am "wip"', {"22b3437"}),
    ],
)
def test_identifier_layer_finds_the_short_shas_of_git_outputs(output: str, command: str, expected: set[str]) -> None:
    """The git fixtures above rely on these being extracted (identifier layer contract)."""
    from proxy.core.identifiers.textscan import scan_text

    found = {m.value for m in scan_text(output, None, f"bash {command}") if m.kind == "git_sha"}
    assert expected <= found
