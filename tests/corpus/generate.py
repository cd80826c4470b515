"""A labelled corpus of history transitions, generated deterministically.

Each :class:`Case` is a before/after pair of request bodies (OpenAI chat or Anthropic
messages) with its ground truth by construction: which planted non-regenerable bindings
are no longer visible after the transition, hence the expected verdict.

Eight task kinds (database migration, multipart upload, git history surgery, k8s
rollout, terraform apply, payment refund, queue consumer offsets, file refactor), nine
compaction styles plus in-place masking, and realistic noise: read-only listings with
regenerable ids, prose, dates, versions, benign compactions that keep every binding,
compactions that drop only regenerable ids, bindings restated in a kept message, plain
appends.

Write the corpus as files for ``compaction-gate check``::

    python -m tests.corpus.generate --out /tmp/corpus   # case-NNN.before.json / .after.json / .truth.json
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.conversations import (
    MASK_STYLES,
    STYLES,
    TASKS,
    Compaction,
    ToolCall,
    Turn,
    benign_truncation,
    build_task,
    compact,
)

SUMMARY_STYLES = tuple(s for s in STYLES if s != "truncation")

#: Variant → weight. Destructive and benign kinds are roughly balanced.
VARIANTS: dict[str, int] = {
    "benign_summary": 5,
    "regenerable_only": 2,
    "restated_elsewhere": 2,
    "append": 2,
    "drop_one": 5,
    "drop_some": 3,
    "drop_all": 2,
    "altered": 2,
    "truncation": 2,
    "mask": 2,
}


@dataclass(frozen=True)
class Case:
    id: int
    task: str
    variant: str
    style: str
    dialect: str
    before: dict[str, Any]
    after: dict[str, Any]
    #: Planted non-regenerable values no longer visible verbatim after the transition.
    dropped: frozenset[str]

    @property
    def expected(self) -> str:
        return "destructive" if self.dropped else "safe"

    def truth_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task": self.task,
            "variant": self.variant,
            "style": self.style,
            "dialect": self.dialect,
            "expected_verdict": self.expected,
            "dropped": sorted(self.dropped),
        }


def _damage(value: str) -> str | None:
    """A realistic damaged copy: a truncated hash, an absolute path made relative."""
    if value.startswith("/") and value.count("/") >= 3:
        return value.split("/", 3)[3]
    hexpart = value.rsplit(":", 1)[-1]
    if len(hexpart) >= 20 and all(c in "0123456789abcdef" for c in hexpart):
        return value[: len(value) - len(hexpart) + 7]
    if len(value) >= 24:
        return value[: len(value) // 2]
    return None


def _noise_turns(rng: random.Random) -> list[Turn]:
    """Appended turns: prose with dates and versions, a read-only listing."""
    cid = f"call_noise_{rng.randrange(10**8)}"
    return [
        Turn("user", f"Thanks. Note the release train v{rng.randint(1, 9)}.{rng.randint(0, 20)} ships on 2024-06-{rng.randint(10, 28)}."),
        Turn("assistant", "Understood, checking the workspace.", calls=(ToolCall(cid, "bash", {"command": "ls docs/"}),)),
        Turn("tool", "docs/RUNBOOK.md\ndocs/CHANGELOG.md\ndocs/adr/0007-use-alembic.md", call_id=cid, tool_name="bash"),
    ]


def _one(i: int) -> Case:
    rng = random.Random(f"compaction-gate-corpus:{i}")
    task = TASKS[i % len(TASKS)]
    conv = build_task(task, seed=1000 + i, filler=rng.randint(0, 4))
    dialect = "openai" if (i // len(TASKS)) % 2 == 0 else "anthropic"
    variant = rng.choices(list(VARIANTS), weights=list(VARIANTS.values()))[0]
    style = rng.choice(SUMMARY_STYLES)
    keep = rng.randint(0, 8)
    binds = [b.value for b in conv.bindings]
    c: Compaction

    if variant == "benign_summary":
        c = compact(conv, style, keep_last=keep)
    elif variant == "regenerable_only":
        if rng.random() < 0.5:
            style = "truncation"
            c = benign_truncation(conv)
        else:  # summaries never restate listings: every regenerable id of the span goes
            c = compact(conv, style, keep_last=0)
    elif variant == "restated_elsewhere":
        # the summary drops a binding, but a kept assistant message states it verbatim
        b = rng.choice(conv.bindings)
        conv = conv.then(Turn("assistant", f"For the record: {b.phrase or b.value}."))
        c = compact(conv, style, drop=[b.value], keep_last=max(1, min(keep, 3)))
        if c.before.turns[-1].text not in {t.text for t in c.after.turns}:  # pragma: no cover - keep_last >= 1
            raise AssertionError("restatement must be kept")
    elif variant == "append":
        style = "none"
        base = conv if rng.random() < 0.5 else compact(conv, rng.choice(SUMMARY_STYLES), drop="all").after
        after = base.then(*_noise_turns(rng))
        return Case(i, task, variant, style, dialect, base.body(dialect), after.body(dialect), frozenset())  # type: ignore[arg-type]
    elif variant == "drop_one":
        c = compact(conv, style, drop=[rng.choice(binds)], keep_last=min(keep, 3))
    elif variant == "drop_some":
        c = compact(conv, style, drop=rng.sample(binds, rng.randint(1, len(binds))), keep_last=min(keep, 3))
    elif variant == "drop_all":
        c = compact(conv, style, drop="all", keep_last=min(keep, 3))
    elif variant == "altered":
        damageable = [(v, d) for v in binds if (d := _damage(v)) is not None]
        if damageable:
            v, d = rng.choice(damageable)
            c = compact(conv, style, alter={v: d}, keep_last=min(keep, 3))
        else:
            c = compact(conv, style, drop=[rng.choice(binds)], keep_last=min(keep, 3))
    elif variant == "truncation":
        style = "truncation"
        c = compact(conv, "truncation", keep_last=rng.randint(2, 10))
    else:  # mask
        style = rng.choice(MASK_STYLES)
        c = compact(conv, style, keep_last=rng.randint(0, 8))
    return Case(i, task, variant, style, dialect, *c.bodies(dialect), c.dropped)  # type: ignore[arg-type]


def generate(n: int = 264) -> list[Case]:
    """``n`` cases (deterministic): case ``i`` is task ``TASKS[i % 8]``."""
    return [_one(i) for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("-n", type=int, default=264)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for case in generate(args.n):
        stem = args.out / f"case-{case.id:03d}"
        Path(f"{stem}.before.json").write_text(json.dumps(case.before, indent=1), encoding="utf-8")
        Path(f"{stem}.after.json").write_text(json.dumps(case.after, indent=1), encoding="utf-8")
        Path(f"{stem}.truth.json").write_text(json.dumps(case.truth_json(), indent=1), encoding="utf-8")
    print(f"wrote {args.n} cases to {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

