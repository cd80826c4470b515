"""Classify the transition between the history we saw and the next request.

The structure of the two message lists is the truth; agent markers (``markers.py``) only
name the agent and sharpen the kind. Messages are aligned by content digest
(:attr:`Message.digest`): a common prefix, verbatim blocks kept further on, and the gaps
between them. What a gap looks like decides the kind:

============  =================================================================
append        the new request extends the old history by whole messages
              (also when our recorded copy of the last assistant reply differs
              in form from the copy the client sends back)
summarize     a span of old messages replaced by new message(s) — a summary
truncate      old messages dropped (head or middle), nothing put in their place
mask          messages kept in place, tool-result contents replaced by a
              placeholder or a shorter text under the same tool_call_id
edit          messages kept in place with other content changes
fork          a prefix kept, the old tail gone (replaced or not), no summary —
              a rewind or a branch
reset         nothing shared and nothing that summarizes the old history: a new task
============  =================================================================

Several things can happen at once (Claude Code summarizes *and* clears tool results):
:attr:`Transition.components` lists them all, :attr:`Transition.kind` names the dominant
one (reset > summarize > truncate > fork > mask > edit > append).

Cost: the append path compares digests only (no text is read); the general alignment
(``difflib`` over digests) runs only when the request does not extend the history.

Its parts live apart: the digest alignment in ``alignment.py``, the test whether lost
messages only moved in ``moved.py``, the marker-free summary test in ``restatement.py``.
Whether a request alone *is* a summarization call is asked in ``summarize_request.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from .alignment import gaps_between, matching_blocks
from .markers import NO_MARKERS, Markers, fold
from .messages import Message, Part, Snapshot, is_opaque_summary
from .moved import only_moved
from .prefix import common_prefix
from .restatement import content_words, looks_like_summary
from .volatile import stable_system

TransitionKind = Literal["append", "summarize", "truncate", "mask", "edit", "fork", "reset"]

#: Dominance order used to pick :attr:`Transition.kind` from its components.
KIND_PRIORITY: tuple[TransitionKind, ...] = ("reset", "summarize", "truncate", "fork", "mask", "edit", "append")


@dataclass(frozen=True, slots=True)
class Change:
    """An old message kept in place (same position, role and tool-call structure) whose
    content changed. ``parts`` are the indexes of the parts that differ."""

    old_index: int
    new_index: int
    kind: Literal["mask", "edit"]
    parts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Transition:
    """How the new request relates to the old history. Indexes are message indexes
    (``Snapshot.messages``), ``old_*`` into the previous history, the rest into the new."""

    kind: TransitionKind
    components: frozenset[str]
    agent: str | None
    #: Length of the common prefix, in messages.
    prefix: int
    #: Verbatim kept blocks as ``(old_start, new_start, size)``.
    kept: tuple[tuple[int, int, int], ...]
    #: Old messages not present in the new request at all.
    lost: tuple[int, ...]
    #: Old messages kept in place but changed (masked or edited).
    changed: tuple[Change, ...]
    #: New messages recognised as a summary of the lost region.
    summary: tuple[int, ...]
    #: New messages after the last kept old message (the new turns).
    appended: tuple[int, ...]
    #: Other new messages (inserted, replacing an old span) that are not a summary.
    inserted: tuple[int, ...]
    system_changed: bool
    reason: str = ""
    #: How the agent was recognised ("continuation", "placeholder", …), if it was.
    agent_evidence: str | None = field(default=None)

    @property
    def lost_region(self) -> tuple[int, ...]:
        """Old message indexes whose content the model no longer sees as it was: lost
        messages plus the old side of masked/edited ones."""
        return tuple(sorted(set(self.lost) | {c.old_index for c in self.changed}))

    @property
    def is_compaction(self) -> bool:
        """True when old content became invisible (anything but append and reset)."""
        return self.kind not in ("append", "reset")

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "components": sorted(self.components),
            "agent": self.agent,
            "prefix": self.prefix,
            "lost": list(self.lost),
            "changed": [
                {"old_index": c.old_index, "new_index": c.new_index, "kind": c.kind, "parts": list(c.parts)}
                for c in self.changed
            ],
            "summary": list(self.summary),
            "appended": list(self.appended),
            "inserted": list(self.inserted),
            "system_changed": self.system_changed,
            "reason": self.reason,
        }


# --------------------------------------------------------------------------- helpers


def _structure(m: Message) -> tuple[object, ...]:
    """Role plus the tool-call skeleton: what must match for an in-place change."""
    return (m.role, tuple((p.kind, p.tool_call_id) for p in m.parts if p.kind in ("tool_call", "tool_result")))


def _reply_form(m: Message) -> tuple[object, ...]:
    out: list[object] = []
    for p in m.parts:
        if p.kind == "text" and p.text.strip():
            out.append(("text", fold(p.text)))
        elif p.kind == "tool_call":
            out.append(("tool_call", p.tool_call_id or p.tool_name))
    return tuple(out)


def same_reply(recorded: Message, sent: Message) -> bool:
    """Whether the client's copy of an assistant reply is the reply we recorded, allowing
    for re-serialisation: dropped thinking, whitespace, tool-call argument formatting."""
    if recorded.role != "assistant" or sent.role != "assistant":
        return False
    a, b = _reply_form(recorded), _reply_form(sent)
    if a == b and a:
        return True
    ids_a = [p.tool_call_id for p in recorded.tool_calls if p.tool_call_id]
    ids_b = [p.tool_call_id for p in sent.tool_calls if p.tool_call_id]
    return bool(ids_a) and ids_a == ids_b


def _is_placeholder(old: Part, new: Part, markers: Markers) -> tuple[bool, str | None]:
    folded = fold(new.text)
    known, agent = markers.placeholder_agent(folded) if folded else (False, None)
    if known:
        return True, agent
    # Any shorter text under the same tool_call_id is a mask (placeholder, head of output…).
    return len(new.text) < len(old.text), None


_TOOL_KINDS = ("tool_call", "tool_result")


def _pair_change(
    oi: int, ni: int, old: Message, new: Message, markers: Markers
) -> tuple[Change, str | None, bool]:
    """Compare two messages with the same tool skeleton. Returns the change, the agent
    named by a placeholder (if any) and whether only the prose (non-tool parts) changed."""
    old_tools = [(k, q) for k, q in enumerate(old.parts) if q.kind in _TOOL_KINDS]
    new_tools = [q for q in new.parts if q.kind in _TOOL_KINDS]
    changed: list[int] = []
    kind: Literal["mask", "edit"] = "mask"
    agent: str | None = None
    for (k, po), pn in zip(old_tools, new_tools, strict=False):
        if po == pn:
            continue
        changed.append(k)
        if po.kind == "tool_result":
            masked, a = _is_placeholder(po, pn, markers)
            agent = agent or a
            if not masked:
                kind = "edit"
        else:
            kind = "edit"
    old_prose = [(k, q) for k, q in enumerate(old.parts) if q.kind not in _TOOL_KINDS]
    new_prose = [q for q in new.parts if q.kind not in _TOOL_KINDS]
    prose_changed = [q for _, q in old_prose] != new_prose
    if prose_changed:
        kind = "edit"
        changed.extend(k for k, _ in old_prose)
    text_only = prose_changed and len(changed) == len(old_prose)
    return Change(oi, ni, kind, tuple(sorted(changed))), agent, text_only


def last_turn_start(messages: Sequence[Message]) -> int:
    """Where the history's last turn begins: its trailing assistant message(s) — the
    reply — and the user message they answer, if it directly precedes them. (In an
    agent loop driven by tool results the last turn is the reply alone.)"""
    i = len(messages) - 1
    while i >= 0 and messages[i].role == "assistant":
        i -= 1
    if i >= 0 and messages[i].role == "user" and i < len(messages) - 1:
        return i
    return i + 1


def within_last_turn(t: Transition, before: Snapshot) -> bool:
    """Whether the transition changed nothing but ``before``'s last turn (see
    :func:`last_turn_start`): an edited or regenerated last turn, a reply the client
    replaced with its own message, a fork of the last turn — not a compaction of the
    history, whatever its kind. The system prompt and the rest are unchanged."""
    lost = t.lost_region
    if not lost or t.system_changed:
        return False
    return lost[0] >= last_turn_start(before.messages)


# --------------------------------------------------------------------------- classify


def classify(
    before: Snapshot,
    after: Snapshot,
    markers: Markers = NO_MARKERS,
    *,
    lenient_last_reply: bool = True,
) -> Transition:
    """Classify the transition from the history ``before`` to the request ``after``.

    ``lenient_last_reply``: the last assistant message of ``before`` is a reply we
    recorded ourselves (streamed or not); accept the client's re-serialised copy of it as
    the same message (see :func:`same_reply`).
    """
    old, new = before.digests, after.digests
    system_changed = before.system != after.system and stable_system(before.system) != stable_system(after.system)
    p = common_prefix(old, new)

    # --- append: the fast path, digests only.
    if p == len(old):
        return _append(len(old), len(new), p, system_changed, "request extends the history")
    if p == len(old) - 1 and p < len(new):
        last, sent = before.messages[p], after.messages[p]
        if lenient_last_reply and same_reply(last, sent):
            return _append(len(old), len(new), p, system_changed, "request extends the history (re-serialised last reply)")
        same_role = last.role == sent.role or (last.role == "tool" and sent.role == "user")
        if same_role and len(sent.parts) > len(last.parts) and sent.parts[: len(last.parts)] == last.parts:
            # Anthropic puts the next user text into the message holding the tool results.
            return _append(len(old), len(new), p, system_changed, "request extends the history (last message extended)")

    return _classify_general(before, after, markers, p, system_changed)


def _append(n_old: int, n_new: int, p: int, system_changed: bool, reason: str) -> Transition:
    kept = ((0, 0, n_old),) if n_old else ()
    return Transition(
        kind="append",
        components=frozenset({"append"}),
        agent=None,
        prefix=p,
        kept=kept,
        lost=(),
        changed=(),
        summary=(),
        appended=tuple(range(n_old, n_new)),
        inserted=(),
        system_changed=system_changed,
        reason=reason,
    )


def _classify_general(
    before: Snapshot, after: Snapshot, markers: Markers, p: int, system_changed: bool
) -> Transition:
    old_msgs, new_msgs = before.messages, after.messages
    blocks = matching_blocks(before.digests, after.digests, p)
    gaps = gaps_between(blocks, len(old_msgs), len(new_msgs))

    lost: list[int] = []
    changed: list[Change] = []
    appended: list[int] = []
    components: set[str] = set()
    reasons: list[str] = []
    agent: str | None = None
    evidence: str | None = None
    #: new messages that might be a summary: (index, gap position, kind of slot)
    candidates: list[tuple[int, str, str]] = []
    #: in-place text changes that might be a summary: (change, old index)
    text_changes: list[Change] = []
    repacked: list[int] = []

    def note_agent(a: str | None, how: str) -> None:
        nonlocal agent, evidence
        if a and agent is None:
            agent, evidence = a, how

    for olo, ohi, nlo, nhi, pos in gaps:
        n_old, n_new = ohi - olo, nhi - nlo
        if n_old == 0:
            if pos == "trailing":
                appended.extend(range(nlo, nhi))
            else:
                candidates.extend((j, pos, "inserted") for j in range(nlo, nhi))
            continue
        if n_new == 0:
            lost.extend(range(olo, ohi))
            if pos == "trailing":
                components.add("fork")
                reasons.append(f"old tail {olo}..{ohi - 1} gone")
            else:
                components.add("truncate")
                reasons.append(f"messages {olo}..{ohi - 1} dropped")
            continue
        if n_old == n_new and all(
            _structure(old_msgs[olo + k]) == _structure(new_msgs[nlo + k]) for k in range(n_old)
        ):
            for k in range(n_old):
                ch, a, text_only = _pair_change(olo + k, nlo + k, old_msgs[olo + k], new_msgs[nlo + k], markers)
                note_agent(a, "placeholder")
                if text_only:
                    text_changes.append(ch)
                else:
                    changed.append(ch)
            continue
        # A span replaced by different messages. Messages made only of old parts are the
        # same content re-packed (Anthropic merges a tool result and the next user text).
        lost.extend(range(olo, ohi))
        old_parts = {part for i in range(olo, ohi) for part in old_msgs[i].parts}
        fresh = 0
        for j in range(nlo, nhi):
            if new_msgs[j].parts and all(part in old_parts for part in new_msgs[j].parts):
                repacked.append(j)
            else:
                candidates.append((j, pos, "replacing"))
                fresh += 1
        if not fresh:  # only re-packed old content: some of it was cut, nothing added
            components.add("truncate")
            reasons.append(f"messages {olo}..{ohi - 1} partly dropped")

    # --- which new messages summarize the lost content?
    lost_idx = sorted(set(lost) | {c.old_index for c in text_changes} | {c.old_index for c in changed})
    lost_text_parts = [old_msgs[i].text for i in lost_idx]
    lost_text = "\n".join(lost_text_parts)
    lost_memo: list[set[str]] = []

    def lost_words() -> set[str]:  # read once, and only if a candidate asks
        if not lost_memo:
            lost_memo.append(content_words(lost_text))
        return lost_memo[0]

    summary: list[int] = []
    inserted: list[int] = []
    continuation: dict[int, str | None] = {}  # a new message's marker agent, read once
    # Only the old history's last turn changed (its reply, or the reply and the user
    # message it answers; messages kept before it, the system prompt the same): the
    # client replaced, regenerated or edited that turn, and what stands in its place is
    # its own next step, not a restatement of the turn. A marker-free summary test does
    # not apply (a summary restates history a compaction removed, and no compaction
    # removes the last turn alone — see :func:`within_last_turn`); an agent's
    # continuation marker and the API's opaque summary still count.
    own_step = bool(lost_idx) and p > 0 and not system_changed and lost_idx[0] >= last_turn_start(old_msgs)

    def continuation_of(j: int) -> str | None:
        if j not in continuation:
            m = new_msgs[j]
            continuation[j] = markers.continuation_agent(fold(m.text), m.role)
        return continuation[j]

    for j, pos, slot in candidates:
        m = new_msgs[j]
        a = continuation_of(j) if markers.agents else None
        if a:
            note_agent(a, "continuation")
            summary.append(j)
        elif is_opaque_summary(m) and lost_idx:
            summary.append(j)  # the API's own (encrypted) summary of the lost messages
        elif slot == "replacing" and pos in ("leading", "middle"):
            summary.append(j)  # structural: a span replaced by new message(s), kept ones after
        elif lost_text and not own_step and looks_like_summary(m.text, lost_text, markers, lost_words):
            summary.append(j)
        elif slot == "replacing" and pos in ("trailing", "all"):
            appended.append(j)
        else:
            inserted.append(j)
    for j in list(appended):  # a continuation marker in a new trailing message
        a = continuation_of(j) if markers.agents and lost_idx else None
        if a:
            note_agent(a, "continuation")
            appended.remove(j)
            summary.append(j)
    for ch in text_changes:
        m, o = new_msgs[ch.new_index], old_msgs[ch.old_index]
        a = markers.continuation_agent(fold(m.text), m.role) if markers.agents else None
        if a:
            note_agent(a, "continuation")
        # Without a marker, a rewrite in place is a summary only when it grew a lot
        # (it now carries more than the message it replaced); otherwise it is an edit.
        grew = len(m.text) >= 2 * len(o.text) + 80
        if a or (grew and not own_step and looks_like_summary(m.text, lost_text, markers, lost_words)):
            lost.append(ch.old_index)
            summary.append(ch.new_index)
        else:
            changed.append(ch)

    if summary:
        components.add("summarize")
        reasons.insert(0, f"{len(summary)} new message(s) summarize the lost content")
    replaced_tail = any(pos in ("trailing", "all") and slot == "replacing" for _, pos, slot in candidates)
    if replaced_tail and not summary:
        if blocks or repacked:
            components.add("fork")
            reasons.append("the old tail was replaced by a different continuation")
        else:
            components.add("reset")
            reasons.append("nothing shared with the previous history")
    elif not blocks and not repacked and not summary and not changed and len(new_msgs) > 0:
        # Nothing shared, and new content that does not restate the old: a new task. (With
        # no new message at all the whole history was cut: a truncation, not a new task.)
        components.add("reset")
        reasons.append("nothing shared with the previous history")
    if inserted:
        components.add("edit")
        reasons.append(f"{len(inserted)} message(s) inserted")
    for ch in changed:
        components.add(ch.kind)
    if any(c.kind == "mask" for c in changed):
        reasons.append(f"{sum(c.kind == 'mask' for c in changed)} tool result(s) replaced by placeholders")
    if any(c.kind == "edit" for c in changed):
        reasons.append(f"{sum(c.kind == 'edit' for c in changed)} message(s) edited in place")
    if not components:
        components.add("append")
    kind = next(k for k in KIND_PRIORITY if k in components)
    moved = only_moved(before, after, set(lost) | {c.old_index for c in changed}, agent)
    if kind != "reset" and moved is not None:
        return _append(len(old_msgs), len(new_msgs), p, system_changed, moved)
    if kind == "reset":
        agent = evidence = None
    return Transition(
        kind=kind,
        components=frozenset(components),
        agent=agent,
        prefix=p,
        kept=tuple(blocks),
        lost=tuple(sorted(set(lost))),
        changed=tuple(sorted(changed, key=lambda c: c.old_index)),
        summary=tuple(sorted(summary)),
        appended=tuple(sorted(appended)),
        inserted=tuple(sorted(inserted)),
        system_changed=system_changed,
        reason="; ".join(reasons),
        agent_evidence=evidence,
    )
