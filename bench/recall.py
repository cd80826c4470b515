"""What the recall tool costs the proxy, against a re-injection, in one run.

The migration story of ``tests/e2e/story.py`` through the real gate with the real
``openai`` SDK, once per policy and repeat, interleaved (so load from anything else on
the machine hits every variant alike):

- ``reinject`` — the default policy: the compacted request gets the dropped revision
  re-injected after the summary (one upstream round);
- ``recall`` — ``destructive: spill``: the request is offered the recall tool, the
  scripted model calls it, the gate reads the spill store, asks upstream again and
  merges the rounds (two upstream rounds);
- ``offered`` — the same spill policy, a request that is offered the tool and does not
  use it (one round: the tool's cost when nothing is recalled).

Each figure is the gate's own time for that one request (``x-compaction-gate-overhead-ms``:
the time in the proxy minus the time waiting for upstream, every round included), as a
median over the repeats, and its ratio to ``reinject`` measured in the same run. JSON
requests only: a stream's headers (and that figure) go out before its rounds are run.

Run:  python -m bench.recall [--repeat 15]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openai

from tests.e2e import story
from tests.e2e.recall_support import SPILL, Sent, agent_for, ask
from tests.e2e.stack import GateStack

VARIANTS = ("reinject", "recall", "offered")


def _one(variant: str, tmp: Path) -> float:
    policy = "default"
    if variant != "reinject":
        path = tmp / "spill.yaml"
        path.write_text(SPILL)
        policy = str(path)
    stack = GateStack(policy, story.recalling())
    try:
        agent = agent_for("openai", stack, False, Sent(), key="sk-bench-recall")
        agent.work(story.TASK)
        agent.compact(story.LOSSY_SUMMARY)
        question = "What is the state of the service?" if variant == "offered" else story.ROLLBACK_ASK
        n = len(stack.fake.model_requests())
        turn = ask(agent, question)
        rounds = len(stack.fake.model_requests()) - n
        assert rounds == (2 if variant == "recall" else 1), (variant, rounds)
        if variant != "offered":
            assert story.rollback_target(turn.calls[0][1]) == story.REVISION, variant
        return float(turn.headers["x-compaction-gate-overhead-ms"])
    finally:
        stack.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    got: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(args.repeat):
            order = list(VARIANTS)
            rng.shuffle(order)
            for v in order:
                got[v].append(_one(v, Path(d)))
    base = statistics.median(got["reinject"])
    print(f"gate overhead of the request after the compaction (JSON, median of {args.repeat}, "
          f"openai {openai.__version__})")
    for v in VARIANTS:
        med = statistics.median(got[v])
        print(f"  {v:9} {med:7.2f} ms   x{med / base:5.2f} of reinject")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
