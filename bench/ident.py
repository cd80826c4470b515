"""Identifier extraction on a large tool output (``python -m bench.ident``).

Times :func:`~proxy.core.identifiers.textscan.scan_text` over a 200 KB mixed tool output
(pytest lines, ``git log`` commits, JSON with UUIDs, terraform plans, prose) and a
cached re-extraction of 50 KB, each the median of ``--repeat`` runs, beside a baseline
measured in the same run: one pass of a single regular expression over the same text.
Speed is reported here, as a ratio, never asserted by a test
(tests/core/identifiers/test_ident_perf.py keeps what is not timing).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import time
from collections.abc import Callable

__all__ = ["main", "tool_output"]


def tool_output(size: int = 200_000, seed: int = 7) -> str:
    """A deterministic mixed tool output of exactly ``size`` characters."""
    rnd = random.Random(seed)
    hexs = lambda n: "".join(rnd.choice("0123456789abcdef") for _ in range(n))
    lines: list[str] = []
    total = 0
    while total < size:
        r = rnd.random()
        if r < 0.25:
            line = f"tests/test_{rnd.choice(['api', 'db', 'models'])}.py::test_case_{rnd.randint(1, 500)} PASSED [{rnd.randint(1, 100):3d}%]"
        elif r < 0.35:
            line = f"commit {hexs(40)}\nAuthor: Dev <dev@acme.io>\n    Fix upload handler (#{rnd.randint(1, 999)})"
        elif r < 0.45:
            line = json.dumps({"id": f"{hexs(8)}-{hexs(4)}-4{hexs(3)}-a{hexs(3)}-{hexs(12)}", "image": f"ghcr.io/acme/web:1.{rnd.randint(0, 9)}.{rnd.randint(0, 9)}", "status": "Running"})
        elif r < 0.5:
            line = f"  # aws_instance.web[{rnd.randint(0, 3)}] will be updated in-place (id = i-{hexs(17)})"
        else:
            line = " ".join(rnd.choice("the agent ran the migration and kept every value verbatim for the next step".split()) for _ in range(14))
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)[:size]


def _median(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ident", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (median; default 5)")
    args = parser.parse_args(argv)
    from proxy.core.identifiers import Catalog, Source, extract_text
    from proxy.core.identifiers.textscan import scan_text

    cat = Catalog.load_default()
    text = tool_output()
    scan_text(text, cat)  # warm-up: regex caches
    baseline_re = re.compile(r"[0-9a-f]{8,}")
    baseline = _median(lambda: list(baseline_re.finditer(text)), args.repeat)
    scan = _median(lambda: scan_text(text, cat), args.repeat)
    small = tool_output(50_000, seed=3)
    src = Source(4, "tool", "tool_result", tool_name="bash", command="cat out.log", mutating=False)
    extract_text(small, src)
    cached = _median(lambda: extract_text(small, src), args.repeat)
    n = len(scan_text(text, cat))
    print(f"baseline: one regex pass over 200 KB        {baseline * 1000:8.2f} ms")
    print(f"scan_text, 200 KB mixed tool output ({n} ids) {scan * 1000:8.2f} ms  ({scan / baseline:.1f}x baseline)")
    print(f"cached re-extraction, 50 KB                  {cached * 1000:8.2f} ms  ({cached / baseline:.2f}x baseline)")
    print(f"(medians of {args.repeat})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
