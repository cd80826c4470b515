"""The Docker image, checked statically (no Docker engine runs here or in CI): entrypoint,
health check, volume, non-root user, layers, pinned base, ``.dockerignore``; and the
health check itself against a real ``serve`` on a non-default port."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from proxy.config import load_config
from proxy.healthcheck import main as healthcheck
from proxy.healthcheck import serve_flags, target_url

REPO = Path(__file__).resolve().parents[1]


def instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of the Dockerfile, continuation lines joined."""
    text = (REPO / "Dockerfile").read_text()
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def first(name: str) -> str:
    return next(rest for word, rest in instructions() if word == name)


def test_entrypoint_is_serve_and_arguments_are_its_flags() -> None:
    assert json.loads(first("ENTRYPOINT")) == ["compaction-gate", "serve"]
    assert json.loads(first("CMD")) == []  # `docker run IMAGE --policy strict` appends flags


def test_healthcheck_runs_the_port_following_check() -> None:
    hc = first("HEALTHCHECK")
    assert "8788" not in hc  # no hard-coded port
    cmd = json.loads(hc[hc.index("CMD") + 3 :].strip())
    assert cmd == ["python", "-m", "proxy.healthcheck"]


def test_state_volume_and_non_root_user() -> None:
    words = instructions()
    assert ("VOLUME", "/data") in words
    user = first("USER")
    assert user not in ("root", "0") and not user.startswith("0:")
    entry = next(i for i, (w, _) in enumerate(words) if w == "ENTRYPOINT")
    assert any(w == "USER" for w, _ in words[:entry])  # the server runs as that user
    config = load_config(REPO / "docker" / "config.yaml", environ={})
    assert config.state.file.parent == Path("/data") and config.server.host == "0.0.0.0"


def test_base_image_is_pinned_to_a_release() -> None:
    base = first("FROM").split()[0]
    name, _, tag = base.partition(":")
    assert name == "python" and tag and "latest" not in tag
    assert re.match(r"\d+\.\d+\.\d+-", tag), f"{tag}: pin a patch release (and a digest when known)"


def test_dependencies_are_a_layer_of_their_own() -> None:
    words = instructions()
    copy_code = next(i for i, (w, a) in enumerate(words) if w == "COPY" and a.split()[0] == "proxy")
    before = words[:copy_code]
    assert ("COPY", "pyproject.toml ./") in before
    assert any(w == "RUN" and "pip install -r" in a for w, a in before)
    assert any(w == "RUN" and "pip install --no-deps ." in a for w, a in words[copy_code:])


def test_the_dependency_step_lists_exactly_the_project_dependencies(tmp_path: Path) -> None:
    """Run the Dockerfile's own requirement-extraction command (python:3.11 has tomllib)."""
    run = next(a for w, a in instructions() if w == "RUN" and "tomllib" in a)
    command = run.split(">", 1)[0].strip()
    (tmp_path / "pyproject.toml").write_bytes((REPO / "pyproject.toml").read_bytes())
    argv = shlex.split(command)
    assert argv[0] == "python"
    done = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert done.stdout.split() == deps


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines() if line.strip() and not line.startswith("#")}
    assert {".git", ".venv", "**/__pycache__", "tests"} <= ignored
    copied = {a.split()[0] for w, a in instructions() if w == "COPY"}
    assert not copied & ignored  # nothing the image needs is ignored


# ------------------------------------------------------------------ the health check


def test_the_check_reads_the_flags_of_the_main_process(tmp_path: Path) -> None:
    assert serve_flags(["/usr/local/bin/compaction-gate", "serve", "--port", "9000"]) == ["--port", "9000"]
    assert serve_flags(["python", "app.py"]) == []
    cfg = tmp_path / "c.yaml"
    cfg.write_text("server:\n  host: 0.0.0.0\n  port: 7001\n")
    assert target_url(["--config", str(cfg)]) == "http://127.0.0.1:7001/healthz"
    assert target_url(["--config", str(cfg), "--port", "7002", "--policy", "strict"]) == "http://127.0.0.1:7002/healthz"
    assert target_url([]) == "http://127.0.0.1:8788/healthz"


def test_the_check_passes_against_serve_on_a_configured_port_and_fails_without_it(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"server:\n  port: {port}\nstate:\n  backend: memory\n")
    env = {k: v for k, v in os.environ.items() if k != "COMPACTION_GATE_CONFIG"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--config", str(cfg)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout is not None and "listening" in proc.stdout.readline()
        assert healthcheck(["--config", str(cfg)]) == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert healthcheck(["--config", str(cfg)]) == 1


@pytest.mark.parametrize("text", ["server:\n  port: nope\n"])
def test_a_bad_config_fails_the_check(tmp_path: Path, text: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    assert healthcheck(["--config", str(cfg)]) == 1
