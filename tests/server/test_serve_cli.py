"""``compaction-gate serve`` as a user meets it: what it prints, where its state goes, a
busy port, a prompt exit."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from proxy.config import GateSettings, ProxyConfig, ServerSettings, StateSettings, state_dir
from proxy.server.cli import banner
from proxy.server.runner import RunningServer

REPO = Path(__file__).resolve().parents[2]


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "COMPACTION_GATE_CONFIG"}
    return dict(env, XDG_STATE_HOME=str(tmp / "xdg-state"))


def test_serve_prints_where_it_listens_and_keeps_state_in_the_user_state_dir(tmp_path: Path) -> None:
    cwd = tmp_path / "checkout"
    cwd.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--port", "0"],
        cwd=cwd, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(5)]
        head = lines[0].split()
        assert head[:3] == ["compaction-gate", "0.1.0", "listening"]
        origin = head[-1]
        assert origin.startswith("http://127.0.0.1:") and not origin.endswith(":0")
        assert f"base URL {origin}/v1" in lines[1] and "OpenAI" in lines[1]
        assert lines[2].rstrip().endswith(f"base URL {origin}") and "Anthropic" in lines[2]
        state = tmp_path / "xdg-state" / "compaction-gate" / "state.sqlite3"
        assert "policy: default" in lines[3] and f"sqlite at {state}" in lines[3]
        assert f"{origin}/gate/" in lines[4] and "gate.admin_key" in lines[4]
        with urllib.request.urlopen(origin + "/healthz", timeout=10) as resp:
            assert json.loads(resp.read())["status"] == "ok"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert state.exists()
        assert list(cwd.iterdir()) == []  # nothing written into the working directory
        assert proc.stderr is not None
        logs = [json.loads(line) for line in proc.stderr.read().splitlines() if line.strip()]
        assert any(rec.get("msg") == "listening" for rec in logs)  # logs stay JSON on stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_busy_port_is_one_clear_line_and_a_non_zero_exit(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "proxy", "serve", "--port", str(port)],
            cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=60,
        )
    assert done.returncode == 1
    err = [line for line in done.stderr.splitlines() if not line.startswith("{")]  # JSON logs aside
    assert err == [f"compaction-gate: cannot listen on 127.0.0.1:{port}: the address is already in use "
                   "(another process listens there; pick another with --port)"]
    assert "Traceback" not in done.stderr


def test_the_banner_names_the_state_and_how_to_open_the_dashboard() -> None:
    server = RunningServer(runner=None, host="0.0.0.0", port=8788)  # type: ignore[arg-type]
    text = banner(ProxyConfig(state=StateSettings(backend="memory"), gate=GateSettings(admin_key="k")), server)
    assert "listening on http://127.0.0.1:8788 (all interfaces)" in text
    assert "state: memory" in text and "admin key required" in text
    assert "k" not in text.split("(")[-1].replace("key required", "")  # the key itself is never printed
    text = banner(ProxyConfig(server=ServerSettings(port=9), state=StateSettings(path="/srv/gate.sqlite3")), server)
    assert "sqlite at /srv/gate.sqlite3" in text


def test_the_state_dir_follows_xdg_state_home() -> None:
    assert state_dir({"XDG_STATE_HOME": "/x/state"}) == Path("/x/state/compaction-gate")
    assert state_dir({}) == Path(os.path.expanduser("~")) / ".local" / "state" / "compaction-gate"
    assert StateSettings().file == state_dir() / "state.sqlite3"
