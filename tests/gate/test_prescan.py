"""A large request that is analysed against the history it changes has its long texts
scanned for identifiers in the request worker first (issue 16): the analysis then finds
the same matches in the scan cache and scans none of those texts on the event loop."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.core.analysis import analyze
from proxy.core.identifiers import extract
from proxy.core.identifiers.extract import ScanCache, extract_snapshot, long_scans, scan_text
from proxy.core.messages import Part, Snapshot, make_message
from proxy.gate import prescan as prescan_mod
from proxy.state import offload

SHA = "9fceb02d0ae598e95dc970b74767f19372d61af8"
UUID = "3f2504e0-4f89-11d3-9a0c-0305e82c3301"
N = 3000  # "long" in these tests (the gate's threshold is patched down to it)


def _snapshots() -> tuple[Snapshot, Snapshot]:
    call = Part("tool_call", '{"cmd": "git log"}', tool_name="bash", tool_call_id="c1")
    result = Part("tool_result", f"commit {SHA}\n" + "log line\n" * (N // 9 + 1), tool_call_id="c1")
    user = make_message("user", [Part("text", f"upload {UUID} " + "x" * N)])
    before = Snapshot("openai", "", (
        user,
        make_message("assistant", [call]),
        make_message("tool", [result]),
        make_message("assistant", [Part("text", "done " + "y" * N + f" {SHA}")]),
    ))
    after = Snapshot("openai", "", (user,))  # the history left: a fork of the first request
    return before, after


def _scanned_long(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Lengths of the long texts scanned from now on (on this thread)."""
    seen: list[int] = []
    real = extract.scan_text

    def spy(text: str, *args: Any) -> Any:
        if len(text) >= N:
            seen.append(len(text))
        return real(text, *args)

    monkeypatch.setattr(extract, "scan_text", spy)
    return seen


def test_long_scans_name_the_keys_extraction_uses() -> None:
    before, _ = _snapshots()
    cache = ScanCache()
    jobs = long_scans(before, cache=cache, min_chars=N)
    assert len(jobs) == 3  # the user text, the tool result (with its call's context), the reply
    assert {len(t) for _, t, _ in jobs} == {len(p.text) for m in before.messages for p in m.parts if len(p.text) >= N}
    assert any(ctx for _, _, ctx in jobs)  # the tool result's context: its call
    for key, text, ctx in jobs:
        cache.put(key, scan_text(text, None, ctx))
    assert long_scans(before, cache=cache, min_chars=N) == []  # all there now
    assert extract_snapshot(before, cache=cache) == extract_snapshot(before, cache=None)


def test_prescan_fills_the_cache_and_the_analysis_scans_no_long_text(monkeypatch: pytest.MonkeyPatch) -> None:
    before, after = _snapshots()
    cache = ScanCache()
    monkeypatch.setattr(extract, "DEFAULT_CACHE", cache)
    monkeypatch.setattr(prescan_mod, "LONG_TEXT", N)
    ran: list[int] = []

    async def worker(fn: Any, *args: Any) -> Any:  # the worker process, in-process
        ran.append(len(args[0]))
        return fn(*args)

    monkeypatch.setattr(offload, "run", worker)
    expected = analyze(before, after, quick_survival=True, catalog=None)
    cache.clear()
    obs = SimpleNamespace(previous=before, current=after, relation="fork")
    assert asyncio.run(prescan_mod.prescan(obs, None, cache)) == 3  # type: ignore[arg-type]
    assert len(ran) == 3
    seen = _scanned_long(monkeypatch)
    got = analyze(before, after, quick_survival=True, catalog=None)
    assert seen == []  # nothing long scanned here
    assert got == expected


def test_no_prescan_for_an_extension_nor_without_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    before, after = _snapshots()
    cache = ScanCache()
    monkeypatch.setattr(prescan_mod, "LONG_TEXT", N)

    async def no_worker(fn: Any, *args: Any) -> None:
        return None

    monkeypatch.setattr(offload, "run", no_worker)
    extend = SimpleNamespace(previous=before, current=after, relation="extend")
    assert asyncio.run(prescan_mod.prescan(extend, None, cache)) == 0  # type: ignore[arg-type]
    fork = SimpleNamespace(previous=before, current=after, relation="fork")
    assert asyncio.run(prescan_mod.prescan(fork, None, cache)) == 0  # type: ignore[arg-type]
    assert len(long_scans(before, cache=cache, min_chars=N)) == 3  # left to the analysis, as before
