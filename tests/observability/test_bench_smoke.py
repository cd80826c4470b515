"""The load benchmark runs end to end (tiny sizes): every target answers, every figure
the closing note quotes is produced. Timing figures themselves are not asserted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.load import cpu_split  # noqa: E402


def _bench(*args: str) -> tuple[str, dict]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.load", *args, "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=True,
    ).stdout
    return out, json.loads(out[out.index("\n{") + 1 :])


def test_bench_load_runs_and_reports_every_target() -> None:
    out, data = _bench("--agents", "1", "2", "--requests", "3", "--warmup", "1", "--sizes", "10", "30")
    split = cpu_split()
    if split is None:
        assert data["setup"]["server_cpus"] is None
    else:  # pinned by default: the servers under test never share a CPU with the harness
        assert set(data["setup"]["harness_cpus"]) == split[0]
        assert set(data["setup"]["server_cpus"]) == split[1]
        assert f"servers on CPUs {sorted(split[1])}" in out
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


def test_cpu_split_gives_the_harness_and_the_servers_disjoint_halves() -> None:
    split = cpu_split()
    mine = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if len(mine) < 2:
        assert split is None
        return
    assert split is not None
    harness, servers = split
    assert harness and servers and not harness & servers
    assert harness | servers == mine
    assert len(harness) <= len(servers) <= len(harness) + 1


def test_bench_unpinned_with_a_model_latency() -> None:
    _, data = _bench("--agents", "2", "--requests", "3", "--warmup", "1", "--sizes", "10",
                     "--no-pin", "--gap", "0", "--model-latency", "40")
    assert data["setup"] == {"harness_cpus": None, "server_cpus": None, "gap_ms": 0.0, "model_latency_ms": 40.0}
    for name, fig in data["latency"]["2"]["10"].items():
        assert fig["p50"] >= 0.040, name  # every request waited for the "model"


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


def test_bench_patterns_plays_every_pattern_streamed_and_not() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.patterns", "--agents", "2", "--sizes", "10", "20", "--requests", "2",
         "--warmup", "1", "--no-litellm", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    cells = json.loads(out[out.index("\n{") + 1 :])["cells"]
    keys = {f"{p}{s}, {n} messages, 2 agents" for p in ("echo", "replaced", "reserialised")
            for s in ("", " streamed") for n in (10, 20)}
    assert set(cells) == keys
    for fig in cells.values():
        assert set(fig) == {"direct", "bare", "gate"}
        for name, r in fig.items():
            assert r["rps"] > 0 and r["p99"] >= r["p50"] > 0
            if name != "direct":
                assert r["cpu"] > 0 and r["rss_mb"] > 0
            assert r["first_max"] > 0
    assert "replaced streamed, 20 messages, 2 agents" in out.split("summary")[1]


def test_bench_memory_reports_rss_per_conversation_and_the_account() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.memory", "--conversations", "30", "--warmup", "10", "--every", "10",
         "--size", "20", "--max-memory-mb", "1", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    result = json.loads(out[out.index("\n{") + 1 :])
    assert result["failures"] == 0
    rows = result["rows"]
    assert [r["conversations"] for r in rows] == [20, 30]
    for r in rows:
        assert r["gate_mb"] > 0 and r["bare_mb"] > 0 and r["disk_mb"] > 0
        mem = r["tracked"]
        assert mem["limit"] == 2**20 and 0 < mem["bytes"] <= mem["limit"]
    assert "goal: <= 30 KB RSS per tracked 20-message conversation" in out


def test_bench_firstsight_reports_loop_time_against_bare() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.firstsight", "--size", "40", "--rounds", "2", "--settle", "50", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    result = json.loads(out[out.index("\n{") + 1 :])
    assert result["size"] == 40
    assert set(result["results"]) == {"bare", "gate"}
    for name, r in result["results"].items():
        assert r["latency_max"] >= r["latency_p50"] > 0
        assert r["loop_max"] >= r["loop_p50"] > 0
        assert len(result["raw"][name]["loop"]) == 2
    assert "gate/bare: latency p50" in out and "loop CPU p50" in out


@pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("callgrind_control") is None,
                    reason="needs valgrind (callgrind)")
def test_bench_instructions_counts_the_served_gate_per_request() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.instructions", "--patterns", "echo", "replaced", "--size", "6",
         "--agents", "2", "--requests", "2", "--warmup", "1", "--settle", "2", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=True,
    ).stdout
    data = json.loads(out[out.index("\n{") + 1 :])["instructions_per_request"]
    assert set(data) == {"echo", "replaced"}
    # a request through the gate is millions of instructions, not a dump that was missed
    assert all(n > 1e6 for n in data.values())
    assert "M instructions per request" in out
