"""The gate as a guardrail of the REAL LiteLLM proxy (``litellm --config``, a subprocess),
in front of the scripted upstream, driven with the openai SDK through the migration story.

One LiteLLM process per policy (``default``, ``strict``), each configured only through
its ``config.yaml`` (``guardrails:`` entry, ``mode: [pre_call, post_call]``), offline: the
local model cost map, no database, no telemetry, outbound proxies pointed at a dead port.
Each test is its own conversation (``x-litellm-session-id``, the header LiteLLM users
already send); the gate's events are read from the guardrail's operator API.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import proxy
from tests.e2e import story
from tests.support import BackgroundLoop
from tests.support.fake_upstream import Call, FakeUpstream, Reply, ToolCall

pytest.importorskip("fastapi", reason="the LiteLLM proxy needs litellm[proxy] (the test extras)")
pytest.importorskip("uvicorn", reason="the LiteLLM proxy needs litellm[proxy] (the test extras)")

MASTER_KEY = "sk-litellm-master-5f0c2a9e7b1d4c3a8e6f"
GUARDRAIL = "proxy.integrations.litellm_guardrail.CompactionGateGuardrail"
START_TIMEOUT = 120.0


def _litellm_cli() -> str:
    exe = Path(sys.executable).parent / "litellm"
    if not exe.exists():
        pytest.skip("the litellm console script is not installed (pip install 'litellm[proxy]')")
    return str(exe)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Model:
    """The scripted model behind LiteLLM; tests may swap its behaviour."""

    def __init__(self) -> None:
        self.respond = story.responder

    def __call__(self, call: Call) -> Reply:
        return self.respond(call)


class LiteLLM:
    """One ``litellm --config`` process with the gate as its guardrail."""

    def __init__(self, tmp: Path, name: str, upstream: str, policy: str | None = None) -> None:
        self.port, self.api_port = _free_port(), _free_port()
        self.dir = tmp / name
        self.dir.mkdir()
        if policy is None:
            policy = name
        config = {
            "model_list": [
                {
                    "model_name": "gpt-4o",
                    "litellm_params": {
                        "model": "openai/gpt-4o",
                        "api_base": upstream,
                        "api_key": "sk-upstream-fake",
                    },
                }
            ],
            "guardrails": [
                {
                    "guardrail_name": "compaction-gate",
                    "litellm_params": {
                        "guardrail": GUARDRAIL,
                        "mode": ["pre_call", "post_call"],
                        "default_on": True,
                        "policy": policy,
                        "state_backend": "memory",
                        "api_port": self.api_port,
                    },
                }
            ],
            "general_settings": {"master_key": MASTER_KEY},
            "litellm_settings": {"num_retries": 0, "request_timeout": 30},
        }
        (self.dir / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("LITELLM_", "DATABASE_URL", "OPENAI_"))
        }
        dead = f"http://127.0.0.1:{_free_port()}"
        # LiteLLM imports the guardrail by module path: the same gate code this test imports
        # (an editable install's import hook is not seen by every LiteLLM import path)
        here = str(Path(proxy.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
        env.update(
            LITELLM_LOCAL_MODEL_COST_MAP="True",
            LITELLM_TELEMETRY="False",
            LITELLM_LOG="ERROR",
            HTTPS_PROXY=dead,
            HTTP_PROXY=dead,
            NO_PROXY="127.0.0.1,localhost",
            no_proxy="127.0.0.1,localhost",
        )
        self.log = (self.dir / "litellm.log").open("wb")
        self.proc = subprocess.Popen(
            [
                _litellm_cli(),
                "--config",
                str(self.dir / "config.yaml"),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            cwd=self.dir,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.port}/health/liveliness", timeout=2
                ):
                    return
            except OSError:
                time.sleep(0.3)
        out = self.output()
        self.stop()
        pytest.fail(f"LiteLLM did not start (exit {self.proc.returncode}):\n{out[-4000:]}")

    def output(self) -> str:
        self.log.flush()
        return (self.dir / "litellm.log").read_text(errors="replace")

    def events(self) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.api_port}/gate/events?limit=1000"
        with urllib.request.urlopen(url, timeout=10) as resp:
            return list(json.loads(resp.read())["events"])

    def client(self, session: str, max_retries: int = 0) -> openai.OpenAI:
        return openai.OpenAI(
            api_key=MASTER_KEY,
            base_url=self.base_url,
            max_retries=max_retries,
            default_headers={"x-litellm-session-id": session},
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def model() -> Iterator[tuple[Model, FakeUpstream]]:
    bg = BackgroundLoop()
    m = Model()
    fake = FakeUpstream(m)
    bg.run(fake.start())
    yield m, fake
    bg.run(fake.close())
    bg.close()


@pytest.fixture(scope="module")
def proxies(
    model: tuple[Model, FakeUpstream], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, LiteLLM]]:
    _, fake = model
    tmp = tmp_path_factory.mktemp("litellm")
    spill = tmp / "spill.yaml"
    spill.write_text("extends: default\nname: spill\nactions:\n  destructive: spill\nspill:\n  list_bindings: false\n")
    started = {p: LiteLLM(tmp, p, fake.openai_base_url) for p in ("default", "strict")}  # start them at once
    started["spill"] = LiteLLM(tmp, "spill", fake.openai_base_url, str(spill))
    try:
        for p in started.values():
            p.wait_ready()
        yield started
    finally:
        for p in started.values():
            p.stop()


@pytest.fixture
def responder(model: tuple[Model, FakeUpstream]) -> Iterator[Model]:
    m, _ = model
    yield m
    m.respond = story.responder


def _agent(proxy: LiteLLM, stream: bool, max_retries: int = 0) -> story.OpenAIAgent:
    return story.OpenAIAgent(proxy.client(str(uuid.uuid4()), max_retries), stream)


def _mine(events: list[dict[str, Any]], conversation: str | None) -> list[dict[str, Any]]:
    return [e for e in events if conversation is None or e.get("conversation") == conversation]


@pytest.mark.parametrize("stream", [False, True])
def test_default_reinjects_and_the_rollback_uses_the_original_revision(
    proxies: dict[str, LiteLLM], model: tuple[Model, FakeUpstream], stream: bool
) -> None:
    proxy, fake = proxies["default"], model[1]
    agent = _agent(proxy, stream)
    agent.work(story.TASK)
    agent.compact(story.LOSSY_SUMMARY)  # the client's own summary dropped the revision
    raw = agent.client.chat.completions.with_raw_response.create(
        model="gpt-4o",
        messages=agent.messages + [{"role": "user", "content": story.ROLLBACK_ASK}],
        tools=[story.BASH_OPENAI],
    )
    calls = raw.parse().choices[0].message.tool_calls or []
    assert story.rollback_target(calls[0].function.arguments) == story.REVISION
    assert raw.headers["x-compaction-gate-action"] == "reinject"
    conversation = raw.headers["x-compaction-gate-conversation"]
    # LiteLLM forwarded the repaired history: the model saw the re-injected binding
    last = fake.model_requests()[-1].body.decode()
    assert story.REVISION in last and "[compaction-gate: identifiers preserved" in last
    assert story.REVISION not in str(agent.messages)  # the client's history still lacks it
    ev = [e for e in _mine(proxy.events(), conversation) if e["kind"] == "compaction"]
    assert ev and ev[-1]["action"] == "reinject" and ev[-1]["verdict"] == "destructive"
    assert story.REVISION in ev[-1]["required"]
    # and the agent's next turn, once more through LiteLLM, rolls back to the right revision
    if stream:
        assert story.rollback_target(agent.next_action(story.ROLLBACK_ASK)[0][2]) == story.REVISION


def test_strict_refuses_with_litellms_400_naming_the_revision(
    proxies: dict[str, LiteLLM], model: tuple[Model, FakeUpstream]
) -> None:
    proxy, fake = proxies["strict"], model[1]
    agent = _agent(proxy, False, max_retries=3)
    agent.work(story.TASK)
    agent.compact(story.LOSSY_SUMMARY)
    before = len(fake.model_requests())
    with pytest.raises(openai.BadRequestError) as ei:
        agent.next_action(story.ROLLBACK_ASK)
    err = ei.value
    assert err.status_code == 400
    assert isinstance(err.body, dict) and err.body["code"] == "destructive_compaction"
    assert err.body["type"] == "invalid_request_error"
    assert story.REVISION in err.message
    lowered = err.message.lower()
    assert "context_length_exceeded" not in lowered and "prompt is too long" not in lowered
    assert err.response.headers["x-should-retry"] == "false"  # the SDK did not retry ...
    assert err.response.headers["x-compaction-gate-action"] == "reject"
    assert len(fake.model_requests()) == before  # ... and nothing reached the model
    conversation = err.response.headers["x-compaction-gate-conversation"]
    rejects = [
        e
        for e in _mine(proxy.events(), conversation)
        if e["kind"] == "compaction" and e["action"] == "reject"
    ]
    assert len(rejects) == 1


def _inventing(call: Call) -> Reply:
    """A model that ignores its context when asked to roll back (always invents)."""
    if "roll back" in call.last_user_text().lower() and "Running downgrade" not in call.all_text():
        return Reply(tool_calls=[ToolCall("bash", {"cmd": f"alembic downgrade {story.INVENTED}"})])
    return story.responder(call)


def test_a_streamed_invented_revision_is_blocked(
    proxies: dict[str, LiteLLM], responder: Model
) -> None:
    proxy = proxies["default"]
    responder.respond = _inventing
    agent = _agent(proxy, True)
    agent.work(story.TASK)
    agent.compact(story.LOSSY_SUMMARY)
    with pytest.raises(openai.APIError) as ei:
        agent.next_action(story.ROLLBACK_ASK)
    assert story.INVENTED in str(ei.value) and story.REVISION in str(ei.value)
    trip = [e for e in proxy.events() if e["kind"] == "tripwire" and e["tripwire"] == "block"]
    assert trip and trip[-1]["hallucinated"][0]["value"] == story.INVENTED


@pytest.mark.parametrize("stream", [False, True])
def test_the_summarization_call_is_gated(
    proxies: dict[str, LiteLLM], model: tuple[Model, FakeUpstream], stream: bool
) -> None:
    proxy, fake = proxies["default"], model[1]
    agent = _agent(proxy, stream)
    agent.work(story.TASK)
    summary = agent.summarize_via_model()
    assert summary.startswith(story.LOSSY_SUMMARY[:40])  # the model's lossy summary ...
    assert story.REVISION in summary  # ... with the verbatim section the gate appended
    assert "[compaction-gate: summary contract]" in fake.model_requests()[-1].body.decode()
    kinds = {(e["kind"], e["action"]) for e in proxy.events()}
    assert ("summarization", "gate") in kinds and ("summary_check", "gate") in kinds


def test_the_operator_api_serves_metrics(proxies: dict[str, LiteLLM]) -> None:
    proxy = proxies["strict"]
    with urllib.request.urlopen(f"http://127.0.0.1:{proxy.api_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    assert 'compaction_gate_actions_total{action="reject"}' in text


@pytest.mark.parametrize("stream", [False, True])
def test_spill_is_recalled_through_litellms_own_router(
    proxies: dict[str, LiteLLM], model: tuple[Model, FakeUpstream], responder: Model, stream: bool
) -> None:
    """LiteLLM lets a guardrail call upstream again (its router): the recall tool works
    behind LiteLLM as behind the gate's own server — one client request, two upstream
    rounds, the rollback to the original revision, no recall call seen by the client."""
    proxy, fake = proxies["spill"], model[1]
    responder.respond = story.recalling()
    agent = _agent(proxy, stream)
    agent.work(story.TASK)
    agent.compact(story.LOSSY_SUMMARY)
    before = len(fake.model_requests())
    calls = agent.next_action(story.ROLLBACK_ASK)
    assert [name for _, name, _ in calls] == ["bash"]
    assert story.rollback_target(calls[0][2]) == story.REVISION
    rounds = fake.model_requests()[before:]
    assert len(rounds) == 2
    assert story.RECALL_TOOL in json.dumps(rounds[0].json["tools"])
    assert story.REVISION in json.dumps(rounds[1].json["messages"][-1])  # the recalled region
    recalls = [e for e in proxy.events() if e["kind"] == "recall"]
    assert recalls and recalls[-1]["outcome"] == "found"


def test_usage_behind_litellm_sums_both_rounds(proxies: dict[str, LiteLLM], responder: Model) -> None:
    proxy = proxies["spill"]
    responder.respond = story.recalling()
    agent = _agent(proxy, False)
    agent.work(story.TASK)
    agent.compact(story.LOSSY_SUMMARY)
    raw = agent.client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=agent.messages + [{"role": "user", "content": story.ROLLBACK_ASK}], tools=[story.BASH_OPENAI]
    )
    usage = raw.parse().usage
    (i1, o1), (i2, o2) = story.ROUND_USAGE[:2]
    assert (usage.prompt_tokens, usage.completion_tokens) == (i1 + i2, o1 + o2)
    assert raw.headers["x-compaction-gate-recall"] == story.RECALL_TOOL
