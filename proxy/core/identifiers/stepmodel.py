"""The steps of a conversation as the provenance rules read them: a tool call and its
result, or a piece of text (:mod:`.steps`) with what it ran and printed, classified as
reading or changing state (:mod:`.commands`) with the evidence of its words and output
(:mod:`.evidence`). A ReAct action whose observation comes in the next message is one
step with it, and so is a command an assistant asks the user to run and paste with the
user's reply."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from proxy.core.messages import TEXTUAL_KINDS, Message

from .commands import CallClass, classify_call, classify_command, command_of, is_shell_tool
from .evidence import creates, is_history, link_keys, output_says_changed
from .steps import GATE_NOTE, PASTED_OUTPUT, TextStep

__all__ = ["Step", "call_step", "join_observations", "text_step"]


@dataclass(slots=True)
class Step:
    """One action and its output (see :mod:`.steps`). ``pos`` orders steps in the
    conversation; ``args`` / ``output`` are texts; ``keys`` the resources it names."""

    pos: tuple[int, int, int]
    tool: str | None
    command: str | None
    args: str
    output: str
    mutating: bool | None
    keys: frozenset[str]
    history: bool
    creates: bool
    #: The change only appends (``XADD``, ``git commit``): what was read before stays valid.
    additive: bool = False
    #: Lower-cased values of the identifiers its output holds (filled during judging).
    out_values: set[str] = field(default_factory=set)
    #: Later state-changing steps that link to this one (computed on demand).
    later: list[Step] | None = None
    #: ``out_values`` by their alphanumeric runs, and its output texts lower-cased by
    #: ``id`` (built on demand by provenance, for one judgement).
    run_index: dict[str, list[str]] | None = None
    lowered: dict[int, str] | None = None


def _mutating(cls_mut: bool | None, output: str, command: str | None = None) -> bool | None:
    if cls_mut is not None:
        return cls_mut
    if command and is_history(None, command):
        # a command that lists past records (``journalctl -u nginx``) prints what other
        # acts did ("Started nginx.service"): its output is no evidence of its own act
        return False
    return output_says_changed(output)


def _additive(cls: CallClass) -> bool:
    return bool(cls.domains) and all(d.endswith(":additive") for d in cls.domains)


def call_step(mi: int, pi: int, tool: str | None, args: str, cls: CallClass, output: str) -> Step:
    return Step(
        pos=(mi, pi, 0),
        tool=tool,
        command=cls.command,
        args=args,
        output=output,
        mutating=_mutating(cls.mutating, output, cls.command),
        keys=link_keys(tool, cls.command, args, cls.domains),
        history=is_history(tool, cls.command),
        creates=creates(tool, cls.command or args[:200], output),
        additive=_additive(cls),
    )


def text_step(mi: int, pi: int, text: str, ts: TextStep, observed: str | None = None) -> Step:
    """The step of a piece of ``text``; ``observed``: its output when another message
    carries it (a ReAct observation of its own)."""
    output = text[ts.out_start : ts.out_end] if observed is None else observed
    args = text[ts.args_start : ts.args_end]
    command = ts.command
    if command is None and is_shell_tool(ts.tool):
        command = command_of(ts.tool, args)  # a ReAct action of a shell tool: its input is the command line
    if command is not None:
        cls = classify_command(command)
    elif ts.tool in (GATE_NOTE, PASTED_OUTPUT):
        cls = CallClass(None)
    elif ts.tool is not None and not is_shell_tool(ts.tool):
        cls = classify_call(ts.tool, args)
        line = args.strip()
        if cls.mutating is None and line and "\n" not in line and not line.startswith(("{", "[")) and " " not in ts.tool.strip():
            # an action named by a program (``Action: redis-cli`` / ``Action Input: XADD …``):
            # its input is the rest of a command line the classifier may know
            as_line = classify_command(f"{ts.tool.strip()} {line}")
            if as_line.mutating is not None:
                command, cls = as_line.command, as_line
    else:  # prose: no step ran
        return Step((mi, pi, ts.out_start), None, None, "", output, None, frozenset(), False, False)
    return Step(
        pos=(mi, pi, ts.args_start if ts.args_end > ts.args_start else ts.out_start),
        tool=ts.tool,
        command=command,
        args=args,
        output=output,
        mutating=_mutating(cls.mutating, output, command),
        keys=link_keys(ts.tool, command, args, cls.domains),
        history=is_history(ts.tool, command),
        creates=creates(ts.tool, command, output),
        additive=_additive(cls),
    )


_OBSERVATION = re.compile(r"\s*Observation:[ \t]*")


def _observation(m: Message) -> tuple[int, int] | None:
    """(part, offset of its text) of a message that opens with ``Observation:``."""
    for pi, p in enumerate(m.parts):
        if p.kind in TEXTUAL_KINDS and p.kind != "tool_call" and p.text.strip():
            mo = _OBSERVATION.match(p.text)
            return (pi, mo.end()) if mo else None
    return None


def _last_action(
    m: Message, mi: int, pieces: Callable[[int, int], list[tuple[TextStep, Step]]]
) -> tuple[tuple[int, int], tuple[TextStep, Step]] | None:
    """The ReAct action a message ends with, if it has no output yet: ((part, piece
    index), piece)."""
    for pi in range(len(m.parts) - 1, -1, -1):
        p = m.parts[pi]
        if p.kind not in TEXTUAL_KINDS or p.kind == "tool_call" or not p.text.strip():
            continue
        got = pieces(mi, pi)
        if not got:
            return None
        ts, s = got[-1]
        if s.tool in (None, GATE_NOTE, PASTED_OUTPUT) or p.text[ts.out_start : ts.out_end].strip():
            return None
        return (pi, len(got) - 1), got[-1]
    return None


def _span(t: TextStep) -> tuple[int, int]:
    return min(t.args_start, t.out_start), max(t.args_end, t.out_end)


def _overlaps(t: TextStep, start: int, end: int) -> bool:
    a, z = _span(t)
    return a < end and z > start


def join_observations(
    msgs: Sequence[Message],
    part_text: Callable[[int, int], str],
    pieces: Callable[[int, int], list[tuple[TextStep, Step]]],
    parts: dict[tuple[int, int], list[tuple[TextStep, Step]]],
    steps: list[Step],
) -> None:
    """Steps that span two messages. A ReAct action that ends its message and the next
    message's ``Observation: …`` are one step, as a tool call and its result are: the
    action's step gets the observation as its output (and is judged by it), the
    observation's text becomes that output. So are a command an assistant asked the user
    to run and paste, and the reply (:func:`_join_pasted`)."""
    for mi in range(1, len(msgs)):
        obs = _observation(msgs[mi])
        act = _last_action(msgs[mi - 1], mi - 1, pieces) if obs is not None else None
        if obs is None or act is None:
            continue
        opi, start = obs
        (api, k), (ts, old) = act
        text = part_text(mi, opi)
        joined = text_step(mi - 1, api, part_text(mi - 1, api), ts, observed=text[start:])
        parts[(mi - 1, api)][k] = (ts, joined)
        parts[(mi, opi)] = [(TextStep(start, start, start, len(text), ts.tool, ts.command), joined)]
        steps[:] = [joined if s is old else s for s in steps]
    # output a user pasted because an assistant gave it the command: one step
    gone: set[int] = set()
    added: list[Step] = []
    for akey, ats, rkey, rts, joined in list(_join_pasted(msgs, part_text, pieces)):
        # the assistant's pieces around the command stay; the one holding it is the new step
        kept = [(t, st) for t, st in pieces(*akey) if not _overlaps(t, ats.args_start, ats.args_end)]
        gone.update(id(st) for t, st in pieces(*akey) if _overlaps(t, ats.args_start, ats.args_end))
        gone.update(id(st) for _, st in pieces(*rkey))
        parts[akey] = sorted([*kept, (ats, joined)], key=lambda x: _span(x[0])[0])
        parts[rkey] = [(rts, joined)]
        added.append(joined)
    if added:
        steps[:] = [st for st in steps if id(st) not in gone] + added


#: An assistant's request that the user run something and paste what it printed (an agent
#: without tools: PRINCIPLES §2, "output pasted by the user … judged by the same rules").
_PASTE_ASK = re.compile(
    r"(?i)\bpaste\b[^.\n]{0,60}?\b(?:output|print(?:s|ed)?|result|returns?|says|shows|gives)\b"
    r"|\b(?:send|show|share|give)\s+me\s+(?:the|its|what)\b[^.\n]{0,30}?\b(?:output|prints?|printed|result|returns?|says)\b"
)
#: A user's word that it runs what it is given and pastes the output (an aider-style chat:
#: ``Give me the curl commands one at a time; I'll paste the output``).
_PASTE_OFFER = re.compile(
    r"(?i)\bI(?:'ll| will)\s+(?:run\b[^.\n]{0,60}?\band\s+paste\b|paste\s+(?:the\s+|its\s+|their\s+)?(?:output|results?|what\b))"
)
_CODE_SPAN = re.compile(r"```[^\n]*\n(?P<block>.*?)```|`(?P<inline>[^`\n]+)`", re.S)
_COMMAND_LIKE = re.compile(r"^[A-Za-z][\w.\-]*\s+(?!=)\S")


def _asked_command(text: str, offered: bool) -> tuple[str, int, int] | None:
    """The command a message gives to be run and pasted, with its span: the last code
    span before its request to paste what it printed (or the fenced block right after the
    request, when none comes before it), or, when the user offered to paste
    (``offered``), the last fenced block of the message."""
    ask = _PASTE_ASK.search(text)
    if ask is None and not offered:
        return None
    found = None
    for m in _CODE_SPAN.finditer(text, 0, ask.start() if ask is not None else len(text)):
        g = "block" if m.group("block") is not None else "inline"
        if ask is None and g == "inline":
            continue  # without a request, only a command set apart to be run counts
        found = _command_span(m, g) or found
    if found is None and ask is not None:
        # the request before its command ("run this and paste the output:" and a block)
        after = _CODE_SPAN.search(text, ask.end())
        if after is not None and after.group("block") is not None:
            found = _command_span(after, "block")
    return found


def _command_span(m: re.Match[str], group: str) -> tuple[str, int, int] | None:
    """The command a code span holds, stripped, with its span; ``None`` if it holds none."""
    code = m.group(group)
    command = code.strip()
    if not _COMMAND_LIKE.match(command):
        return None
    start = m.start(group) + len(code) - len(code.lstrip())
    return command, start, start + len(command)


def _join_pasted(
    msgs: Sequence[Message],
    part_text: Callable[[int, int], str],
    pieces: Callable[[int, int], list[tuple[TextStep, Step]]],
) -> Iterator[tuple[tuple[int, int], TextStep, tuple[int, int], TextStep, Step]]:
    """A user's reply to an assistant that gave it a command to run and paste (asked for
    its output, or the user offered to paste what it runs) is that command's output, when
    the reply marks no step of its own (no ``$ cmd``, no ``Output:``): one step, whose
    arguments are the command in the assistant's text (an idempotency key it wrote there is
    first written into a state-changing call: PRINCIPLES §2c) and whose output is the
    reply, judged by the command and by what the output says (``public and secret key
    created``), as a tool's result is. Yields (assistant part, its text step, reply part,
    its text step, the joined step)."""
    offered = False
    for mi in range(1, len(msgs)):
        prev = msgs[mi - 1]
        if prev.role == "user":
            offered = offered or any(_PASTE_OFFER.search(p.text) for p in prev.parts if p.kind in TEXTUAL_KINDS and p.text)
        if msgs[mi].role != "user" or prev.role != "assistant":
            continue
        asked = None
        for api in range(len(prev.parts) - 1, -1, -1):
            p = prev.parts[api]
            if p.kind in TEXTUAL_KINDS and p.kind != "tool_call" and p.text:
                got = _asked_command(part_text(mi - 1, api), offered)
                if got is not None:
                    asked = (api, got)
                    break
        if asked is None:
            continue
        api, (command, a0, a1) = asked
        for pi, p in enumerate(msgs[mi].parts):
            if p.kind not in TEXTUAL_KINDS or p.kind == "tool_call" or not p.text.strip():
                continue
            if any(s.tool is not None or s.command is not None for _, s in pieces(mi, pi)):
                break  # the reply marks its own steps
            text = part_text(mi, pi)
            ask_ts = TextStep(a0, a1, a1, a1, None, command)
            joined = text_step(mi - 1, api, part_text(mi - 1, api), ask_ts, observed=text)
            yield (mi - 1, api), ask_ts, (mi, pi), TextStep(0, 0, 0, len(text), None, command), joined
            break
