"""Property tests of the provenance rules (corpus/PRINCIPLES.md §2–§4), for tools the
gate has no table for and for every role that can carry a step's output.

1. A value that only a read-only step returned, with nothing changed later, is never
   required (§3a).
2. A handle minted by a state-changing step, removed from every surviving message, is
   always required and named in the analysis (§2a, §4).
3. The same content as a tool result, as pasted user text (aider, Cline) or — for a value
   the agent generated — in a state-changing call's arguments gives the same verdict
   (§2: "the role that carries the text does not matter").
"""

from __future__ import annotations

import json
import random
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.analysis import Analysis, analyze
from proxy.core.dialects import from_any
from tests.support.conversations import Conversation, ToolCall, Turn, pasted, scrub

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_ALNUM = string.ascii_letters + string.digits


@st.composite
def handles(draw: st.DrawFn) -> str:
    """Machine-made ids of unknown vendors: an optional prefix and a random body that
    mixes cases and digits. The body comes from a seeded generator, so shrinking keeps
    it random (a shrunk ``a0Aa0Aa0A`` would be no handle of any vendor)."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    prefix = draw(st.sampled_from(["", "op-", "lk_", "tsk_", "rcpt-", "lease-", "h_"]))
    n = draw(st.integers(12, 40))
    while True:
        body = "".join(rng.choice(_ALNUM) for _ in range(n))
        if sum(c.isdigit() for c in body) >= 3 and any(c.islower() for c in body) and any(c.isupper() for c in body):
            return prefix + body


TOOLS = st.sampled_from(["flagctl", "queuectl", "leasectl", "vendorcli", "acmectl", "opsctl"])
NOUNS = st.sampled_from(["lease", "job", "lock", "ticket", "session", "operation", "reservation"])
KEYS = st.sampled_from(["id", "token", "handle", "lease_id", "operation_id", "job_id", "task_id", "receipt_handle"])
NAMES = st.sampled_from(["checkout", "nightly-report", "billing", "reindex", "payments-eu"])


def _conv(turns: list[Turn]) -> Conversation:
    return Conversation(task="prop", system="You are an operations agent.", turns=tuple(turns))


def _step(cid: str, tool: str, args: dict[str, object], output: str) -> list[Turn]:
    return [Turn("assistant", "", calls=(ToolCall(cid, tool, args),)), Turn("tool", output, call_id=cid, tool_name=tool)]


def _noise(i: int) -> list[Turn]:
    return _step(f"n{i}", "bash", {"command": "pytest -q tests/"}, f"collected {40 + i} items\n{38 + i} passed in 3.{i}1s")


def _compact(conv: Conversation, drop: str) -> Conversation:
    """A summary replaces everything but the first user message and the last step, and
    ``drop`` is removed from every surviving message."""
    first, tail = conv.turns[0], conv.turns[-2:]
    summary = Turn("user", "Here is a summary of the conversation to date:\nThe agent ran the commands it needed; next: continue.")
    return scrub(conv.with_turns([first, summary, *tail]), [drop])


def _judge(before: Conversation, after: Conversation, dialect: str = "openai") -> Analysis:
    return analyze(from_any(before.body(dialect)), from_any(after.body(dialect)))


def _read_only(tool: str, noun: str, name: str, key: str, value: str) -> list[Turn]:
    cmd = f"{tool} {noun} get {name} --output json"
    return _step("r1", "bash", {"command": cmd}, json.dumps({"name": name, key: value, "state": "active"}))


def _minting(tool: str, noun: str, name: str, key: str, value: str) -> list[Turn]:
    cmd = f"{tool} {noun} create {name} --ttl 60"
    return _step("w1", "bash", {"command": cmd}, json.dumps({"name": name, key: value, "status": "pending"}))


@SETTINGS
@given(tool=TOOLS, noun=NOUNS, name=NAMES, key=KEYS, value=handles(), dialect=st.sampled_from(["openai", "anthropic", "responses"]))
def test_value_only_a_read_returned_is_never_required(tool: str, noun: str, name: str, key: str, value: str, dialect: str) -> None:
    conv = _conv([Turn("user", f"Check the {noun} {name}; do not change anything."), *_read_only(tool, noun, name, key, value), *_noise(1), *_noise(2)])
    a = _judge(conv, _compact(conv, value), dialect)
    assert a.verdict == "safe", a.required_missing
    assert value not in {b.value for b in a.required_missing}


@SETTINGS
@given(tool=TOOLS, noun=NOUNS, name=NAMES, key=KEYS, value=handles(), dialect=st.sampled_from(["openai", "anthropic", "responses"]))
def test_minted_handle_removed_everywhere_is_required_and_named(tool: str, noun: str, name: str, key: str, value: str, dialect: str) -> None:
    conv = _conv([Turn("user", f"Create the {noun} {name} and keep it until the job is done."), *_minting(tool, noun, name, key, value), *_noise(1), *_noise(2)])
    after = _compact(conv, value)
    assert value not in json.dumps(after.body(dialect))
    a = _judge(conv, after, dialect)
    assert a.verdict == "destructive"
    named = [b for b in a.required_missing if value in b.value]
    assert named and all(b.source.mutating for b in named), a.required_missing


def _verdicts(conv: Conversation, value: str) -> list[str]:
    """The verdict of the same compaction, with the history as tool calls, as aider's
    pasted output and as Cline's, in the dialects that carry each."""
    out = []
    for c, dialect in ((conv, "openai"), (conv, "responses"), (pasted(conv, "aider"), "openai"), (pasted(conv, "cline"), "anthropic")):
        out.append(_judge(c, _compact(c, value), dialect).verdict)
    return out


@SETTINGS
@given(tool=TOOLS, noun=NOUNS, name=NAMES, key=KEYS, value=handles(), minting=st.booleans())
def test_same_content_any_role_same_verdict(tool: str, noun: str, name: str, key: str, value: str, minting: bool) -> None:
    step = (_minting if minting else _read_only)(tool, noun, name, key, value)
    conv = _conv([Turn("user", f"Work on the {noun} {name}."), *step, *_noise(1), *_noise(2)])
    verdicts = _verdicts(conv, value)
    assert set(verdicts) == {"destructive" if minting else "safe"}, verdicts


@SETTINGS
@given(tool=TOOLS, noun=NOUNS, name=NAMES, value=handles(), change=st.booleans())
def test_value_the_agent_wrote_into_a_call(tool: str, noun: str, name: str, value: str, change: bool) -> None:
    """An opaque value first written into a call's arguments (an idempotency key) is
    required when the call changed something (§2c), whether it travels as a tool call
    or as a pasted command line; into a read-only call it is not."""
    verb = "submit" if change else "get"
    cmd = f"{tool} {noun} {verb} {name} --idempotency-key {value}"
    out = json.dumps({"name": name, "status": "queued" if change else "active"})
    conv = _conv([Turn("user", f"Handle the {noun} {name}."), *_step("c1", "bash", {"command": cmd}, out), *_noise(1), *_noise(2)])
    verdicts = _verdicts(conv, value)
    assert set(verdicts) == {"destructive" if change else "safe"}, (cmd, verdicts)
