"""The wall time of a shared SQLite commit (``SharedSQLiteStore._commit``, the path of
``serve --workers N``), with the workers' checkpointing against SQLite's automatic one.

One process, its store's own writer thread bypassed (commits called directly): 8
conversations, each first committed with a 100-message history, then growing by one
message per commit (with a timeline entry, an event-log entry and a gate state, as a
request's commit carries). ``checkpoint: passive`` is what the store does (no automatic
checkpoint in a commit; a passive one every ``CHECKPOINT_EVERY`` commits on its own
thread); ``checkpoint: auto`` turns SQLite's automatic checkpoint (1000 pages) back on
for the writer's connection, as before. Interleaved in rounds, percentiles over all.

Run:  python -m bench.shared_commit [--commits 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.core.messages import Message, Part, make_message
from proxy.state.protocol import Commit
from proxy.state.records import ConversationRecord
from proxy.state.sqlite_shared import SharedSQLiteStore


async def _opened(path: Path) -> SharedSQLiteStore:
    store = SharedSQLiteStore(path)
    await store.open()
    return store


def run(mode: str, commits: int, workdir: Path) -> list[float]:
    """Seconds per commit after a warm-up of 200."""
    store = asyncio.run(_opened(workdir / f"{mode}-{secrets.token_hex(4)}.sqlite3"))
    store._local.conn = store._conn  # commits on this thread
    assert store._conn is not None
    if mode == "auto":
        store._conn.execute("PRAGMA wal_autocheckpoint=1000")
    etags: dict[str, str] = {}
    digests: dict[str, tuple[str, ...]] = {}
    times: list[float] = []
    for i in range(commits + 200):
        cid = f"c{i % 8}"
        old = digests.get(cid, ())
        msgs: tuple[Message, ...] = (
            tuple(make_message("user", (Part("text", f"history {cid} {j} " * 30),)) for j in range(100))
            if not old
            else (make_message("tool", (Part("tool_result", f"output {i} upload id upl_{i:08x} " * 10),)),)
        )
        rec = ConversationRecord(id=cid, tenant="t", namespace="t", created=0.0, last_seen=time.time())
        rec.digests = old + tuple(m.digest for m in msgs)
        rec.gate_state = {"protected": [{"value": f"v{j}", "kind": "upload_id"} for j in range(20)]}
        etag = secrets.token_hex(8)
        change = Commit(
            cid, "t", "t", etags.get(cid), etag, rec.meta_dict(), rec.last_seen, len(old),
            tuple(m.digest for m in msgs), msgs, (), ({"seq": i, "at": 0.0, "relation": "extend"},),
            log=({"kind": "observed", "conversation": cid},),
        )  # fmt: skip
        t0 = time.perf_counter()
        ok = store._commit(change).ok
        dt = time.perf_counter() - t0
        assert ok
        etags[cid], digests[cid] = etag, rec.digests
        if i >= 200:
            times.append(dt)
    store._local.conn = None
    asyncio.run(store.close())
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=1000, help="measured commits per round and mode (default 1000)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="cg-bench-commit-"))
    got: dict[str, list[float]] = {"passive": [], "auto": []}
    try:
        for _ in range(args.rounds):
            for mode in got:
                got[mode] += run(mode, args.commits, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{args.rounds} rounds x {args.commits} commits per mode; wall ms per commit")
    print(f"  {'checkpoint':10} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7} {'mean':>7}")
    for mode, ts in got.items():
        q = statistics.quantiles(ts, n=100)
        print(f"  {mode:10} {q[49] * 1e3:7.2f} {q[89] * 1e3:7.2f} {q[98] * 1e3:7.2f} {max(ts) * 1e3:7.2f} "
              f"{statistics.fmean(ts) * 1e3:7.2f}")  # fmt: skip
    a, p = statistics.fmean(got["auto"]), statistics.fmean(got["passive"])
    print(f"  mean auto / passive: {a / p:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
