"""Everything a real ``compaction-gate serve`` writes — stderr (access log included),
its SQLite state and spill store with their ``-wal`` files, ``/gate/*`` JSON and
``/metrics`` — holds none of the key-shaped strings it was sent: in headers, in bodies
(tool output in a region that is spilled), in URL paths and queries, and in malformed
header lines that aiohttp's parser refuses."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import aiohttp
import openai

from tests.e2e import story
from tests.support.fake_upstream import FakeUpstream
from tests.support.raw_http import request_bytes, send_raw
from tests.support.serve_process import start_serve

API_KEY = "sk-live-GREPkey7Hq2Zr9WmX4cVt8NbL1"
SECRETS = {
    "api key": API_KEY,
    "anthropic key": "sk-ant-api03-GREPant5Kd8Rw2Xq7Lm3Vb9Tz6Yh4Nf",
    "github token": "ghp_GREPgh9Qw3Er7Ty1Ui5Op2As6Df8Gh4Jk0Lz",
    "aws key": "AKIA4QXR7ZB2GREP6YWD",
    "gitlab token": "glpat-GREPgl4Mn8Bv2Cx6Za1Sd5F",
    "path key": "sk-live-GREPpath3Jk7Lp1Qw5Er9Ty2Ui",
    "query key": "AIzaSyGREPq8Wd3Fg7Hj1Kl5Zx9Cv2Bn6Mq4Rt0",
    "malformed header key": "sk-live-GREPbad6Yu1Io5Pa9Sd3Fg7Hj",
    "long header key": "sk-live-GREPlong2Kl6Zx0Cv4Bn8Mq3Wd",
}


def _leaks(blob: bytes) -> list[str]:
    found = []
    for name, secret in SECRETS.items():
        for needle in (secret, secret[-16:]):  # the whole key, or its distinctive tail
            if needle.encode() in blob:
                found.append(f"{name}: {needle}")
    return found


async def test_nothing_the_proxy_wrote_holds_a_secret(tmp_path: Path) -> None:
    fake = FakeUpstream(story.responder)
    await fake.start()
    (tmp_path / "spill.yaml").write_text("extends: default\nname: spill\nactions:\n  destructive: spill\n")
    config = {
        "upstreams": [
            {"name": "openai", "base_url": fake.openai_base_url, "dialect": "openai"},
            {"name": "anthropic", "base_url": fake.anthropic_base_url, "dialect": "anthropic", "models": ["claude-*"]},
        ],
        "state": {"path": str(tmp_path / "state" / "state.sqlite3")},
        "policy": str(tmp_path / "spill.yaml"),
    }
    serve = await start_serve(config, tmp_path)
    try:
        # 1. an agent whose tool output carries secrets; its history is compacted and the
        #    lost region spilled (then fetched back with its handle)
        orig = story.run_tool

        def leaky_tool(cmd: str) -> str:
            out = orig(cmd)
            if cmd.startswith("alembic upgrade"):
                out += f"\nGITHUB_TOKEN={SECRETS['github token']}\naws_access_key_id = {SECRETS['aws key']}"
            return out

        def agent_run() -> str:
            story.run_tool = leaky_tool  # type: ignore[assignment]
            try:
                client = openai.OpenAI(api_key=API_KEY, base_url=serve.url + "/v1", max_retries=0,
                                       default_headers={"x-custom-token": SECRETS["gitlab token"]})
                agent = story.OpenAIAgent(client)
                agent.work(story.TASK + f" (deploy key {SECRETS['anthropic key']})")
            finally:
                story.run_tool = orig  # type: ignore[assignment]
            agent.compact(story.LOSSY_SUMMARY)
            agent.next_action(story.ROLLBACK_ASK)
            return fake.model_requests()[-1].body.decode()

        sent = await asyncio.to_thread(agent_run)
        handle = re.search(r"spill_[A-Za-z0-9_-]{20,}", sent)
        assert handle is not None, "the compaction was not spilled"

        # 2. keys in URL paths and queries, and in malformed header lines
        async with aiohttp.ClientSession() as s:
            async with s.get(serve.url + f"/v1/files/{SECRETS['path key']}/content",
                             headers={"authorization": f"Bearer {API_KEY}"}) as r:
                await r.read()
            async with s.get(serve.url + f"/v1/models?key={SECRETS['query key']}") as r:
                await r.read()
            async with s.get(serve.url + f"/{SECRETS['path key']}") as r:
                await r.read()
        bad = SECRETS["malformed header key"].encode()
        long_key = SECRETS["long header key"].encode()
        for raw in (
            b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + bad + b"\rX\r\n\r\n",
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + bad + b"\x00\r\n\r\n",
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + long_key
            + b"k" * 9000 + b"\r\n\r\n",
            b"G@T /v1/" + bad + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        ):
            resp = await asyncio.to_thread(send_raw, serve.url, raw)
            assert resp.status in (400, 431) and not _leaks(resp.raw)
        resp = await asyncio.to_thread(send_raw, serve.url, request_bytes(
            "POST", "/v1/chat/completions",
            {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"}, b"{not json"))
        assert resp.status == 400

        # 3. everything the proxy serves about itself
        served = b""
        async with aiohttp.ClientSession() as s:
            async with s.get(serve.url + "/gate/spill/" + handle.group(0),
                             headers={"authorization": f"Bearer {API_KEY}"}) as r:
                spilled = await r.read()
                assert r.status == 200 and story.REVISION.encode() in spilled
                served += spilled
            conversations = []
            for path in ("/gate/events", "/gate/conversations", "/gate/policy", "/metrics"):
                async with s.get(serve.url + path) as r:
                    assert r.status == 200, path
                    body = await r.read()
                    served += body
                    if path == "/gate/conversations":
                        conversations = [c["id"] for c in json.loads(body)["conversations"]]
            assert conversations
            for cid in conversations:
                async with s.get(serve.url + f"/gate/conversations/{cid}") as r:
                    served += await r.read()
        assert not _leaks(served)
    finally:
        code = await serve.stop(timeout=60)
        await fake.close()
    assert code == 0
    stderr = b"".join(serve.stderr)
    assert b'"msg": "request"' in stderr and b'"msg": "malformed request"' in stderr
    assert not _leaks(stderr), _leaks(stderr)
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.name not in ("config.yaml", "spill.yaml")]
    assert any(p.name.endswith(".sqlite3") for p in files) and any("spill" in p.name for p in files), files
    for p in files:
        assert not _leaks(p.read_bytes()), (p, _leaks(p.read_bytes()))
