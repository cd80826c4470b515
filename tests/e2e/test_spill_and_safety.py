"""Spill handles are tenant-scoped; gate errors never lose a request; a running proxy
keeps its policy when the file goes bad."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import openai
import pytest

from proxy.gate.spill import SpillStore
from tests.e2e import story
from tests.e2e.stack import GateStack

KEY_A = "sk-test-tenant-a"
KEY_B = "sk-test-tenant-b"


def _spill_policy(tmp_path: Path) -> str:
    p = tmp_path / "spill.yaml"
    p.write_text("extends: default\nname: spill\nactions:\n  destructive: spill\n")
    return str(p)


def test_spill_handle_is_readable_by_its_tenant_only(tmp_path: Path) -> None:
    stack = GateStack(_spill_policy(tmp_path), story.responder)
    try:
        agent = story.OpenAIAgent(openai.OpenAI(api_key=KEY_A, base_url=stack.openai_base_url, max_retries=0))
        agent.work(story.TASK)
        agent.compact(story.LOSSY_SUMMARY)
        raw = agent.client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=agent.messages + [{"role": "user", "content": story.ROLLBACK_ASK}], tools=[story.BASH_OPENAI]
        )
        assert raw.headers["x-compaction-gate-action"] == "spill"
        sent = stack.fake.model_requests()[-1].body.decode()
        m = re.search(r"spill_[A-Za-z0-9_-]{20,}", sent)
        assert m, sent
        handle = m.group(0)
        assert story.REVISION in sent  # the note lists the bindings next to the handle
        path = f"/gate/spill/{handle}"
        status, body = stack.get(path, {"Authorization": f"Bearer {KEY_A}"})
        assert status == 200 and story.REVISION in body["text"] and "alembic upgrade head" in body["text"]
        # another tenant's key, no key, x-api-key of another tenant, a guessed handle: all 404
        assert stack.get(path, {"Authorization": f"Bearer {KEY_B}"})[0] == 404
        assert stack.get(path, {"x-api-key": KEY_B})[0] == 404
        assert stack.get(path)[0] == 404
        assert stack.get("/gate/spill/spill_" + "A" * 32, {"Authorization": f"Bearer {KEY_A}"})[0] == 404
        # the owner may also authenticate the Anthropic way
        assert stack.get(path, {"x-api-key": KEY_A})[0] == 200
        ev = [e for e in stack.events() if e["kind"] == "compaction"][-1]
        assert ev["action"] == "spill"
    finally:
        stack.close()


def test_spill_store_ttl_size_and_unguessable_handles() -> None:
    now = [1000.0]
    store = SpillStore(max_records=2, clock=lambda: now[0])
    a = store.put("t1", "c", "x" * 100, ttl_seconds=10, max_bytes=10)
    assert a.truncated and a.text.startswith("x" * 10)
    b = store.put("t1", "c", "y", ttl_seconds=10, max_bytes=10)
    assert a.handle != b.handle and len(a.handle) > 30
    assert store.get("t2", a.handle) is None and store.get("anonymous", a.handle) is None
    assert store.get("t1", a.handle) is not None
    store.put("t1", "c", "z", ttl_seconds=10, max_bytes=10)
    assert store.get("t1", a.handle) is None  # evicted (max_records)
    now[0] += 11
    assert store.get("t1", b.handle) is None  # expired


class _Boom(Exception):
    pass


def _break_analysis(stack: GateStack) -> None:
    def boom(*a, **k):
        raise _Boom("internal")

    stack.gate._decide = boom  # type: ignore[method-assign]


def test_fail_open_forwards_untouched_and_records_the_error() -> None:
    stack = GateStack("default", story.responder)
    try:
        _break_analysis(stack)
        client = openai.OpenAI(api_key=KEY_A, base_url=stack.openai_base_url, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        assert raw.headers["x-compaction-gate-action"] == "none"
        sent = stack.fake.model_requests()[-1].json
        assert sent == {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        errs = stack.events(kind="gate_error")
        assert errs and errs[-1]["error"] == "_Boom" and errs[-1]["action"] == "none"
    finally:
        stack.close()


def test_fail_closed_refuses(tmp_path: Path) -> None:
    p = tmp_path / "closed.yaml"
    p.write_text("extends: default\non_error: closed\n")
    stack = GateStack(str(p), story.responder)
    try:
        _break_analysis(stack)
        client = openai.OpenAI(api_key=KEY_A, base_url=stack.openai_base_url, max_retries=2)
        with pytest.raises(openai.APIStatusError) as ei:
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        assert ei.value.status_code == 502
        assert ei.value.response.headers["x-should-retry"] == "false"
        assert stack.fake.model_requests() == []
    finally:
        stack.close()


def test_running_proxy_keeps_its_policy_when_the_file_goes_bad(tmp_path: Path) -> None:
    p = tmp_path / "live.yaml"
    p.write_text("extends: default\nname: live\nactions:\n  destructive: reinject\n")
    stack = GateStack(str(p), story.responder, watch=True)
    try:
        p.write_text("extends: default\nname: live\nactions:\n  destructive: reject\n  boom: 1\n")
        st = p.stat()
        os.utime(p, (st.st_atime + 5, st.st_mtime + 5))
        body = {}
        for _ in range(100):
            time.sleep(0.05)
            _, body = stack.get("/gate/policy")
            if body["last_error"]:
                break
        assert f"{p}:5: unknown key 'boom'" in body["last_error"]
        assert body["policy"]["destructive"] == "reinject"
        # and the old policy still acts: a lossy compaction is repaired, not refused
        agent = story.OpenAIAgent(openai.OpenAI(api_key=KEY_A, base_url=stack.openai_base_url, max_retries=0))
        agent.work(story.TASK)
        agent.compact(story.LOSSY_SUMMARY)
        calls = agent.next_action(story.ROLLBACK_ASK)
        assert story.rollback_target(calls[0][2]) == story.REVISION
    finally:
        stack.close()


def test_spilled_region_never_stores_secrets(tmp_path: Path) -> None:
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"

    orig = story.run_tool

    def leaky_tool(cmd: str) -> str:
        out = orig(cmd)
        return out + (f"\nGITHUB_TOKEN={secret}" if cmd.startswith("alembic upgrade") else "")

    stack = GateStack(_spill_policy(tmp_path), story.responder)
    try:
        story.run_tool = leaky_tool  # type: ignore[assignment]
        try:
            agent = story.OpenAIAgent(openai.OpenAI(api_key=KEY_A, base_url=stack.openai_base_url, max_retries=0))
            agent.work(story.TASK)
        finally:
            story.run_tool = orig  # type: ignore[assignment]
        agent.compact(story.LOSSY_SUMMARY)
        agent.next_action(story.ROLLBACK_ASK)
        sent = stack.fake.model_requests()[-1].body.decode()
        handle = re.search(r"spill_[A-Za-z0-9_-]{20,}", sent).group(0)
        status, body = stack.get(f"/gate/spill/{handle}", {"Authorization": f"Bearer {KEY_A}"})
        assert status == 200 and story.REVISION in body["text"]
        assert secret not in body["text"] and secret not in sent
        assert secret not in str(stack.events())
    finally:
        stack.close()


def test_spilled_regions_survive_a_restart_until_they_expire(tmp_path: Path) -> None:
    now = [1000.0]
    path = tmp_path / "state.spill.sqlite3"
    store = SpillStore(path=path, max_records=2, clock=lambda: now[0])
    a = store.put("t1", "cv_1", "alembic revision 4f2a9c1e7b3d", ttl_seconds=10, max_bytes=1000,
                  bindings=({"kind": "alembic_revision", "value": "4f2a9c1e7b3d"},))
    store.close()
    again = SpillStore(path=path, max_records=2, clock=lambda: now[0])  # a restarted proxy
    got = again.get("t1", a.handle)
    assert got is not None and got.to_json() == a.to_json()
    assert again.get("t2", a.handle) is None and again.get("anonymous", a.handle) is None
    assert again.get("t1", "spill_" + "A" * 32) is None
    # bounded on disk as in memory: the oldest beyond max_records go
    b = again.put("t1", "cv_1", "b", ttl_seconds=10, max_bytes=10)
    now[0] += 1
    c = again.put("t1", "cv_1", "c", ttl_seconds=10, max_bytes=10)
    again.close()
    third = SpillStore(path=path, max_records=2, clock=lambda: now[0])
    assert third.get("t1", a.handle) is None and third.get("t1", b.handle) is not None
    now[0] += 9.5  # 1010.5: b (until 1010) expired, c (until 1011) not yet
    assert third.get("t1", b.handle) is None and third.get("t1", c.handle) is not None
    third.close()


def test_the_served_gate_keeps_spills_beside_its_sqlite_state(tmp_path: Path) -> None:
    from proxy.config import ProxyConfig, StateSettings
    from proxy.gate.wiring import build_gate

    gate = build_gate(ProxyConfig(state=StateSettings(path=str(tmp_path / "state.sqlite3"))))
    assert gate.spill.path == tmp_path / "state.spill.sqlite3"
    memory = build_gate(ProxyConfig(state=StateSettings(backend="memory")))
    assert memory.spill.path is None
