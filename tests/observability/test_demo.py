"""`compaction-gate demo` runs offline in the suite and its narrated output is asserted."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import aiohttp
import pytest

from proxy.cli import main
from proxy.demo import run_demo
from proxy.demo_story import DEMO_REVISION


async def test_demo_runs_offline_and_narrates_what_the_gate_did(loopback_only: list[Any]) -> None:
    out = io.StringIO()
    outcome = await run_demo(out=out)
    text = out.getvalue()
    assert text == outcome.report
    assert loopback_only and all(host == "127.0.0.1" for host in loopback_only)

    without, rest = text.split("1) Without the gate (policy: audit)")[1].split("2) With the gate (policy: default)")
    with_gate, recall = rest.split("3) With recall on demand (policy: recall)")
    # without the gate: what was compacted, what was dropped, the wrong rollback
    assert "compaction: 21 messages -> 2 (summarize, destructive)" in without
    assert (
        f"dropped:    {DEMO_REVISION} (alembic revision, not regenerable, "
        "from tool result of run_shell `alembic upgrade head` at message 2)" in without
    )
    assert "the gate:   warned and recorded an event; the request went upstream unchanged" in without
    invented = outcome.run_for("audit").story.rollback_revision
    assert invented and invented != DEMO_REVISION
    assert f"tripwire:   the next tool call used {invented}, never seen in this conversation" in without
    assert f"next action: alembic downgrade {invented}   ✗ WRONG" in without
    # with the gate: the contract, the appended binding, the right rollback
    assert f"the gate added a contract naming {DEMO_REVISION}" in with_gate
    assert "so the gate appended it verbatim" in with_gate
    assert "(summarize, safe: every required binding survived)" in with_gate
    assert "dropped:    nothing a later step needs" in with_gate
    assert f"next action: alembic downgrade {DEMO_REVISION}   ✓ the original revision" in with_gate
    # recall on demand: no contract, the summary loses the revision, the model recalls it
    assert f"summarization call: forwarded as is; the summary dropped {DEMO_REVISION}" in recall
    assert "compaction: 21 messages -> 2 (summarize, destructive)" in recall
    assert "offered the model a tool to recall it" in recall
    assert "recall:     the model called recall_compacted_context(spill_" in recall and "found) and asked the model again" in recall
    assert "the client sent one request and got one answer (2 upstream rounds, usage summed)" in recall
    assert f"next action: alembic downgrade {DEMO_REVISION}   ✓ the original revision" in recall
    assert [s.label for s in outcome.run_for("recall").story.steps].count("next action") == 1
    assert "Result: rollback without the gate wrong, with the gate correct, with recall on demand correct." in text
    last = text.strip().splitlines()
    assert last[-2].startswith("Dashboard: http://127.0.0.1:") and last[-2].endswith("/gate/")
    assert outcome.run_for("default").story.summary_kept_revision


async def test_keep_running_leaves_the_dashboard_up_until_stopped() -> None:
    stop = asyncio.Event()
    out = io.StringIO()
    task = asyncio.create_task(run_demo(out=out, keep_running=True, stop=stop))
    for _ in range(200):
        if "Press Ctrl-C" in out.getvalue():
            break
        await asyncio.sleep(0.05)
    url = next(line.split()[1] for line in out.getvalue().splitlines() if line.startswith("Dashboard:"))
    async with aiohttp.ClientSession() as session:
        async with session.get(url) as resp:
            assert resp.status == 200 and "compaction-gate" in await resp.text()
        async with session.get(url + "conversations") as resp:
            assert (await resp.json())["count"] == 1
    stop.set()
    outcome = await asyncio.wait_for(task, 10)
    assert outcome.run_for("default").story.rollback_correct


def test_cli_demo_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("compaction-gate demo: no API key, no network.")
    assert "Dashboard: http://127.0.0.1:" in out
