"""The labelled corpus: recall of dropped non-regenerable bindings must be 100 %,
precision of the ``destructive`` verdict at least 95 %. Metrics are printed (``-s``) and
shown in the terminal summary."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import pytest

from proxy.core.analysis import analyze
from proxy.core.dialects import from_any
from proxy.core.markers import default_markers
from tests.corpus.generate import generate
from tests.support.conversations import TASKS

N_CASES = 264


def names(planted: str, reported: str) -> bool:
    """A reported binding names a planted value (equal, or a composite containing it)."""
    return planted == reported or re.search(r"(?<![\w.])" + re.escape(planted) + r"(?![\w])", reported) is not None


def test_corpus_recall_and_precision(pytestconfig: pytest.Config) -> None:
    cases = generate(N_CASES)
    markers = default_markers()
    assert len(cases) >= 200 and {c.task for c in cases} == set(TASKS)

    tp = fp = fn = tn = 0
    dropped_total = dropped_found = 0
    per_task: dict[str, Counter[str]] = defaultdict(Counter)
    per_variant: Counter[str] = Counter()
    misses: list[str] = []
    false_alarms: list[str] = []
    for case in cases:
        a = analyze(from_any(case.before), from_any(case.after), markers=markers)
        reported = [b.value for b in a.required_missing]
        per_variant[case.variant] += 1
        t = per_task[case.task]
        t["cases"] += 1
        for v in case.dropped:
            dropped_total += 1
            t["dropped"] += 1
            if any(names(v, r) for r in reported):
                dropped_found += 1
                t["found"] += 1
            else:
                misses.append(f"case {case.id} ({case.task}/{case.variant}/{case.style}/{case.dialect}): {v}")
        if a.destructive and case.expected == "destructive":
            tp += 1
        elif a.destructive:
            fp += 1
            t["false_alarms"] += 1
            false_alarms.append(f"case {case.id} ({case.task}/{case.variant}/{case.style}): reported {reported}")
        elif case.expected == "destructive":
            fn += 1
        else:
            tn += 1

    recall = dropped_found / dropped_total if dropped_total else 1.0
    precision = tp / (tp + fp) if tp + fp else 1.0
    lines = [
        f"{len(cases)} transitions, {len(TASKS)} task kinds; variants: "
        + ", ".join(f"{k} {v}" for k, v in sorted(per_variant.items())),
        f"verdicts: {tp} true destructive, {fp} false destructive, {fn} missed destructive, {tn} true safe",
        f"recall of dropped non-regenerable bindings: {dropped_found}/{dropped_total} = {recall:.1%}",
        f"precision of the destructive verdict: {tp}/{tp + fp} = {precision:.1%}",
        "per task (cases, dropped bindings found/total, false alarms):",
    ]
    for task in TASKS:
        t = per_task[task]
        lines.append(f"  {task:<10} {t['cases']:>3} cases  {t['found']:>3}/{t['dropped']:<3} found  {t['false_alarms']} false alarms")
    lines += [f"  MISSED {m}" for m in misses[:20]] + [f"  FALSE ALARM {f}" for f in false_alarms[:20]]
    setattr(pytestconfig, "compaction_gate_corpus_report", lines)  # noqa: B010 - read by conftest.py
    print("\n" + "\n".join(lines))

    assert dropped_total > 100 and tp > 50 and tn > 50
    assert recall == 1.0, misses[:10]
    assert precision >= 0.95, false_alarms[:10]
