"""The probe corpora (``tests/corpus/probe``, ``probe2``, ``probe4`` and ``probe5``, see their READMEs):
transitions the gate does not all judge right yet. The level reached is a floor — a
change that judges fewer of them right, or raises a false alarm on more of the safe ones,
is a step back in how the rules generalise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.core.analysis import analyze
from proxy.core.dialects import from_any
from proxy.core.markers import default_markers

HERE = Path(__file__).parent
#: corpus -> (cases, verdicts right at least, false alarms at most), when each floor was
#: last raised (session 41: probe 85 of 87 with 2 false alarms of 36 safe transitions;
#: probe2, written in session 39 by someone reading only PRINCIPLES.md, 75 of 80 with 3
#: of 37 — it measured 52 of 80 on the rules as they were before it was read; probe4,
#: written in session 41 the same way, 66 of 80 with 12 of 38 — it measured 54 of 80 —
#: and 67 with 11 in session 42; probe5, written in session 42 the same way, scored
#: unworked at 25 of 40 with 8 of 20 safe; 31 with 5 in session 43).
FLOORS = {"probe": (87, 85, 2), "probe2": (80, 75, 3), "probe4": (80, 67, 11), "probe5": (40, 31, 5)}


@pytest.mark.parametrize("corpus", sorted(FLOORS))
def test_the_probe_corpus_does_not_regress(corpus: str) -> None:
    cases, at_least_right, at_most_false_alarms = FLOORS[corpus]
    folder = HERE / corpus
    labels = json.loads((folder / "labels.json").read_text())
    assert len(labels) == cases
    markers = default_markers()
    right = false_alarms = 0
    for lab in labels:
        before = json.loads((folder / f"{lab['case']}.before.json").read_text())
        after = json.loads((folder / f"{lab['case']}.after.json").read_text())
        destructive = analyze(from_any(before), from_any(after), markers=markers).destructive
        right += destructive == lab["destructive"]
        false_alarms += destructive and not lab["destructive"]
    print(f"{corpus} corpus: {right}/{len(labels)} verdicts right, {false_alarms} false alarms")
    assert right >= at_least_right
    assert false_alarms <= at_most_false_alarms
