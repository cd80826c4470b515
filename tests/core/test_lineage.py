"""Lineage matching: table-driven cases plus properties over random histories."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.lineage import commonplace, line_fingerprints, match, relate
from proxy.core.lineage_index import History, LineageIndex, Probe
from proxy.core.messages import Part, make_message

SYS = "sys-hash"


def d(*names: str) -> tuple[str, ...]:
    return tuple(f"d-{n}" for n in names)


def hist(cid: str, digests: tuple[str, ...], request_len: int | None = None, ns: str = "t1",
         system: str = SYS, seen: float = 1.0) -> History:
    return History(cid, ns, system, digests, len(digests) if request_len is None else request_len, seen)


def index(*hs: History) -> LineageIndex:
    ix = LineageIndex()
    for h in hs:
        ix.upsert(h)
    return ix


def probe(digests: tuple[str, ...], ns: str = "t1", system: str = SYS, **kw: object) -> Probe:
    return Probe(ns, system, digests, **kw)  # type: ignore[arg-type]


HIST = d(*"abcdefghij")  # u1 a1 t1 ... ten messages


def test_extend_continues_the_conversation() -> None:
    ix = index(hist("A", HIST))
    m = match(ix, probe(HIST + d("k", "l")))
    assert (m.conversation_id, m.relation, m.prefix_len) == ("A", "extend", 10)


def test_identical_request_is_an_extension_retry() -> None:
    assert match(index(hist("A", HIST)), probe(HIST)).relation == "extend"


def test_extend_when_client_rewrote_our_recorded_reply() -> None:
    # history = 10 request messages + our recorded reply "R"; the client sent its own form
    ix = index(hist("A", HIST + d("R"), request_len=10))
    m = match(ix, probe(HIST + d("R2", "u")))
    assert (m.conversation_id, m.relation) == ("A", "extend")


def test_langchain_summary_plus_last_messages_is_compacted() -> None:
    long = d(*[str(i) for i in range(60)])
    ix = index(hist("A", long))
    m = match(ix, probe(d("summary") + long[-20:] + d("new")))
    assert (m.conversation_id, m.relation, m.suffix_len, m.dropped) == ("A", "compacted", 20, 40)


def test_plain_head_truncation_is_compacted() -> None:
    ix = index(hist("A", HIST))
    m = match(ix, probe(HIST[4:]))
    assert (m.conversation_id, m.relation, m.suffix_len) == ("A", "compacted", 6)


def test_masking_in_place_is_compacted() -> None:
    ix = index(hist("A", HIST))
    masked = HIST[:2] + d("cleared", "cleared") + HIST[4:] + d("x")
    m = match(ix, probe(masked))
    assert (m.conversation_id, m.relation, m.prefix_len) == ("A", "compacted", 2)


def test_parallel_conversations_with_same_system_prompt_stay_separate() -> None:
    ix = index(hist("A", d("task-a", "a1", "a2")))
    m = match(ix, probe(d("task-b", "b1")))
    assert m.relation == "new" and m.conversation_id is None
    ix.upsert(hist("B", d("task-b", "b1")))
    assert match(ix, probe(d("task-a", "a1", "a2", "a3"))).conversation_id == "A"
    assert match(ix, probe(d("task-b", "b1", "b2"))).conversation_id == "B"


def test_fork_sharing_a_prefix_is_a_new_linked_conversation() -> None:
    ix = index(hist("A", HIST))
    m = match(ix, probe(HIST[:3] + d("other", "path")))
    assert (m.conversation_id, m.relation, m.parent_id, m.prefix_len) == (None, "fork", "A", 3)


def test_sibling_forks_keep_their_own_lines() -> None:
    ix = index(hist("A", d("u", "a1")), hist("F", d("u", "b1"), seen=2.0))
    assert match(ix, probe(d("u", "a1", "r", "a2"))).conversation_id == "A"
    assert match(ix, probe(d("u", "b1", "r", "b2"))).conversation_id == "F"


def test_summarization_side_request_is_attached() -> None:
    ix = index(hist("A", HIST))
    m = match(ix, probe(HIST + d("summarize!"), summarize_hint=True))
    assert (m.conversation_id, m.relation) == ("A", "side_request")


def test_pasted_history_side_request_is_attached_by_lines() -> None:
    ix = index(hist("A", HIST))
    lines = [f"line number {i} of the tool output with id {i:08x}" for i in range(10)]
    ix.add_lines("A", line_fingerprints("\n".join(lines)))
    pasted = "Summarize:\n" + "\n".join(f"tool (bash): {x}" for x in lines)
    m = match(ix, probe(d("paste"), text_lines=line_fingerprints(pasted), summarize_hint=True))
    assert (m.conversation_id, m.relation) == ("A", "side_request")
    assert m.line_hits >= 3
    # without a hint, the pasted text must cover most of the request
    m2 = match(ix, probe(d("paste"), text_lines=line_fingerprints(pasted)))
    assert m2.relation == "side_request"
    unrelated = line_fingerprints("\n".join(f"something else entirely number {i}" for i in range(30)) + "\n" + pasted)
    assert match(ix, probe(d("paste"), text_lines=unrelated)).relation == "new"


def test_tenants_never_match_each_other() -> None:
    ix = index(hist("A", HIST, ns="tenant-1"))
    assert match(ix, probe(HIST + d("x"), ns="tenant-2")).relation == "new"


def test_common_digests_do_not_create_matches() -> None:
    ix = index(*[hist(f"C{i}", d(f"first{i}", "ok")) for i in range(100)])
    assert match(ix, probe(d("mine", "ok"))).relation == "new"


def test_scoped_probe_without_overlap_is_a_compaction_of_the_scope() -> None:
    ix = index(hist("S", HIST, ns="t1|sess"))
    m = match(ix, probe(d("continued"), ns="t1|sess", scoped=True))
    assert (m.conversation_id, m.relation) == ("S", "compacted")
    # a different system prompt in the same session is another thread (sub-agent)
    assert match(ix, probe(d("task"), ns="t1|sess", system="other", scoped=True)).relation == "new"


def test_continuation_marker_turns_fork_into_compaction() -> None:
    ix = index(hist("A", HIST))
    m = match(ix, probe(HIST[:1] + d("Another language model started..."), continuation_hint=True))
    assert (m.conversation_id, m.relation) == ("A", "compacted")


def test_a_commonplace_message_alone_does_not_tie_a_request_to_a_conversation() -> None:
    # A's last request ends with the user's "yes"; B, another conversation of the same
    # agent seen for the first time, holds a "yes" too. Sharing the system prompt and
    # that one message is no evidence that B is A compacted (before: it was, and A's
    # required bindings were re-injected into B).
    ix = index(hist("A", d("upload", "call", "result", "yes")))
    b = d("list", "ask", "yes", "answer", "count")
    common = {"d-yes", "d-ask", "d-count"}.__contains__
    assert match(ix, probe(b)).relation == "compacted"  # what the digests alone say
    assert match(ix, probe(b, common=common)).relation == "new"
    # a request that says it continues a compacted conversation is one: the tail tells which
    m = match(ix, probe(d("summary", "yes"), common=common, continuation_hint=True))
    assert (m.conversation_id, m.relation, m.suffix_len) == ("A", "compacted", 1)
    # a distinctive kept message (a tool result, an id) is still evidence ...
    assert match(ix, probe(d("summary", "result", "yes"), common=common)).relation == "compacted"
    # ... and so are two kept messages even of the commonplace kind when a prefix is shared
    ix2 = index(hist("A", d("upload", "ask", "yes")))
    assert match(ix2, probe(d("upload", "x", "ask", "yes"), common=common)).relation == "compacted"
    # a named conversation needs no proving
    m = relate(hist("A", d("upload", "call", "result", "yes")), probe(b, common=common))
    assert (m.relation, m.suffix_len) == ("compacted", 1)


def test_commonplace_is_a_short_text_without_digits_or_tool_parts() -> None:
    msgs = [
        make_message("user", (Part("text", "yes"),)),
        make_message("user", (Part("text", "ok, go on with the next step please"),)),
        make_message("user", (Part("text", "use revision 3f9a1c2b7d4e"),)),
        make_message("user", (Part("text", "x" * 49),)),
        make_message("tool", (Part("tool_result", "ok", tool_call_id="call_1"),)),
        make_message("assistant", (Part("tool_call", "{}", tool_name="bash", tool_call_id="call_2"),)),
    ]
    common = commonplace(msgs)
    assert [common(m.digest) for m in msgs] == [True, True, False, False, False, False]
    assert common("not-in-the-request") is False


def test_relate_for_explicit_ids() -> None:
    h = hist("X", HIST)
    assert relate(None, probe(HIST)).relation == "new"
    assert relate(h, probe(HIST + d("n"))).relation == "extend"
    assert relate(h, probe(d("summary"))).relation == "compacted"
    assert relate(h, probe(HIST + d("s"), summarize_hint=True)).relation == "side_request"


def test_index_remove_and_rewrite_update_postings() -> None:
    ix = index(hist("A", HIST))
    ix.upsert(hist("A", d("z", "y")))
    assert match(ix, probe(HIST)).relation == "new"
    assert match(ix, probe(d("z", "y", "x"))).conversation_id == "A"
    ix.remove("A")
    assert len(ix) == 0 and match(ix, probe(d("z", "y", "x"))).relation == "new"


def test_long_histories_match_through_sampling() -> None:
    long = d(*[str(i) for i in range(2000)])
    ix = index(hist("A", long), *[hist(f"B{i}", d(*[f"b{i}-{j}" for j in range(50)])) for i in range(50)])
    assert match(ix, probe(long + d("n"))).relation == "extend"
    m = match(ix, probe(d("summary") + long[-700:]))
    assert (m.conversation_id, m.relation, m.suffix_len) == ("A", "compacted", 700)


def test_extension_found_among_many_conversations_sharing_its_head() -> None:
    """Sub-agents started from one prompt share their first messages: the request is
    matched to the one whose history it extends, also past the sampled candidates."""
    from proxy.core.lineage_index import MAX_CANDIDATES

    head = d("sys", "task")
    siblings = [hist(f"S{i}", head + d(*[f"s{i}-{j}" for j in range(5)]), seen=float(i)) for i in range(40)]
    target = hist("T", head + d("t-1", "t-2"), seen=0.0)  # the oldest: never a top sampled candidate
    ix = index(target, *siblings)
    assert len(siblings) > MAX_CANDIDATES
    m = match(ix, probe(head + d("t-1", "t-2", "t-3")))
    assert (m.conversation_id, m.relation, m.prefix_len) == ("T", "extend", 4)
    # a one-message history is indexed by its single head digest
    ix.upsert(hist("U", d("solo")))
    assert match(ix, probe(d("solo", "more"))).conversation_id == "U"


def test_heads_shared_too_widely_fall_back_to_sampled_postings() -> None:
    from proxy.core.lineage_index import MAX_HEAD_SHARE

    head = d("sys", "task")
    crowd = [hist(f"C{i}", head + d(f"c{i}"), seen=float(i)) for i in range(MAX_HEAD_SHARE + 1)]
    ix = index(*crowd)
    assert ix._extended(probe(head + d("c3", "next"))) is None  # too many to scan
    m = match(ix, probe(head + d("c3", "next")))
    assert (m.conversation_id, m.relation) == ("C3", "extend")


def test_head_index_follows_rewrites_and_removal() -> None:
    ix = index(hist("A", d("a", "b", "c")))
    ix.upsert(hist("A", d("x", "y")))  # head replaced (a compaction)
    assert match(ix, probe(d("a", "b", "c", "d"))).relation == "new"
    assert match(ix, probe(d("x", "y", "z"))).relation == "extend"
    ix.remove("A")
    assert ix._extended(probe(d("x", "y", "z"))) == []


# --------------------------------------------------------------------------- properties

messages = st.lists(st.text(alphabet="abcdefghijklmnop", min_size=1, max_size=6), min_size=1, max_size=80, unique=True)


@settings(max_examples=200, deadline=None)
@given(messages, st.lists(st.text(alphabet="qrstuvwxyz", min_size=1, max_size=4), max_size=10), st.data())
def test_extending_never_makes_a_new_conversation(hist_names: list[str], extra: list[str], data: st.DataObject) -> None:
    others = data.draw(st.lists(messages, max_size=4))
    ix = index(hist("A", d(*hist_names)), *[hist(f"O{i}", d(*[f"o{i}{x}" for x in o])) for i, o in enumerate(others)])
    m = match(ix, probe(d(*hist_names) + tuple(f"new-{x}" for x in extra)))
    assert (m.conversation_id, m.relation) == ("A", "extend")


@settings(max_examples=200, deadline=None)
@given(messages, st.data())
def test_head_drop_with_kept_tail_matches(hist_names: list[str], data: st.DataObject) -> None:
    n = len(hist_names)
    keep = data.draw(st.integers(min_value=min(2, n), max_value=n))
    head = data.draw(st.lists(st.sampled_from(["summary", "note", "marker"]), max_size=2, unique=True))
    new = data.draw(st.lists(st.sampled_from(["n1", "n2", "n3"]), max_size=3, unique=True))
    digests = d(*hist_names)
    ix = index(hist("A", digests), hist("B", d("unrelated", "history")))
    m = match(ix, probe(tuple(f"h-{x}" for x in head) + digests[n - keep :] + tuple(f"x-{x}" for x in new)))
    assert m.conversation_id == "A"
    assert m.relation in ("extend", "compacted")


_digest_lists = st.lists(st.sampled_from(d(*"abcdefgh")), max_size=30).map(tuple)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from(["A", "B"]), st.integers(0, 30), _digest_lists), max_size=12))
def test_upserts_leave_the_postings_of_a_fresh_index(steps: list[tuple[str, int, tuple[str, ...]]]) -> None:
    """Whatever the changes (a replaced tail, a rewrite, repeated digests), the posting
    lists after each upsert are those of an index built from the current histories."""
    ix = LineageIndex()
    current: dict[str, tuple[str, ...]] = {}
    for cid, keep, tail in steps:
        digests = current.get(cid, ())[:keep] + tail  # keep a prefix, replace the rest
        current[cid] = digests
        ix.upsert(hist(cid, digests))
        fresh = index(*[hist(c, ds) for c, ds in current.items()])
        assert ix.postings_of("t1")["postings"] == fresh.postings_of("t1")["postings"]


@pytest.mark.parametrize(("a", "b"), [("A", "B"), ("conv-a-7f3e", "conv-b-91c2")])
def test_a_continued_conversation_is_the_one_whose_lines_it_repeats(a: str, b: str) -> None:
    """Two agents of one kind (one system prompt, one tenant, no session id): a request
    continuing a compacted conversation belongs to the one whose lines it carries (here
    the user's last message, kept verbatim), not to whichever was seen last. (A line only
    one conversation holds is posted as its bare id: counted as that id, whatever its
    length — not as its characters.)"""
    a_lines = [f"migrate the billing schema, revision {i:012x} applied" for i in range(3)]
    b_lines = [f"resize the image bucket upload {i:08x} in region eu" for i in range(3)]
    ix = index(hist(a, d("a1", "a2", "a3"), seen=1.0), hist(b, d("b1", "b2", "b3"), seen=2.0))
    ix.add_lines(a, line_fingerprints("\n".join(a_lines)))
    ix.add_lines(b, line_fingerprints("\n".join(b_lines)))
    summary = "This session is being continued from a previous conversation.\n" + a_lines[-1]
    m = match(ix, probe(d("summary"), text_lines=line_fingerprints(summary), continuation_hint=True))
    assert (m.conversation_id, m.relation) == (a, "compacted")
    # without any line of either, the latest seen (as before)
    m2 = match(ix, probe(d("summary"), text_lines=line_fingerprints("Continued: nothing quoted here at all"),
                         continuation_hint=True))
    assert m2.conversation_id == b
