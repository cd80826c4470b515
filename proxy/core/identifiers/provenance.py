"""Provenance: which identifiers are REQUIRED bindings (corpus/PRINCIPLES.md §2–§3).

For every identifier the model saw, this module finds where its value first appeared —
a tool result, a tool call's arguments, user, assistant or system text, and inside text
the *step* that printed it (pasted command output counts as a step: :mod:`.steps`) —
whether that step changed state (its call, judged by :mod:`.commands`, then by what its
output says: :mod:`.evidence`), and whether a later step changed the resource the value
describes. The value is required (``regenerable=False``) when one of these holds:

- **2a minted**: its first appearance is the output of a state-changing step and it is a
  handle to what the step made — not an echo of the step's arguments or of anything
  earlier, not a new *state* value (offsets after a reset: §3c), not noise (§3d), not a
  name without a machine-made part (§3b, §3c), not the id of a resource the step only
  modified (``Modifying... [id=…]``, the ARN of the stack it named: §3b);
- **2b prior state**: it describes the state of a resource that a LATER state-changing
  step changed — a read and a later change are *linked* when they name the same resource
  (:func:`.evidence.link_keys`) or the change names a value the read returned — and it
  is not the identity of a listed entity, an echo of the read's own arguments, an entry
  of a history listing (§3d), a name or noise; or a state-changing step's output marks it
  as the state before the change (``previous image:``, ``A -> B``);
- **2c first written into a state-changing call**: its first appearance from any source
  other than the agent's own words is the arguments of a state-changing step, and it is
  opaque (an idempotency key, the digest deployed), not a derivable name (§3b).

A value listed in a note the gate itself inserted (a re-injection after an earlier
compaction) stays required (``2*``): the judgement that put it there was made when its
provenance was still visible.

Otherwise it is regenerable, with the reason (``why``): ``3a`` read-only, ``3b`` echo or
derivable, ``3c`` current state or configuration name, ``3d`` noise, ``-`` no step said
anything. The carrier role never matters: a tool result, pasted user text and assistant
text are judged alike. Secrets are judged like any value (a JWT a login minted is
required); the caller must never show them in clear.

Cost: one pass over the identifiers plus, for values that could be prior state, a scan
of the later state-changing steps of their step (precomputed once per snapshot).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from proxy.core.messages import TEXTUAL_KINDS, Snapshot

from .commands import CallClass
from .evidence import (
    identity_label,
    moves_between_commits,
    names_the_call,
    preexisting_line,
    prior_marked,
    reference_nouns,
    reports_failure,
    scope_reference,
)
from .model import SYSTEM_INDEX, TOOLS_INDEX, Identifier
from .normalize import identifying_token
from .stepmodel import Step, call_step, join_observations, text_step
from .steps import GATE_NOTE, TextStep, text_steps
from .validators import generated_suffix, has_opaque_part

__all__ = ["CallRef", "Step", "judge", "never_required"]


@dataclass(frozen=True, slots=True)
class CallRef:
    """A tool call of the snapshot as extraction linked it: where it is, and its class."""

    message_index: int
    part_index: int
    tool_name: str | None
    cls: CallClass


#: Role of an occurrence within its step.
_ARGS, _OUT, _MENTION = "args", "out", "mention"


@dataclass(frozen=True, slots=True)
class _Occ:
    order: tuple[int, int, int]
    ident: Identifier
    step: Step | None
    role: str
    text: str
    #: Written by the agent itself (its prose, thinking or call arguments).
    agent: bool = False


def _order_index(mi: int) -> int:
    # tool definitions and the system prompt precede every message
    return -2 if mi == TOOLS_INDEX else -1 if mi == SYSTEM_INDEX else mi


_COMPONENTS = re.compile(r"[:/@]+")
_PIECES = re.compile(r"[A-Za-z0-9]+(?:[-_.][A-Za-z0-9]+)*")


def _names_from_args(value: str, step: Step) -> bool:
    """The value is the output's identifier for a resource the step's arguments named
    (``arn:…:stack/web/…`` for ``--stack-name web``, the full path of the key given)."""
    comps = {c.lower() for c in _COMPONENTS.split(value) if len(c) >= 3}
    return bool(comps & step.keys) or any(len(k) >= 6 and k in value.lower() for k in step.keys if not k.startswith("@"))


_NUMBERED = re.compile(r"/\d{2,}(?=$|[/?#])")


def _minted_name(value: str, kind: str, opaque: bool) -> bool:
    """A name a step could have minted: one with a machine-made part (a stamp, a random
    suffix), a URL ending in a number the service assigned (``…/pull/4812``), or a name
    generated from a prefix (``job.batch/migrate-23mt8``). A readable name without any
    of these is one the task or the configuration gave (§3b, §3c)."""
    if opaque or generated_suffix(value):
        return True
    return kind == "url" and _NUMBERED.search(value.split("?", 1)[0]) is not None


def never_required(ident: Identifier, binding_of: Callable[[str], str]) -> bool:
    """Whether no history can make ``ident`` required by the rules of :func:`_decide`: a
    value with no machine-made part that is noise or a readable name (PRINCIPLES §3b–3d —
    the agent can name it, or read it, again). 2a needs a handle (not noise, a state or
    a readable name), 2b a value that is neither a name nor noise, 2c an opaque part.
    (An occurrence in the gate's own note, 2*, is the caller's to rule out.)"""
    value = ident.value
    if has_opaque_part(value):
        return False
    klass = binding_of(ident.detector)
    return klass == "noise" or (klass == "name" and not _minted_name(value, ident.kind, False))


def _linked(read: Step, write: Step) -> bool:
    if read.keys & write.keys:
        return True
    return bool(read.out_values & write.keys)


def _later_writes(step: Step, steps: Sequence[Step]) -> list[Step]:
    if step.later is None:
        step.later = [w for w in steps if w.pos > step.pos and w.mutating is True and not w.additive and w is not step and _linked(step, w)]
    return step.later


def _enclosing_object(text: str, pos: int) -> tuple[int, int] | None:
    """The span of the innermost ``{…}`` around ``pos`` (braces inside strings are rare in
    tool output and only widen the span)."""
    depth = 0
    start = -1
    for i in range(pos - 1, max(-1, pos - 20000), -1):
        ch = text[i]
        if ch == "}":
            depth += 1
        elif ch == "{":
            if depth == 0:
                start = i
                break
            depth -= 1
    if start < 0:
        return None
    depth = 0
    for j in range(start, min(len(text), start + 200000)):
        ch = text[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return start, j + 1
    return None


def _entity_regions(text: str, write: Step) -> list[tuple[int, int]]:
    """Objects of a read's output whose identity (a bare ``id``/``name`` key) the later
    change names in its arguments: the entity the change acts on. An opaque id the change
    names decides over a readable name that several listed objects share (the record id
    of one of two records named ``api.acme.io``)."""
    keys = [k for k in write.keys if not k.startswith("@") and len(k) >= 6]
    by_id = _regions_named(text, [k for k in keys if has_opaque_part(k)])
    return by_id or _regions_named(text, [k for k in keys if not has_opaque_part(k)])


def _regions_named(text: str, keys: list[str]) -> list[tuple[int, int]]:
    """Objects holding one of ``keys`` under an identity key."""
    low = text.lower()
    out: list[tuple[int, int]] = []
    for k in keys:
        i = low.find(k)
        while i >= 0:
            if identity_label(text, i) or (i > 0 and identity_label(text, i - 1)):
                span = _enclosing_object(text, i)
                if span is not None:
                    out.append(span)
            i = low.find(k, i + 1)
    return out


_OWN_WORD = re.compile(r"[a-z]+")


def _own_words(step: Step) -> frozenset[str]:
    """The words of what a step acts on: its tool name and its command's words before the
    first option, paths left out (``aws ec2 create-vpc`` → aws, ec2, create, vpc; not
    ``--stack-name`` nor the ``stack`` of ``--template-body file://stack.yaml``)."""
    return _words_acted_on(step.tool or "", step.command or "")


@lru_cache(maxsize=1024)
def _words_acted_on(tool: str, command: str) -> frozenset[str]:
    # one step's many values ask the same question: memoised by its tool and command
    parts = [tool]
    words = True
    for t in command.split():
        if t in ("|", "||", "&&", ";"):
            words = True  # the next command of a chain
        elif t.startswith("-"):
            words = False
        elif words and "/" not in t and "." not in t:
            parts.append(t)
    return frozenset(w for p in parts for w in _OWN_WORD.findall(p.lower()))


def _token_start(ident: Identifier) -> int:
    """Where the identifying token of a record value starts (the offset of ``"partition":
    0, "previous_offset": 7259834``): what marks the record as prior state stands before
    its token, not before the record (PRINCIPLES §4)."""
    tok = identifying_token(ident.kind, ident.norm)
    if tok is not None and ident.value.lower().endswith(tok[0]):
        return ident.end - len(tok[0])
    return ident.start


def _restated(ident: Identifier, output: str) -> bool:
    """The change's own output names the value as a whole token, not as what it was
    before (``Repairing … for version 3`` after a read showed version 3): the subject of
    the change, which it did not replace — as when its arguments name it."""
    value = ident.value
    if not output or value.lower() not in output.lower():
        return False
    tok = identifying_token(ident.kind, ident.norm)
    tail = len(tok[0]) if tok is not None and value.lower().endswith(tok[0]) else len(value)
    rx = re.compile(r"(?<![\w.\-])" + re.escape(value) + r"(?![\w\-])", re.IGNORECASE)
    for m in rx.finditer(output):
        # the mark stands before a record's token, and before the whole word holding it
        # (``previous image: reg/api@sha256:…``)
        at = m.end() - tail
        start = max(output.rfind(c, 0, at) for c in " \t\n\"'") + 1
        if not prior_marked(output, start, m.end()):
            return True
    return False


_ARG_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")
#: A change whose arguments point at its configuration elsewhere (``-f app.yaml``,
#: ``file://…``, ``@body.json``) states nothing of what it changes itself.
_CONFIG_ELSEWHERE = re.compile(
    r"(?:^|\s)(?:-f|--filename|--file|--values|--config|--cli-input-json|--template-body|-var-file)(?:\s|=)"
    r"|file://|(?:^|[\s\"'=])@[\w./\-]+\.(?:json|ya?ml)"
)


@lru_cache(maxsize=1024)
def _stated(args: str) -> frozenset[str] | None:
    """The words a change's arguments state (lower case; ``--rotation-lambda-arn`` →
    rotation, lambda, arn), or ``None`` when they state nothing of what changes: no
    arguments, or a configuration file (``terraform apply``, ``kubectl apply -f``)."""
    if not args.strip() or _CONFIG_ELSEWHERE.search(args):
        return None
    return _stated_words(args)


@lru_cache(maxsize=1024)
def _stated_words(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _ARG_WORDS.findall(text))


def _unnamed_reference(o: _Occ, write: Step) -> bool:
    """The value stands under a reference (``requester_id``, ``KmsKeyId``) that the change
    does not name though it states what it changes: the change re-points other things
    (a ticket's status, a secret's version), not this reference (PRINCIPLES §2b)."""
    nouns = reference_nouns(o.text, o.ident.start)
    if not nouns:
        return False
    stated = _stated(write.command or write.args)
    # the tool's name says what it changes too (``update_ticket_requester``)
    return stated is not None and not (nouns & (stated | _stated_words(write.tool or "")))


_RUNS = re.compile(r"[A-Za-z0-9]+")


def _composed_of_others(value: str, step: Step, text: str) -> bool:
    """Every machine-made piece of ``value`` holds another identifier that the same
    output ``text`` also printed on its own (``openpgp-revocs.d/<fingerprint>.rev``
    beside the fingerprint): the value is that identifier in a record (PRINCIPLES §4: the
    binding is the identifying token), not a handle of its own."""
    pieces = [p.lower() for p in _RUNS.findall(value) if has_opaque_part(p)]
    if not pieces:
        return False
    low = value.lower()
    inside = [e for e in _values_inside(low, step) if e != low]
    if not inside:
        return False
    if step.lowered is None:
        step.lowered = {}
    hay = step.lowered.get(id(text))
    if hay is None:
        hay = step.lowered[id(text)] = text.lower()
    times = hay.count(low)
    others = [e for e in inside if hay.count(e) > times * low.count(e)]
    return bool(others) and all(any(p in e for e in others) for p in pieces)


def _values_inside(low: str, step: Step) -> list[str]:
    """The values of ``step``'s output that occur inside ``low``, found through an index
    of the output's values by their alphanumeric runs (built once per step), not by a scan
    of every value."""
    if step.run_index is None:
        index: dict[str, list[str]] = {}
        for e in step.out_values:
            if len(e) >= 8:
                for r in set(_RUNS.findall(e)):
                    index.setdefault(r, []).append(e)
        step.run_index = index
    seen: set[str] = set()
    out: list[str] = []
    for r in set(_RUNS.findall(low)):
        for e in step.run_index.get(r, ()):
            if e not in seen and e in low:
                seen.add(e)
                out.append(e)
    return out


#: A change that accepted work for later: its request is an operation still running.
_ACCEPTED = re.compile(r"(?i)\b(?:will be processed|accepted for processing|is being processed|queued|in progress|pending)\b")
#: An HTTP header line (``x-request-id: …``, ``PayPal-Debug-Id: …``): the transport's trace.
_HEADER_LINE = re.compile(r"\s*[A-Za-z0-9]+(?:-[A-Za-z0-9]+)+\s*:")


def _operation_request(ident: Identifier, step: Step, text: str) -> bool:
    """A request id that a change printed as the handle of what it made, not as a trace
    of its HTTP call (PRINCIPLES §2a, §3d): the step created a request (``tsh request
    create``: an access request is the entity), or it accepted the work for later
    processing (``"result": "Request will be processed"``, ``Status: PENDING``), so the
    request id is the only handle to the operation's outcome. A header line stays the
    transport's trace id."""
    if ident.kind != "request_id":
        return False
    ls = text.rfind("\n", 0, ident.start) + 1
    if _HEADER_LINE.match(text, ls):
        return False
    if step.creates and "request" in _own_words(step):
        return True
    return _ACCEPTED.search(text) is not None


def _in(value: str, text: str) -> bool:
    return bool(text) and value.lower() in text.lower()


def _decide(
    occs: list[_Occ],
    cls_of: Callable[[Identifier], str],
    steps: Sequence[Step],
    derivable: Callable[[str, tuple[int, int, int]], bool],
    entity_regions: Callable[[str, Step], list[tuple[int, int]]],
    reassigns: Callable[[Step, str], bool],
    superseded: Callable[[_Occ], bool],
) -> str:
    """The rule that decides one value (all its occurrences, in order). ``reassigns(w,
    kind)``: the change ``w`` writes a value of ``kind`` into its arguments."""
    if any(o.step is not None and o.step.tool == GATE_NOTE and o.role == _OUT for o in occs):
        return "2*"  # the gate's own note: an earlier judgement found it required
    first = occs[0]
    ident = first.ident
    klass = cls_of(ident)
    value = ident.value
    opaque = has_opaque_part(value)
    reason = "-"

    # 2a: minted by a state-changing step
    st = first.step
    # a receipt handle from a step no verb list knows (``pull``, ``poll``): only the receive
    # that leased the message gives it; a step known to read can give it again
    issued = klass == "receipt" and st is not None and st.mutating is None
    if first.role == _OUT and st is not None and (st.mutating is True or issued) and not reports_failure(st.output):
        if klass == "noise" and not _operation_request(ident, st, first.text):
            reason = "3d"
        elif klass == "noise":
            return "2a"  # the handle of an accepted request: the only way to its outcome
        elif klass == "state" and not st.additive:
            reason = "3c"  # the new value of a state: read it again
            # (what a step that only adds prints of a state — the LSN a new slot starts
            # at — is the position of what it made: §2a)
        elif klass == "name" and not _minted_name(value, ident.kind, opaque):
            reason = "3c" if ident.kind == "terraform_address" else "3b"
        elif preexisting_line(first.text, ident.start) or (not st.creates and _names_from_args(value, st)):
            reason = "3b"
        elif ident.kind == "git_sha" and st.command and moves_between_commits(st.command):
            reason = "3b"  # a commit it moved to, or printed: it existed before
        elif _composed_of_others(value, st, first.text):
            reason = "3b"  # named after another handle it printed: that one is the binding
        elif klass == "handle" and scope_reference(first.text, ident.start, _own_words(st)):
            reason = "3b"  # the VPC, stack or bot of what it made: that existed before
        elif ident.sensitive and not st.creates:
            # a credential a step printed (a token in its environment) is no handle of
            # what it made; one a login or a create step issued is (PRINCIPLES §4)
            reason = "-"
        else:
            return "2a"
    elif first.role == _OUT and st is not None and st.mutating is False:
        reason = "3a"

    # 2c: first written, from no other source, into a state-changing call
    for o in occs:
        if (o.role == _MENTION and o.agent) or (o.role == _ARGS and (o.step is None or o.step.mutating is not True)):
            continue  # the agent's own words: not a source
        if o.role == _ARGS and o.step is not None and o.step.mutating is True:
            if opaque and not derivable(value, o.order):
                return "2c"
            reason = "3b"
        break

    # 2b: prior state of a later change
    if klass not in ("name", "noise"):
        for o in occs:
            if o.role != _OUT or o.step is None:
                continue
            r = o.step
            named = _in(value, r.args)
            if r.mutating is True and not named and prior_marked(o.text, _token_start(o.ident), o.ident.end):
                # what a change reports it moved from; not an echo of its own arguments
                # (``Copying from reg/app:1.42.0 to …`` names the source it was given)
                return "2b"
            if r.history or named or (klass == "version" and superseded(o)):
                continue
            if r.mutating is False and names_the_call(o.text, o.ident.start):
                continue  # the read's own receipt (its statement handle, its request id)
            labelled = identity_label(o.text, o.ident.start)
            for w in _later_writes(r, steps):
                if _in(value, w.args) or _restated(o.ident, w.output):
                    continue  # what the change names: its target or its new value
                if klass in ("handle", "version") and not reassigns(w, ident.kind):
                    # an entity's id is no state of it: a handle is prior state only as
                    # the value of a reference the change may re-point (the customer an
                    # UPDATE replaces with another, the AMI an apply replaces), not when
                    # the change states values of other kinds only (an issue resolved
                    # after its events were read); so is a version (the release an event
                    # was seen in is no version that resolving the issue moves from)
                    continue
                if klass in ("handle", "version") and _unnamed_reference(o, w):
                    continue  # a reference the change does not name: not what it re-points
                regions = entity_regions(o.text, w)
                if regions:
                    # the read listed entities and the change names one of them: the
                    # state is what that entity's object holds (a nested price id), not
                    # its siblings (the other payments of a listing)
                    if any(a <= o.ident.start < z for a, z in regions):
                        return "2b"
                elif not labelled:
                    return "2b"
    elif reason == "-":
        reason = "3d" if klass == "noise" else "3b"
    return reason


def judge(
    snapshot: Snapshot,
    identifiers: Sequence[Identifier],
    calls: Sequence[CallRef],
    links: Mapping[tuple[int, int], CallRef],
    binding_of: Callable[[str], str],
    text_steps_of: Callable[[int, int, str], tuple[TextStep, ...]] = lambda _mi, _pi, text: text_steps(text),
) -> list[Identifier]:
    """``identifiers`` (of ``snapshot``, as extraction found them) with ``regenerable``
    and ``why`` set by the rules of the module docstring. ``calls``/``links`` are the
    snapshot's tool calls and, per tool-result part, its call; ``binding_of`` maps a
    detector id to its binding class; ``text_steps_of`` may cache :func:`.steps.text_steps`."""
    msgs = snapshot.messages

    def part_text(mi: int, pi: int) -> str:
        if mi == SYSTEM_INDEX:
            return snapshot.system
        if 0 <= mi < len(msgs) and 0 <= pi < len(msgs[mi].parts):
            return msgs[mi].parts[pi].text
        return ""

    # ---- steps
    steps: list[Step] = []
    by_call: dict[tuple[int, int], Step] = {}
    results: dict[int, list[tuple[int, int]]] = {}
    for key, c in links.items():
        results.setdefault(id(c), []).append(key)
    for c in calls:
        output = "\n".join(part_text(mi, pi) for mi, pi in sorted(results.get(id(c), ())))
        s = call_step(c.message_index, c.part_index, c.tool_name, part_text(c.message_index, c.part_index), c.cls, output)
        steps.append(s)
        by_call[(c.message_index, c.part_index)] = s
        for k in results.get(id(c), ()):
            by_call[k] = s
    text_parts: dict[tuple[int, int], list[tuple[TextStep, Step]]] = {}

    def text_pieces(mi: int, pi: int) -> list[tuple[TextStep, Step]]:
        key = (mi, pi)
        if key not in text_parts:
            text = part_text(mi, pi)
            text_parts[key] = [(ts, text_step(mi, pi, text, ts)) for ts in text_steps_of(mi, pi, text)]
            steps.extend(s for _, s in text_parts[key])
        return text_parts[key]

    # every text part's steps, also of parts without identifiers: a pasted command that
    # printed nothing can still be the change that makes an earlier read prior state
    if snapshot.system:
        text_pieces(SYSTEM_INDEX, 0)
    for mi, m in enumerate(msgs):
        for pi, p in enumerate(m.parts):
            if p.kind in TEXTUAL_KINDS and p.text and p.kind != "tool_call" and (mi, pi) not in by_call:
                text_pieces(mi, pi)

    # a ReAct action ending its message, observed in the next one, and output pasted
    # because an assistant asked for it: one step each
    join_observations(msgs, part_text, text_pieces, text_parts, steps)

    # ---- occurrences, grouped by value
    groups: dict[str, list[_Occ]] = {}
    for ident in identifiers:
        src = ident.source
        mi, pi = src.message_index, src.part_index
        order = (_order_index(mi), pi, ident.start)
        step: Step | None = None
        role = _MENTION
        text = part_text(mi, pi)
        if src.origin == "tool_call":
            step, role = by_call.get((mi, pi)), _ARGS
        elif src.origin == "tool_result" and (mi, pi) in by_call:
            step, role = by_call[(mi, pi)], _OUT
        elif src.origin != "tool_def":
            for ts, s in text_pieces(mi, pi):
                if ts.args_start <= ident.start < ts.args_end:
                    step, role = s, _ARGS
                    break
                if ts.out_start <= ident.start < ts.out_end:
                    # prose with no command is a mention, not the output of a step: what a
                    # task or a summary says happened is no evidence of a change
                    step = s
                    role = _MENTION if ts.command is None and ts.tool is None else _OUT
                    break
        if step is not None and role == _OUT:
            step.out_values.add(ident.value.lower())
        agent = src.origin in ("assistant", "thinking", "tool_call")
        groups.setdefault(ident.norm, []).append(_Occ(order, ident, step, role, text, agent))
    steps.sort(key=lambda s: s.pos)

    def cls_of(i: Identifier) -> str:
        return binding_of(i.detector)

    every = sorted((o for occs in groups.values() for o in occs), key=lambda o: o.order)

    def derivable(value: str, before: tuple[int, int, int]) -> bool:
        """A value composed of parts seen earlier (``nightly/orders-7f3a.dump`` after a
        listing showed ``orders-7f3a.dump``, a zone id after ``/hostedzone/<id>``): every
        machine-made piece of it occurs in an earlier value, so it has an earlier source
        (PRINCIPLES §2c, §3b). Only asked for opaque values first written into a
        state-changing call, so the scan of earlier values stays rare."""
        pieces = [p.lower() for p in _PIECES.findall(value) if has_opaque_part(p)]
        if not pieces:
            return True
        earlier = [o.ident.value.lower() for o in every if o.order < before and o.role != _ARGS]
        return all(any(p in e for e in earlier) for p in pieces)

    region_cache: dict[tuple[int, int], list[tuple[int, int]]] = {}

    def entity_regions(text: str, write: Step) -> list[tuple[int, int]]:
        key = (id(text), id(write))
        if key not in region_cache:
            region_cache[key] = _entity_regions(text, write)
        return region_cache[key]

    arg_kinds: dict[int, set[str]] = {}
    for o in every:
        if o.role == _ARGS and o.step is not None and cls_of(o.ident) not in ("name", "noise"):
            arg_kinds.setdefault(id(o.step), set()).add(o.ident.kind)

    def reassigns(write: Step, kind: str) -> bool:
        """The change may replace a value of ``kind``: it writes one, or it states no
        value at all (``terraform apply``, ``kubectl apply -f``: the configuration says
        what changes, so any state it reads may be what it replaces)."""
        kinds = arg_kinds.get(id(write))
        return not kinds or kind in kinds

    last_listed: dict[tuple[int, int, str], int] = {}
    for o in every:
        if o.role == _OUT:
            where = (o.ident.source.message_index, o.ident.source.part_index, o.ident.kind)
            last_listed[where] = max(last_listed.get(where, -1), o.ident.start)

    def superseded(o: _Occ) -> bool:
        """A migration a listing shows before a later one of its kind (``showmigrations``,
        ``flyway info``): history of the schema, not its state — the last one applied is
        what a migration moves from (PRINCIPLES §2b, §3d)."""
        if o.step is None or "@db:migrate" not in o.step.keys:
            return False
        src = o.ident.source
        return last_listed.get((src.message_index, src.part_index, o.ident.kind), -1) > o.ident.start

    why: dict[str, str] = {}
    for norm, occs in groups.items():
        occs.sort(key=lambda o: o.order)
        why[norm] = _decide(occs, cls_of, steps, derivable, entity_regions, reassigns, superseded)
    out: list[Identifier] = []
    for ident in identifiers:
        w = why.get(ident.norm, "-")
        regen = not w.startswith("2")
        out.append(ident if (regen == ident.regenerable and w == ident.why) else dataclasses.replace(ident, regenerable=regen, why=w))
    return out

