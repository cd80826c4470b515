"""LangChain's real SummarizationMiddleware in an agent loop through the proxy (default
policy) reaches the right rollback."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("langchain.agents.middleware")
from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from tests.e2e import story
from tests.e2e.stack import GateStack


@tool
def bash(cmd: str) -> str:
    """Run a shell command and return its output."""
    return story.run_tool(cmd)


def _downgrades(messages) -> list[str]:
    out = []
    for m in messages:
        if isinstance(m, AIMessage):
            for tc in m.tool_calls:
                cmd = tc["args"].get("cmd", "")
                if cmd.startswith("alembic downgrade"):
                    out.append(cmd.split()[-1])
    return out


def test_langchain_summarization_middleware_reaches_the_right_rollback() -> None:
    stack = GateStack("default", story.responder)
    try:
        model = ChatOpenAI(model="gpt-4o", base_url=stack.openai_base_url, api_key="sk-test-langchain", max_retries=0)
        agent = create_agent(
            model,
            tools=[bash],
            system_prompt=story.SYSTEM,
            middleware=[SummarizationMiddleware(model=model, trigger=("messages", 12), keep=("messages", 4))],
            checkpointer=InMemorySaver(),
        )
        cfg = {"configurable": {"thread_id": "ops-1"}}
        agent.invoke({"messages": [HumanMessage(story.TASK)]}, cfg)
        result = agent.invoke({"messages": [HumanMessage(story.ROLLBACK_ASK)]}, cfg)
        msgs = result["messages"]
        # the middleware really compacted: the history now starts from its summary
        assert any(isinstance(m, HumanMessage) and "Here is a summary of the conversation to date" in m.content for m in msgs)
        summarize_calls = [r for r in stack.fake.model_requests() if "Context Extraction Assistant" in r.body.decode()]
        assert summarize_calls, "SummarizationMiddleware never called the model through the proxy"
        events = stack.events()
        assert _downgrades(msgs) == [story.REVISION], json.dumps(events, indent=1)[:4000]
        assert any(e["action"] in ("gate", "reinject") for e in events)
    finally:
        stack.close()
