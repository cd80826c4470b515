"""The migration story, played by a scripted agent against any OpenAI-compatible base URL.

The agent applies a database migration whose tool result names the rollback target
(``revision <12 hex>``), does a few more steps so its history grows, compacts its
history the way Claude Code does (a summarization request, then a new history that
starts "This session is being continued from a previous conversation …"), and finally
asks for the next action: roll the migration back. What matters is which revision that
rollback uses.

This module only speaks HTTP (OpenAI chat-completions wire format) through an
``aiohttp.ClientSession``; it knows nothing about the proxy's internals, so the same
story drives the demo, the tests and, if pointed at it, a real deployment.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp

__all__ = [
    "COMPACT_INSTRUCTION",
    "CONTINUATION_PREFIX",
    "DEMO_REVISION",
    "StepRecord",
    "StoryResult",
    "run_story",
]

#: The revision the migration tool result names: the one a correct rollback must use.
DEMO_REVISION = "4b1e9c2d7a30"

SYSTEM_PROMPT = (
    "You are a deployment agent for the orders service. You run commands with the "
    "run_shell tool and report what you did. Be careful with database migrations."
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run one shell command in the service's repository and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]

COMPACT_INSTRUCTION = (
    "Your task is to create a detailed summary of the conversation so far, paying close "
    "attention to the user's explicit requests and your previous actions. This summary "
    "will replace the conversation history."
)

CONTINUATION_PREFIX = (
    "This session is being continued from a previous conversation that ran out of "
    "context. The conversation is summarized below:\n"
)

ROLLBACK_INSTRUCTION = (
    "The slow smoke suite fails on the new index. Roll the migration back now, to the "
    "revision that was current before the upgrade."
)

_PYTEST_FAST = "\n".join(
    [
        "tests/smoke/test_health.py ....                                          [ 16%]",
        "tests/smoke/test_orders_create.py ........                               [ 48%]",
        "tests/smoke/test_orders_list.py .......                                  [ 76%]",
        "tests/smoke/test_orders_status.py ......                                 [100%]",
        "25 passed in 4.81s",
    ]
)

_LOG_LINES = "\n".join(
    f"{h:02d}:{m:02d}:1{m % 10} INFO orders-api GET /orders?status=open 200 in {12 + (m * 7) % 30} ms"
    for h in (14,)
    for m in range(10, 40)
)

_KUBECTL = "\n".join(
    [
        "NAME         READY   UP-TO-DATE   AVAILABLE   AGE",
        "orders-api   3/3     3            3           41d",
    ]
)

_PYTEST_SLOW = "\n".join(
    [
        "tests/smoke/test_orders_report.py ..F.                                   [100%]",
        "FAILED tests/smoke/test_orders_report.py::test_monthly_report_by_status",
        "  psycopg.errors.LockNotAvailable: canceling statement due to lock timeout",
        "  while building index ix_orders_status on table orders",
        "1 failed, 3 passed in 61.02s",
    ]
)

def _apply_output(revision: str) -> str:
    return (
        "INFO  [alembic.runtime.migration] Context impl PostgresqlImpl.\n"
        "INFO  [alembic.runtime.migration] Will assume transactional DDL.\n"
        "INFO  [alembic.runtime.migration] Running upgrade -> add_orders_status_index\n"
        f"Migration applied. Rollback target (previous head): revision {revision}"
    )


#: (instruction, tool output) of each working step. The first one binds the revision.
STEPS: tuple[tuple[str, str], ...] = (
    (
        "Apply the pending migration for the orders service: run `alembic upgrade head`.",
        _apply_output(DEMO_REVISION),
    ),
    ("Run the smoke tests: `pytest tests/smoke -q`.", _PYTEST_FAST),
    ("Check the API log for errors: `tail -n 30 logs/orders-api.log`.", _LOG_LINES),
    ("Check the rollout: `kubectl get deployment orders-api -n orders`.", _KUBECTL),
    ("Now run the slow smoke suite: `pytest tests/smoke -q -m slow`.", _PYTEST_SLOW),
)

_DOWNGRADE = re.compile(r"alembic\s+downgrade\s+(\S+)")

#: How the agent compacts: ``summarize`` (a summarization call, then the history restarts
#: from the summary, like Claude Code) or ``truncate`` (the head is dropped, no summary,
#: like a sliding window).
Compaction = Literal["summarize", "truncate"]

#: Called with (request body sent, response payload received, HTTP status) per request.
Recorder = Callable[[dict[str, Any], dict[str, Any], int], Awaitable[None] | None]


@dataclass
class StepRecord:
    """One request the agent made and what came back."""

    label: str
    status: int
    action: str
    conversation: str
    messages_sent: int


@dataclass
class StoryResult:
    """Everything the story observed, for narration and assertions."""

    base_url: str
    steps: list[StepRecord] = field(default_factory=list)
    messages_before_compaction: int = 0
    messages_after_compaction: int = 0
    summary: str = ""
    final_status: int = 0
    final_command: str | None = None
    final_error: str | None = None
    conversation: str = ""
    revision: str = DEMO_REVISION

    @property
    def summary_kept_revision(self) -> bool:
        return self.revision in self.summary

    @property
    def rollback_revision(self) -> str | None:
        match = _DOWNGRADE.search(self.final_command or "")
        return match.group(1) if match else None

    @property
    def rollback_correct(self) -> bool:
        return self.rollback_revision == self.revision

    def action_of(self, label: str) -> str:
        for step in self.steps:
            if step.label == label:
                return step.action
        return "none"


class StoryError(RuntimeError):
    """The upstream (through the proxy) did not answer as an OpenAI endpoint would."""


async def _chat(
    session: aiohttp.ClientSession,
    base_url: str,
    messages: list[dict[str, Any]],
    result: StoryResult,
    label: str,
    headers: Mapping[str, str],
    model: str,
    recorder: Recorder | None = None,
) -> dict[str, Any]:
    body = {"model": model, "messages": messages, "tools": TOOLS}
    async with session.post(f"{base_url}/chat/completions", json=body, headers=dict(headers)) as resp:
        payload = await resp.json(content_type=None)
        if recorder is not None and isinstance(payload, dict):
            maybe = recorder(json.loads(json.dumps(body)), payload, resp.status)
            if maybe is not None:
                await maybe
        record = StepRecord(
            label=label,
            status=resp.status,
            action=resp.headers.get("x-compaction-gate-action", "none"),
            conversation=resp.headers.get("x-compaction-gate-conversation", ""),
            messages_sent=len(messages),
        )
    result.steps.append(record)
    if record.conversation and record.conversation != "unknown":
        result.conversation = record.conversation
    if not isinstance(payload, dict):
        raise StoryError(f"{label}: response is not a JSON object")
    return {"status": record.status, **payload}


def _assistant_message(payload: Mapping[str, Any], label: str) -> dict[str, Any]:
    try:
        message = payload["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        raise StoryError(f"{label}: response has no choices[0].message") from None
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    return out


def _command_of(message: Mapping[str, Any]) -> tuple[str, str] | None:
    for call in message.get("tool_calls") or []:
        try:
            args = json.loads(call["function"]["arguments"])
            return str(call["id"]), str(args["command"])
        except (KeyError, TypeError, ValueError):
            continue
    return None


async def run_story(
    base_url: str,
    *,
    api_key: str = "demo-key-not-a-secret",
    model: str = "gpt-4o-mini",
    extra_headers: Mapping[str, str] | None = None,
    session: aiohttp.ClientSession | None = None,
    compaction: Compaction = "summarize",
    revision: str = DEMO_REVISION,
    service: str = "orders",
    recorder: Recorder | None = None,
) -> StoryResult:
    """Play the story against ``base_url`` (an OpenAI base URL ending in ``/v1``).

    ``revision`` and ``service`` vary the story (distinct conversations for load and
    replay tests); ``recorder`` sees every request body and response payload.
    """
    headers = {"Authorization": f"Bearer {api_key}", **(extra_headers or {})}
    result = StoryResult(base_url=base_url, revision=revision)
    steps = [(instr.replace("orders", service), out.replace("orders", service)) for instr, out in STEPS]
    steps[0] = (steps[0][0], _apply_output(revision))
    own = session is None
    http = session or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
    try:
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
        for n, (instruction, output) in enumerate(steps, start=1):
            history.append({"role": "user", "content": instruction})
            payload = await _chat(http, base_url, history, result, f"step {n}", headers, model, recorder)
            assistant = _assistant_message(payload, f"step {n}")
            history.append(assistant)
            call = _command_of(assistant)
            if call is None:
                continue
            history.append({"role": "tool", "tool_call_id": call[0], "content": output})
            payload = await _chat(http, base_url, history, result, f"step {n} result", headers, model, recorder)
            history.append(_assistant_message(payload, f"step {n} result"))

        result.messages_before_compaction = len(history)
        compacted: list[dict[str, Any]]
        if compaction == "summarize":
            summarize = [*history, {"role": "user", "content": COMPACT_INSTRUCTION}]
            payload = await _chat(http, base_url, summarize, result, "summarize", headers, model, recorder)
            result.summary = str(_assistant_message(payload, "summarize").get("content") or "")
            compacted = [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": CONTINUATION_PREFIX + result.summary},
            ]
        else:  # sliding window: keep the system prompt and the last working step only
            compacted = [history[0], *history[-4:]]
        compacted.append({"role": "user", "content": ROLLBACK_INSTRUCTION})
        result.messages_after_compaction = len(compacted) - 1
        payload = await _chat(http, base_url, compacted, result, "next action", headers, model, recorder)
        result.final_status = int(payload.get("status", 0))
        if result.final_status >= 400:
            error = payload.get("error")
            result.final_error = str(error.get("message")) if isinstance(error, dict) else str(error)
        else:
            call = _command_of(_assistant_message(payload, "next action"))
            result.final_command = call[1] if call else None
        return result
    finally:
        if own:
            await http.close()
