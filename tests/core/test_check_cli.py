"""``compaction-gate check BEFORE AFTER`` (DESIGN §6): JSON fields, text output, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.check import main as check_main
from tests.support.conversations import build_task, compact

ROOT = Path(__file__).resolve().parents[2]


def write(tmp: Path, name: str, obj: object) -> str:
    p = tmp / name
    p.write_text(json.dumps(obj), encoding="utf-8")
    return str(p)


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, str]:
    conv = build_task("migration", seed=5, filler=1)
    prev = conv.binding("prev_revision").value
    bad = compact(conv, "claude_code", drop=[prev])
    good = compact(conv, "claude_code")
    return {
        "before": write(tmp_path, "before.json", conv.to_openai()),
        "after_bad": write(tmp_path, "after_bad.json", bad.after.to_openai()),
        "after_good": write(tmp_path, "after_good.json", good.after.to_openai()),
        "before_anthropic": write(tmp_path, "before_a.json", conv.to_anthropic()),
        "after_bad_anthropic": write(tmp_path, "after_bad_a.json", bad.after.to_anthropic()),
        "before_list": write(tmp_path, "before_list.json", conv.to_openai()["messages"]),
        "after_bad_list": write(tmp_path, "after_bad_list.json", bad.after.to_openai()["messages"]),
        "prev": prev,
        "not_json": str((tmp_path / "broken.json").write_text("{not json", encoding="utf-8") and tmp_path / "broken.json"),
        "not_messages": write(tmp_path, "nomsg.json", {"model": "gpt-4o", "prompt": "hi"}),
    }


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = check_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_destructive_exits_3_with_the_dropped_binding(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, files["before"], files["after_bad"])
    assert code == 3, err
    doc = json.loads(out)
    assert doc["verdict"] == "destructive" and doc["transition"] == "summarize" and doc["agent"] == "claude_code"
    assert {"binding_density", "obligations", "next_action"} <= set(doc["signals"])
    required = [d for d in doc["dropped"] if d["required"]]
    assert [d["value"] for d in required] == [files["prev"]]
    assert {"value", "kind", "regenerable"} <= set(required[0]) and required[0]["regenerable"] is False
    assert "alembic current" in required[0]["where"]


def test_safe_exits_0(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, files["before"], files["after_good"])
    doc = json.loads(out)
    assert code == 0 and doc["verdict"] == "safe" and not [d for d in doc["dropped"] if d["required"]]


@pytest.mark.parametrize("before, after", [("before_anthropic", "after_bad_anthropic"), ("before_list", "after_bad_list")])
def test_anthropic_bodies_and_bare_lists(files: dict[str, str], capsys: pytest.CaptureFixture[str], before: str, after: str) -> None:
    code, out, _ = run(capsys, files[before], files[after])
    assert code == 3 and json.loads(out)["verdict"] == "destructive"


def test_text_format_says_what_where_why_and_what_to_do(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, files["before"], files["after_bad"], "--format", "text")
    assert code == 3
    assert out.startswith("DESTRUCTIVE: summarize (Claude Code) lost 1 required binding(s).")
    assert files["prev"] in out
    assert "from: tool result of bash `alembic current` at message" in out
    assert "why:" in out and "read-before-write" in out
    assert "What to do:" in out


def test_text_format_safe(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, files["before"], files["after_good"], "--format", "text")
    assert code == 0 and out.startswith("SAFE: summarize (Claude Code); every required binding survived verbatim.")


@pytest.mark.parametrize(
    "which, message",
    [("not_json", "invalid JSON"), ("not_messages", "neither 'messages' nor 'input'")],
)
def test_bad_input_exits_2_with_a_message(files: dict[str, str], capsys: pytest.CaptureFixture[str], which: str, message: str) -> None:
    code, out, err = run(capsys, files["before"], files[which])
    assert code == 2 and out == ""
    assert err.startswith("compaction-gate check: error: ") and message in err


def test_missing_file_and_usage_errors_exit_2(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, files["before"], "/nonexistent/after.json")
    assert code == 2 and "no such file" in err
    code, _, err = run(capsys, files["before"])
    assert code == 2 and "usage:" in err
    code, _, err = run(capsys, files["before"], files["after_bad"], "--format", "yaml")
    assert code == 2


def test_policy_presets_are_applied(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, files["before"], files["after_bad"], "--policy", "default")
    assert code == 3, err
    assert json.loads(out)["policy"] == "default"
    code, _, err = run(capsys, files["before"], files["after_bad"], "--policy", "/nonexistent/policy.yaml")
    assert code == 2 and "--policy" in err


def test_console_entry_point_runs_check(files: dict[str, str]) -> None:
    """The real command line: ``python -m proxy.cli check`` (what ``compaction-gate`` runs)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for after, expected in (("after_bad", 3), ("after_good", 0), ("not_json", 2)):
        proc = subprocess.run(
            [sys.executable, "-m", "proxy.cli", "check", files["before"], files[after]],
            check=False, capture_output=True, text=True, cwd=ROOT, env=env, timeout=60,
        )
        assert proc.returncode == expected, proc.stderr
        if expected != 2:
            assert json.loads(proc.stdout)["verdict"] == ("destructive" if expected == 3 else "safe")
        else:
            assert "error" in proc.stderr


def test_responses_api_bodies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``instructions`` + ``input`` items (``function_call`` / ``function_call_output``)
    get the same analysis as chat and Anthropic bodies."""
    conv = build_task("upload", seed=2)
    up = conv.binding("upload_id").value
    bad = compact(conv, "codex", drop=[up])
    before, after = write(tmp_path, "b.json", conv.to_responses()), write(tmp_path, "a.json", bad.after.to_responses())
    assert "instructions" in json.loads(Path(before).read_text()) and any(
        i.get("type") == "function_call_output" for i in json.loads(Path(before).read_text())["input"]
    )
    code, out, err = run(capsys, before, after)
    assert code == 3, err
    doc = json.loads(out)
    required = [d for d in doc["dropped"] + doc["altered"] if d["required"]]
    assert any(d["value"] == up and d["rule"] == "2a" for d in required), required
    # the same transition in the chat dialect gives the same required values
    code2, out2, _ = run(capsys, write(tmp_path, "b2.json", conv.to_openai()), write(tmp_path, "a2.json", bad.after.to_openai()))
    assert code2 == 3
    assert sorted(d["value"] for d in json.loads(out2)["dropped"] if d["required"]) == sorted(d["value"] for d in doc["dropped"] if d["required"])
