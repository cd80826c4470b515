"""A required binding that is a secret (PRINCIPLES §4): a token a login step minted and a
compaction dropped makes the verdict destructive; whether the policy says reinject or
spill, the gate refuses (a secret is never re-injected in clear and never spilled) and
never writes it in clear to events."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from tests.e2e.stack import GateStack
from tests.support.fake_upstream import Call, Reply

KEY = "sk-test-tenant-secret"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJkZXBsb3ktYm90Iiwic2NvcGUiOiJyZWxlYXNlIn0."
    "Qm7xZ2vR9kLp4TwBdozjgNryP4J3jVmNHl0w5N_XgL0"
)
LOGIN = {"type": "function", "function": {"name": "auth_login", "parameters": {"type": "object", "properties": {"user": {"type": "string"}}}}}


def _history() -> list[dict[str, object]]:
    return [
        {"role": "system", "content": "You are a release agent."},
        {"role": "user", "content": "Log in to the release API as deploy-bot, then trigger release 2.14."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "auth_login", "arguments": json.dumps({"user": "deploy-bot"})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"access_token": JWT, "token_type": "Bearer", "expires_in": 3600})},
        {"role": "assistant", "content": "Logged in. Next I trigger the release."},
    ]


def _compacted() -> list[dict[str, object]]:
    return [
        {"role": "system", "content": "You are a release agent."},
        {"role": "user", "content": "Here is a summary of the conversation to date:\nThe agent logged in as deploy-bot. Next: trigger release 2.14."},
        {"role": "user", "content": "Go on."},
    ]


def _answer(call: Call) -> Reply:
    return Reply(text="ok")


@pytest.mark.parametrize("policy", ["default", "spill"])
def test_dropped_required_secret_is_refused_never_reinjected(tmp_path: Path, policy: str) -> None:
    if policy == "spill":
        p = tmp_path / "spill.yaml"
        p.write_text("extends: default\nname: secret-spill\nactions:\n  destructive: spill\n")
        policy = str(p)
    stack = GateStack(policy, _answer)
    try:
        client = openai.OpenAI(api_key=KEY, base_url=stack.openai_base_url, max_retries=0)
        h = _history()
        client.chat.completions.create(model="gpt-4o", messages=h, tools=[LOGIN])  # type: ignore[arg-type]
        with pytest.raises(openai.BadRequestError) as ei:
            client.chat.completions.create(model="gpt-4o", messages=_compacted(), tools=[LOGIN])  # type: ignore[arg-type]
        assert ei.value.code == "destructive_compaction"
        assert ei.value.response.headers["x-should-retry"] == "false"
        assert JWT not in ei.value.message and "secret" in ei.value.message
        assert len(stack.fake.model_requests()) == 1  # the compacted request never went upstream
        ev = [e for e in stack.events() if e["kind"] == "compaction"][-1]
        assert ev["verdict"] == "destructive" and ev["action"] == "reject"
        assert JWT not in json.dumps(stack.events())
        # the client that keeps the login result is let through
        client.chat.completions.create(model="gpt-4o", messages=h + [{"role": "user", "content": "Go on."}], tools=[LOGIN])  # type: ignore[arg-type]
    finally:
        stack.close()
