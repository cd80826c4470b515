"""The held-out corpus (:mod:`tests.corpus.heldout`): task families, compaction styles and
dialects the shared dev corpus does not have, labelled by PRINCIPLES.md. Scored like
the shared scorer does: value recall must be 100 %, verdict precision at least 98 %, the
false-alarm rate at most 2 %. Metrics go to the terminal summary."""

from __future__ import annotations

from collections import Counter

import pytest

from proxy.core.analysis import analyze
from proxy.core.dialects import from_any
from proxy.core.markers import default_markers
from tests.corpus.conftest import REPORT_ATTR
from tests.corpus.heldout import (
    DIALECTS,
    FAMILIES,
    FAMILIES_B,
    FAMILIES_C,
    FAMILIES_D,
    STYLES,
    STYLES_D,
    HeldOutCase,
    generate,
)


def _listed(a_json: dict[str, object]) -> str:
    """What the scorer reads: every value under a dropped/altered key."""
    out: list[str] = []
    for key in ("dropped", "altered"):
        for b in a_json.get(key, []):  # type: ignore[union-attr]
            out.append(str(b["value"]))  # type: ignore[index]
    return " ".join(out)


def _score(cases: list[HeldOutCase]) -> tuple[dict[str, float], list[str]]:
    markers = default_markers()
    tp = fp = tn = fn = caught = total = 0
    misses: list[str] = []
    for c in cases:
        a = analyze(from_any(c.before), from_any(c.after), markers=markers)
        listed = _listed(a.to_json())
        pred = a.destructive
        if pred and c.destructive:
            tp += 1
        elif pred:
            fp += 1
            misses.append(f"false alarm {c.case} {c.family}/{c.style}/{c.dialect}: {[b.value for b in a.required_missing]}")
        elif c.destructive:
            fn += 1
            misses.append(f"missed {c.case} {c.family}/{c.style}/{c.dialect}: {list(c.dropped)}")
        else:
            tn += 1
        for v in c.dropped:
            total += 1
            if v in listed:
                caught += 1
            else:
                misses.append(f"value {c.case} {c.family}/{c.style}/{c.dialect}: {v} not listed")
    m = {
        "recall": caught / total if total else 1.0,
        "precision": tp / (tp + fp) if tp + fp else 1.0,
        "false_alarm": fp / (fp + tn) if fp + tn else 0.0,
        "n": len(cases),
        "destructive": tp + fn,
        "missed": fn,
    }
    return m, misses


@pytest.mark.parametrize("batch,n", [("a", 340), ("b", 216), ("c", 240), ("d", 280)])
def test_heldout_corpus(batch: str, n: int, pytestconfig: pytest.Config) -> None:
    cases = generate(n, batch)
    fams = {"a": FAMILIES, "b": FAMILIES_B, "c": FAMILIES_C, "d": FAMILIES_D}[batch]
    assert {c.family for c in cases} == set(fams)
    assert {c.style for c in cases} == set(STYLES_D if batch == "d" else STYLES) and {c.dialect for c in cases} == set(DIALECTS)
    m, misses = _score(cases)
    kinds = Counter(c.destructive for c in cases)
    line = (
        f"held-out batch {batch}: recall={m['recall']:.3f} precision={m['precision']:.3f} "
        f"false_alarm={m['false_alarm']:.3f} (n={m['n']}, {kinds[True]} destructive, {kinds[False]} safe)"
    )
    lines = list(getattr(pytestconfig, REPORT_ATTR, None) or []) + [line] + [f"  {x}" for x in misses[:10]]
    setattr(pytestconfig, REPORT_ATTR, lines)
    assert kinds[True] > n // 4 and kinds[False] > n // 6
    assert m["recall"] == 1.0 and m["missed"] == 0, misses[:10]
    assert m["precision"] >= 0.98 and m["false_alarm"] <= 0.02, misses[:10]


def test_labels_follow_the_principles_not_the_gate() -> None:
    """Spot checks of the ground truth itself: the rule recorded for each value."""
    from tests.corpus.heldout import _Fam

    _, labels = FAMILIES["payment_intent"](_Fam("payment_intent", 1))
    rules = {lb.rule for lb in labels if lb.required}
    assert rules == {"2a", "2c"} and any(lb.secret for lb in labels)
    _, labels = FAMILIES["noise_readonly"](_Fam("noise_readonly", 1))
    assert labels and not any(lb.required for lb in labels)
    _, labels = FAMILIES["dns_cli"](_Fam("dns_cli", 1))
    assert [lb.rule for lb in labels if lb.required] == ["2b", "2a"]
