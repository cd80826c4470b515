from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

import pytest

from proxy.policy import PolicyHolder

GOOD = "extends: default\nname: live\nactions:\n  destructive: reinject\n"
GOOD2 = "extends: default\nname: live\nactions:\n  destructive: reject\n"
BAD = "extends: default\nname: live\nactions:\n  destructive: reject\n  colour: blue\n"


def _touch_later(p: Path, text: str) -> None:
    p.write_text(text)
    st = p.stat()
    os.utime(p, (st.st_atime + 2, st.st_mtime + 2))


def test_reload_with_bad_file_keeps_old_policy_and_says_why(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    p = tmp_path / "live.yaml"
    p.write_text(GOOD)
    h = PolicyHolder(str(p))
    assert h.policy.destructive == "reinject"
    _touch_later(p, BAD)
    with caplog.at_level(logging.ERROR, logger="compaction_gate.policy"):
        res = h.check_files()
    assert res is not None and not res.ok
    assert h.policy.destructive == "reinject"
    assert f"{p}:5: unknown key 'colour'" in (h.last_error or "")
    assert f"{p}:5" in caplog.text and "keeping policy 'live'" in caplog.text
    assert h.check_files() is None  # reported once, not on every poll
    _touch_later(p, GOOD2)
    res = h.check_files()
    assert res is not None and res.ok and res.changed
    assert h.policy.destructive == "reject" and h.last_error is None


def test_watch_parent_of_extends_chain(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("extends: default\nactions:\n  destructive: warn\n")
    child = tmp_path / "child.yaml"
    child.write_text("extends: base.yaml\n")
    h = PolicyHolder(str(child))
    assert h.policy.destructive == "warn"
    _touch_later(base, "extends: default\nactions:\n  destructive: spill\n")
    assert h.check_files() is not None
    assert h.policy.destructive == "spill"


async def test_file_watch_and_sighup(tmp_path: Path) -> None:
    p = tmp_path / "live.yaml"
    p.write_text(GOOD)
    h = PolicyHolder(str(p))
    h.start(interval=0.05)
    try:
        _touch_later(p, GOOD2)
        for _ in range(100):
            await asyncio.sleep(0.02)
            if h.policy.destructive == "reject":
                break
        assert h.policy.destructive == "reject"
        # SIGHUP reloads even when the mtime did not change
        gen = h.generation
        p.write_text(GOOD)
        os.kill(os.getpid(), signal.SIGHUP)
        for _ in range(100):
            await asyncio.sleep(0.02)
            if h.generation > gen:
                break
        assert h.policy.destructive == "reinject"
    finally:
        await h.stop()
