"""The load benchmark runs end to end (tiny sizes): every target answers, every figure
the closing note quotes is produced. Timing figures themselves are not asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bench_load_runs_and_reports_every_target() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.load", "--agents", "1", "2", "--requests", "3", "--warmup", "1",
         "--sizes", "10", "30", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=True,
    ).stdout
    data = json.loads(out[out.index("\n{") + 1 :])
    assert set(data["latency"]) == {"1", "2"}
    for per_size in data["latency"].values():
        assert set(per_size) == {"10", "30"}
        for targets in per_size.values():
            assert set(targets) == {"direct", "bare", "gate-off", "gate"}
            for name, fig in targets.items():
                assert fig["p50"] > 0 and fig["p99"] >= fig["p50"] and fig["rps"] > 0
                if name != "direct":
                    assert fig["cpu"] > 0  # measured from /proc for every server process
    assert all(parse > 0 and track > 0 for parse, track in data["inprocess_cpu_s"].values())
    for n in ("1", "2"):
        assert f"{n} agents [target 1] at 10 messages" in out
        assert f"{n} agents [target 2] gate CPU per request at 30 / at 10 messages" in out
        assert f"{n} agents [target 2] gate's own CPU per request (gate - bare) at 30 / at 10 messages" in out


def test_bench_ab_compares_a_revision_with_the_working_tree() -> None:
    if subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT, capture_output=True).returncode:
        pytest.skip("bench.ab needs a git checkout (it builds the base revision with git worktree)")
    out = subprocess.run(
        [sys.executable, "-m", "bench.ab", "HEAD", "--agents", "1", "--size", "10", "--requests", "2",
         "--repeat", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=True,
    ).stdout
    assert "gate@HEAD" in out and "gate@working tree" in out and "bare" in out
    assert "working tree / base: added p50" in out
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "cg-ab-base" not in worktrees  # the base checkout is removed afterwards
