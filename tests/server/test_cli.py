"""The command line: subcommand registry, serve flags, config errors, a real process."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from proxy import cli
from proxy.config import ProxyConfig, ServerSettings, Upstream
from proxy.server.app import create_app
from proxy.server.runner import start_server
from tests.support.fake_upstream import FakeUpstream

REPO = Path(__file__).resolve().parents[2]


def test_no_subcommand_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "serve" in capsys.readouterr().err


def test_serve_flags_parse() -> None:
    parser = cli.build_parser("serve")
    args = parser.parse_args(
        [
            "serve",
            "--config",
            "c.yaml",
            "--host",
            "0.0.0.0",
            "--port",
            "9",
            "--upstream",
            "https://x/v1",
            "--policy",
            "strict",
        ]
    )
    assert (args.config, args.host, args.port, args.upstream, args.policy) == (
        "c.yaml",
        "0.0.0.0",
        9,
        "https://x/v1",
        "strict",
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--port", "70000"])


def test_bad_config_exits_2_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("server:\n  hots: x\n")
    assert cli.main(["serve", "--config", str(path)]) == 2
    assert f"{path}:2: unknown key 'hots' in server" in capsys.readouterr().err


def test_bad_upstream_flag_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", "--upstream", "nonsense"]) == 2
    assert "base_url" in capsys.readouterr().err


def test_registering_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("word")

    def run(args: argparse.Namespace) -> int:
        print(f"hello {args.word}")
        return 7

    cli.register_command(cli.Command("hello", "say hello", add_arguments, run))
    try:
        assert cli.main(["hello", "world"]) == 7
        assert capsys.readouterr().out == "hello world\n"
    finally:
        del cli.COMMANDS["hello"]


async def test_real_process_serves_and_stops_on_sigterm(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COMPACTION_GATE_CONFIG"}
    env["PYTHONPATH"] = str(REPO)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        "serve",
        "--port",
        "0",
        "--upstream",
        fake_upstream.openai_base_url,
        cwd=str(tmp_path),
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        line = await asyncio.wait_for(proc.stderr.readline(), timeout=20)
        listening = json.loads(line)
        assert listening["msg"] == "listening"
        url = listening["url"]
        assert url.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/healthz") as r:
                assert (await r.json())["status"] == "ok"
            # A proxied route that does not start model-specific warm-up in the gate,
            # so the process lifecycle (not tokenizer loading) is what is measured.
            async with s.get(url + "/v1/models", headers={"authorization": "Bearer sk-x"}) as r:
                assert r.status == 200
                assert r.headers["x-compaction-gate-action"]
        access = await asyncio.wait_for(proc.stderr.readline(), timeout=5)
        record = json.loads(access)
        assert record["msg"] == "request" and record["route"] == "/v1/models"
        assert b"sk-x" not in access
    finally:
        proc.send_signal(signal.SIGTERM)
        rest = (await asyncio.wait_for(proc.stderr.read(), timeout=20)).decode()
        code = await asyncio.wait_for(proc.wait(), timeout=20)
    assert code == 0, rest  # on failure, what the process said on its way out
    assert '"msg": "stopped"' in rest


async def test_graceful_shutdown_lets_inflight_stream_finish() -> None:
    fake = FakeUpstream(stream_delay=0.05)
    await fake.start()
    config = ProxyConfig(
        server=ServerSettings(port=0, shutdown_grace_seconds=10),
        upstreams=(Upstream(name="f", base_url=fake.openai_base_url),),
    )
    server = await start_server(create_app(config), "127.0.0.1", 0, shutdown_grace_seconds=10)
    body = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": " ".join("w" * 20)}],
    }
    try:
        async with (
            aiohttp.ClientSession() as s,
            s.post(server.url + "/v1/chat/completions", json=body) as r,
        ):
            assert (await r.content.readline()).startswith(b"data: ")
            stopping = asyncio.create_task(server.stop())
            await asyncio.sleep(0.1)
            assert not stopping.done()  # waiting for the in-flight stream
            rest = await r.read()
        assert rest.endswith(b"data: [DONE]\n\n")
        await asyncio.wait_for(stopping, timeout=10)
        with pytest.raises(aiohttp.ClientConnectionError):
            async with aiohttp.ClientSession() as s:
                await s.get(server.url + "/healthz")
    finally:
        await fake.close()


@pytest.mark.parametrize("argv", [["--help"], ["--version"], []])
def test_help_and_version_import_no_subcommand_module(argv: list[str]) -> None:
    """``--help``/``--version`` answer without importing aiohttp, the core or any
    subcommand module (each is imported only when its subcommand runs)."""
    import json
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from proxy.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('aiohttp', 'litellm', 'tiktoken', 'yaml')\n"
        "               or m.startswith(('proxy.core', 'proxy.server', 'proxy.gate', 'proxy.check', 'proxy.replay', 'proxy.demo')))\n"
        "print(json.dumps(heavy), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []
    if argv:
        assert "compaction-gate" in done.stdout


def test_check_piped_into_head_ends_without_a_traceback(tmp_path: Path) -> None:
    """``compaction-gate check … | head``: the output is far larger than a pipe buffer and
    the reader leaves after one line; the command ends quietly, exit code non-zero."""
    import fcntl
    import json
    import subprocess
    import sys

    # The report must outgrow the pipe plus what the reader's one readline() may buffer,
    # so the writer blocks and the reader's leaving reaches it as a broken pipe. (At 1,500
    # ids the report was 64,898 bytes, inside a 64 KiB pipe: a slow reader let the command
    # finish first and exit 0.) The size is measured below, not assumed.
    ids = [f"{i:08x}-1c2b-4d4e-8f9a-{i:012x}" for i in range(4000)]
    msgs: list[dict[str, object]] = [{"role": "system", "content": "ops"}, {"role": "user", "content": "create buckets"}]
    for i, u in enumerate(ids):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": f"aws s3api create-bucket --bucket b{i}"})}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"created bucket id {u}"})
    after = [msgs[0], {"role": "user", "content": "This session is being continued from a previous conversation. Summary: buckets created."}]
    (tmp_path / "before.json").write_text(json.dumps(msgs))
    (tmp_path / "after.json").write_text(json.dumps(after))
    argv = [sys.executable, "-m", "proxy", "check", str(tmp_path / "before.json"), str(tmp_path / "after.json")]
    whole = subprocess.run(argv, cwd=REPO, capture_output=True, timeout=60)
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    pipe = fcntl.fcntl(proc.stdout.fileno(), fcntl.F_GETPIPE_SZ)
    assert len(whole.stdout) > 2 * (pipe + 8192), (len(whole.stdout), pipe)
    first = proc.stdout.readline()
    proc.stdout.close()  # what `head -1` does
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    assert first.startswith(b"{")
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert code != 0
