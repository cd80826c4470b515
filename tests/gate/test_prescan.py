"""A request that drops long texts of its conversation — a client resending an earlier
request drops that request's reply — has them scanned for identifiers in the request
worker before its analysis (issue 16, :mod:`proxy.gate.prescan`): the event loop scans
no long text, and the gate decides as it does when it scans them itself."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from proxy.core.identifiers import extract, textscan
from proxy.core.identifiers.extract import ScanCache, extract_messages, extract_snapshot
from proxy.core.identifiers.longscan import long_scans
from proxy.core.identifiers.textscan import scan_text
from proxy.core.messages import Part, Snapshot, make_message
from proxy.gate import interceptor as interceptor_mod
from proxy.gate import prescan as prescan_mod
from proxy.state import offload
from tests.e2e.stack import GateStack
from tests.support.fake_upstream import Call, Reply, ToolCall

SHA = "9fceb02d0ae598e95dc970b74767f19372d61af8"
UUID = "3f2504e0-4f89-11d3-9a0c-0305e82c3301"
LONG = prescan_mod.LONG_TEXT + 1000


worker_scans: list[int] = []  # lengths of the texts the fake worker scanned


@pytest.fixture
def loop_scans(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Lengths of the long texts scanned for identifiers on an event loop's thread (the
    fake worker below scans in a thread of its own: :data:`worker_scans`), the scan cache emptied."""
    seen: list[int] = []
    worker_scans.clear()
    real = textscan.candidates

    def spy(text: str, *args: Any) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            if len(text) >= prescan_mod.LONG_TEXT:
                seen.append(len(text))
        return real(text, *args)

    async def worker(fn: Any, *args: Any) -> Any:  # the request worker: another thread
        worker_scans.append(len(args[0]))
        return await asyncio.to_thread(fn, *args)

    monkeypatch.setattr(textscan, "candidates", spy)
    monkeypatch.setattr(offload, "run", worker)
    extract.DEFAULT_CACHE.clear()  # nothing scanned before
    yield seen
    extract.DEFAULT_CACHE.clear()


def _reply(with_ids: bool) -> Any:
    text = ("the listing follows " + "line of output " * (LONG // 15))[:LONG]
    if with_ids:
        text = f"commit {SHA} " + text + f" {UUID}"

    def answer(call: Call) -> Reply:
        return Reply(text=text)

    return answer


def _resend(stack: GateStack, user_text: str) -> list[tuple[Any, ...]]:
    """The first request, then the same request again (its reply dropped); the events
    and the timeline the gate kept."""
    client = openai.OpenAI(api_key="sk-test-prescan", base_url=stack.openai_base_url, max_retries=0)
    msgs = [{"role": "user", "content": user_text}]
    for _ in range(2):
        client.chat.completions.create(model="gpt-4o", messages=msgs)  # type: ignore[arg-type]
    _, convs = stack.get("/gate/conversations")
    [conv] = convs["conversations"]
    _, detail = stack.get(f"/gate/conversations/{conv['id']}")
    timeline = [(t["relation"], t.get("transition"), t["messages"]) for t in detail["timeline"]]
    events = [(e["kind"], e.get("action"), e.get("verdict"), e.get("transition")) for e in stack.events()]
    return [tuple(timeline), tuple(events)]


@pytest.mark.parametrize("with_ids", [False, True])
def test_a_resent_request_scans_no_long_text_on_the_loop(with_ids: bool, loop_scans: list[int],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    user = "please list it " + "x" * LONG  # long too: scanned (in the worker) only when the reply held values
    stack = GateStack("default", _reply(with_ids))
    try:
        got = _resend(stack, user)
    finally:
        stack.close()
    assert loop_scans == []
    assert got[0][1][1] in ("fork", "truncate")  # the resend was analysed (no append)
    # the dropped reply; with values in it, the request's long text too (the full analysis may run)
    assert worker_scans == ([LONG + len(SHA) + len(UUID) + 9, len(user)] if with_ids else [LONG])
    # the same outcome as when the analysis scans them itself, on the loop
    monkeypatch.setattr(interceptor_mod, "prescan_lost", lambda *a: asyncio.sleep(0, 0))
    monkeypatch.setattr(interceptor_mod, "prescan_rest", lambda *a: asyncio.sleep(0, 0))
    extract.DEFAULT_CACHE.clear()
    stack = GateStack("default", _reply(with_ids))
    try:
        assert _resend(stack, user) == got
    finally:
        stack.close()
    assert loop_scans  # and that scanned them there


def _snapshots() -> tuple[Snapshot, Snapshot]:
    call = Part("tool_call", '{"cmd": "git log"}', tool_name="bash", tool_call_id="c1")
    result = Part("tool_result", f"commit {SHA}\n" + "log line\n" * (LONG // 9 + 1), tool_call_id="c1")
    user = make_message("user", [Part("text", f"upload {UUID} " + "x" * LONG)])
    before = Snapshot("openai", "", (
        user,
        make_message("assistant", [call]),
        make_message("tool", [result]),
        make_message("assistant", [Part("text", "done " + "y" * LONG + f" {SHA}")]),
    ))
    return before, Snapshot("openai", "", (user,))


def test_long_scans_name_the_keys_extraction_uses() -> None:
    before, _ = _snapshots()
    cache = ScanCache()
    jobs = long_scans(before, cache=cache, min_chars=LONG)
    assert len(jobs) == 3  # the user text, the tool result (with its call's context), the reply
    assert any(ctx for _, _, ctx in jobs)  # the tool result's context: its call
    lost = long_scans(before, cache=cache, min_chars=LONG, only=[2, 3])
    assert sorted(len(t) for _, t, _ in lost) == sorted(len(before.messages[i].text) for i in (2, 3))
    for key, text, ctx in jobs:
        cache.put(key, scan_text(text, None, ctx))
    assert long_scans(before, cache=cache, min_chars=LONG) == []  # all there now
    assert extract_snapshot(before, cache=cache) == extract_snapshot(before, cache=None)
    assert extract_messages(before, [2, 3], cache=cache) == extract_messages(before, [2, 3], cache=None)


def test_without_a_worker_the_analysis_scans_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    before, after = _snapshots()
    from proxy.core.transition import classify

    async def no_worker(fn: Any, *args: Any) -> None:
        return None

    monkeypatch.setattr(offload, "run", no_worker)
    cache = ScanCache()
    t = classify(before, after)
    assert asyncio.run(prescan_mod.prescan(before, after, t, None, cache)) == 0
    assert len(long_scans(before, cache=cache, min_chars=LONG)) == 3  # left to the analysis


class _Watched(tuple):  # type: ignore[type-arg]
    """A snapshot's messages that count how many of them are read."""

    reads = 0

    def __iter__(self) -> Iterator[Any]:
        _Watched.reads += len(self)
        return super().__iter__()

    def __getitem__(self, i: Any) -> Any:
        got = super().__getitem__(i)
        _Watched.reads += len(got) if isinstance(i, slice) else 1
        return got


def test_long_scans_of_a_history_read_only_its_new_messages() -> None:
    # a tool loop's next request: its last one (no long text; asked before) plus a call
    # and its result — the long texts it holds follow from the last answer and those two
    turns = [make_message("user", [Part("text", "go")])]
    for i in range(60):
        turns += [make_message("assistant", [Part("tool_call", f'{{"cmd": "ls {i}"}}', tool_name="bash", tool_call_id=f"c{i}")]),
                  make_message("tool", [Part("tool_result", f"file{i} {SHA}", tool_call_id=f"c{i}")])]
    cache = ScanCache()
    last = Snapshot("openai", "", tuple(turns[:-2]))
    assert long_scans(last, cache=cache, min_chars=LONG) == []
    tail = make_message("tool", [Part("tool_result", "z" * LONG, tool_call_id="c59")])
    for msgs, want in ((turns, 0), (turns[:-1] + [tail], 1)):
        snap = Snapshot("openai", "", _Watched(msgs))
        snap.with_digests(tuple(m.digest for m in msgs))
        _Watched.reads = 0
        jobs = long_scans(snap, cache=cache, min_chars=LONG)
        if not want:
            assert _Watched.reads == 2  # the call and its result, not the 121 messages
        assert [t for _, t, _ in jobs] == [m.text for m in msgs if len(m.text) >= LONG]


def test_a_change_without_long_texts_is_not_prescanned(monkeypatch: pytest.MonkeyPatch) -> None:
    # a replaced reply in histories of short texts: nothing to scan off the loop, so the
    # lost messages are not even extracted to decide whether the rest must be
    from proxy.core.transition import classify

    seen: list[object] = []
    monkeypatch.setattr(prescan_mod, "extract_messages", lambda *a, **k: seen.append(a) or [])
    user = make_message("user", [Part("text", f"upload {UUID}")])
    reply = make_message("assistant", [Part("tool_call", f'{{"cmd": "git show {SHA}"}}', tool_name="bash", tool_call_id="c1")])
    own = make_message("assistant", [Part("tool_call", '{"cmd": "ls"}', tool_name="bash", tool_call_id="c2")])
    before, after = Snapshot("openai", "", (user, reply)), Snapshot("openai", "", (user, own))
    t = classify(before, after)
    assert t.lost_region == (1,)
    assert asyncio.run(prescan_mod.prescan(before, after, t, None, ScanCache())) == 0
    assert seen == []
    long_after = Snapshot("openai", "", (user, own, make_message("tool", [Part("tool_result", "z" * LONG, tool_call_id="c2")])))
    asyncio.run(prescan_mod.prescan(before, long_after, classify(before, long_after), None, ScanCache()))
    assert len(seen) == 1  # a long text in the request: the lost messages decide what else is scanned


def test_a_change_the_quiet_path_settles_scans_only_its_lost_messages(loop_scans: list[int]) -> None:
    # the client replaces the model's call (a value its long first message holds: still
    # visible) with its own: settled from the lost call alone, so the history's long text
    # is scanned nowhere — not on the loop, not in the worker
    stack = GateStack("default", lambda call: Reply(tool_calls=[ToolCall("bash", {"cmd": f"git show {SHA}"})]))
    try:
        client = openai.OpenAI(api_key="sk-test-prescan", base_url=stack.openai_base_url, max_retries=0)
        msgs: list[Any] = [{"role": "user", "content": f"look at {SHA} " + "x" * LONG}]
        client.chat.completions.create(model="gpt-4o", messages=msgs)
        msgs += [{"role": "assistant", "content": None, "tool_calls": [
                     {"id": "own_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]},
                 {"role": "tool", "tool_call_id": "own_1", "content": "a b"}]
        client.chat.completions.create(model="gpt-4o", messages=msgs)
        _, convs = stack.get("/gate/conversations")
        [conv] = convs["conversations"]
        _, detail = stack.get(f"/gate/conversations/{conv['id']}")
        kinds = [t.get("transition") for t in detail["timeline"]]
        events = [e["kind"] for e in stack.events() if e["kind"] != "request"]
    finally:
        stack.close()
    assert kinds[-1] in ("fork", "edit") and events == []  # the replaced call, decided quietly
    assert loop_scans == [] and worker_scans == []


def test_a_lost_long_text_is_searched_for_the_gate_note_between_other_work(monkeypatch: pytest.MonkeyPatch) -> None:
    # the analysis asks whether a lost message holds the gate's note (a search of its
    # whole text): for a long one the prescan finds it a slice per loop step, other
    # tasks running between the slices, and the analysis reads the answer, not the text
    from proxy.core import analysis, notes
    from proxy.core.identifiers.steps import GATE_NOTE
    from proxy.core.transition import classify

    async def no_worker(fn: Any, *args: Any) -> None:
        return None

    monkeypatch.setattr(offload, "run", no_worker)
    read: list[int] = []
    real_texts = notes._texts
    monkeypatch.setattr(notes, "_texts", lambda m: read.append(len(m.text)) or real_texts(m))
    user = make_message("user", [Part("text", "go on")])
    for tail in ("", f" [{GATE_NOTE}: identifiers preserved]"):
        extract.DEFAULT_CACHE.clear()
        reply = make_message("assistant", [Part("text", "z" * (4 * notes.NOTE_SLICE) + tail)])
        before, after = Snapshot("openai", "", (user, reply)), Snapshot("openai", "", (user,))
        t = classify(before, after)
        assert list(t.lost_region) == [1]
        read.clear()
        expected = analysis.settled_safe(before, after, t)  # asked of the whole text, here
        assert read == [len(reply.text)]

        async def beside(before: Snapshot, t: Any) -> int:
            ticks = 0
            task = asyncio.create_task(prescan_mod.prenote_lost(before, t))
            while not task.done():
                ticks += 1
                await asyncio.sleep(0)
            assert await task == 1
            return ticks

        assert asyncio.run(beside(before, t)) >= 4  # the other task ran between the slices
        key = notes.note_key(reply)
        assert key is not None and extract.DEFAULT_CACHE.get(key) is bool(tail)
        read.clear()
        assert analysis.settled_safe(before, after, t) == expected  # the same answer,
        assert read == []  # read from the cache: the long text not searched again
    extract.DEFAULT_CACHE.clear()


class _ReadParts(tuple):  # type: ignore[type-arg]
    """A message's parts that note which message had them read (iterated)."""

    read: list[int]
    at: int

    def __iter__(self) -> Iterator[Any]:
        self.read.append(self.at)
        return super().__iter__()


def test_the_gate_note_prescan_reads_the_lost_messages_only() -> None:
    # which lost messages are long is asked of them, not of the whole previous history:
    # the history's remembered set of long messages (histtext.long_messages) missed on
    # every replaced reply — the previous history, the last request plus its reply, is
    # no prefix of the next — and was built anew from every message of it
    from proxy.core import histtext
    from proxy.core.messages import Message
    from proxy.core.transition import classify

    read: list[int] = []

    def counted(m: Message, at: int) -> Message:
        parts = _ReadParts(m.parts)
        parts.read, parts.at = read, at
        return Message(m.role, parts, m.name, m.digest)

    history = [make_message("user" if i % 2 else "assistant", [Part("text", f"step {i} of the task")]) for i in range(40)]
    for long_reply in (False, True):
        extract.DEFAULT_CACHE.clear()
        reply = make_message("assistant", [Part("text", ("x" * LONG) if long_reply else "a short reply")])
        mine = make_message("assistant", [Part("text", "my own next step")])
        before = Snapshot("openai", "", tuple(counted(m, i) for i, m in enumerate([*history, reply])))
        after = Snapshot("openai", "", (*before.messages[:-1], mine))
        t = classify(before, after)
        assert list(t.lost_region) == [40]
        read.clear()
        assert asyncio.run(prescan_mod.prenote_lost(before, t)) == int(long_reply)
        assert set(read) <= {40}
        # the same messages as the history's long set names
        assert {i for i in t.lost_region if before.messages[i].digest in histtext.long_messages(
            before.digests, before.messages, prescan_mod.LONG_TEXT)} == ({40} if long_reply else set())
    extract.DEFAULT_CACHE.clear()
