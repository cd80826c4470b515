"""The steps of a conversation: what ran, with which arguments, and what it printed.

A *step* is one action and its output, whatever role carries it (PRINCIPLES §2: "the
role that carries the text does not matter"):

- a tool call and its linked tool result (``tool_call`` / ``tool_result`` parts);
- command output pasted as text — by the user (aider's ``I ran this command: … And got
  this output: …``, Cline's ``[execute_command for '…'] Result:``), in a shell transcript
  (``$ cmd`` lines), a ReAct trace (``Action:`` / ``Action Input:`` / ``Observation:``)
  or an XML call in assistant text (``<execute_command><command>…``);
- output pasted under ``Output:`` / ``Here is the result:`` or in a fenced block of
  output (not of code) with no command: a step whose state change only its output can
  tell;
- a note the gate itself inserted (its values were judged required before);
- any other text: prose, a mention — no step ran.

:func:`text_steps` cuts one text into such pieces (pure; callers cache it per message).
Every piece has an optional command span (the step's arguments) and an output span.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["GATE_NOTE", "PASTED_OUTPUT", "TextStep", "text_steps"]


@dataclass(frozen=True, slots=True)
class TextStep:
    """One step found in a text. ``args`` is ``[args_start, args_end)`` (empty when no
    command was written), ``out`` the output span; ``tool`` names the tool when the text
    says it (``execute_command``, a ReAct action), ``command`` is the command line."""

    args_start: int
    args_end: int
    out_start: int
    out_end: int
    tool: str | None = None
    command: str | None = None


_FENCE = r"(?:```[\w-]*\n)?"
#: Markers that open a step; each names the command (group ``cmd``) or tool (``tool``)
#: and ends where the output begins.
_MARKERS = re.compile(
    "|".join(
        (
            # aider: "I ran this command:\n\n{cmd}\n\nAnd got this output:\n\n{output}"
            r"I ran this command:\s*\n" + _FENCE + r"(?P<a_cmd>[^\n]+(?:\n(?!```|\s*\n|And got this output)[^\n]+)*)\n(?:```\n)?\s*And got this output:[ \t]*\n" + _FENCE,
            # Cline: "[execute_command for 'cmd'] Result:" / "[read_file for 'x'] Result:"
            r"\[(?P<c_tool>[A-Za-z_][\w.\-]*)(?: for '(?P<c_arg>[^\n]*?)')?\] Result:[ \t]*\n?(?:Command executed\.\n)?(?:Output:\n)?",
            # Cline / XML tool calls in assistant text
            r"<execute_command>\s*<command>(?P<x_cmd>[\s\S]*?)</command>[\s\S]*?</execute_command>",
            # ReAct: "Action: tool\nAction Input: {...}\nObservation:"
            # (the observation may come in the next message: the text ends after the input)
            r"(?m:^)Action:[ \t]*(?P<r_tool>[^\n]+)\nAction Input:[ \t]*(?P<r_args>[^\n]*(?:\n(?!Observation:)[^\n]+)*)(?:\n(?:Observation:[ \t]*)?|\Z)",
            # "Output of `cmd`:" / "Ran `cmd`:" / "`cmd` output:" / "Running `cmd`"
            r"(?i:output of|(?:i )?ran|running|executed|result of)[ \t]+`(?P<o_cmd>[^`\n]+)`[^\n]*\n" + _FENCE,
            r"`(?P<p_cmd>[^`\n]+)`[ \t]+(?:output|printed|returned)[^\n]*\n" + _FENCE,
            # the gate's own repair notes: values an earlier judgement found required
            r"(?P<g_note>\[compaction-gate: (?:identifiers preserved|verbatim identifiers)[^\]\n]*\])",
            # output pasted with no command: "Here is the output:" / "Output:" / "Result:"
            r"(?m:^)(?i:here(?:'s| is) (?:the )?(?P<u_what>output|result|response)[^\n]*|(?P<u_label>output|result|response):)[ \t]*\n" + _FENCE,
            # a fenced block of output with no command before it (a block of code is not)
            r"(?m:^)(?P<f_fence>```(?:text|txt|console|shell|bash|sh|output|log|json|plaintext)?[ \t]*\n)(?![$%❯] )",
            # shell transcripts: "$ cmd" (optionally after user@host:path)
            r"(?m:^)(?:[\w.\-]+@[\w.\-]+:[^\n$#]*)?[$%❯][ \t]+(?P<s_cmd>[^\n]+)\n?",
        )
    )
)

#: Text that ends a step's output before the next marker: a closing fence, a ReAct
#: thought, the end of a gate note.
_OUT_END = re.compile(r"(?m)^(?:```[ \t]*$|Thought:|\[/compaction-gate\])")

#: ``TextStep.tool`` of a note the gate itself inserted (its values were judged required).
GATE_NOTE = "compaction-gate"
#: ``TextStep.tool`` of output pasted without its command.
PASTED_OUTPUT = "pasted-output"


def _cmd_of(m: re.Match[str]) -> tuple[str | None, str | None, int, int]:
    """(tool, command, args start, args end) of a marker match."""
    for g in ("a_cmd", "x_cmd", "o_cmd", "p_cmd", "s_cmd"):
        if m.group(g) is not None:
            cmd = m.group(g).strip()
            return ("execute_command" if g == "x_cmd" else None), cmd, m.start(g), m.end(g)
    if m.group("f_fence") is not None:
        return PASTED_OUTPUT, None, m.start(), m.start()
    if m.group("g_note") is not None:
        return GATE_NOTE, None, m.start(), m.start()
    if m.group("u_what") is not None or m.group("u_label") is not None:
        return PASTED_OUTPUT, None, m.start(), m.start()
    if m.group("c_tool") is not None:
        tool, arg = m.group("c_tool"), m.group("c_arg")
        if arg is None:
            return tool, None, m.start(), m.start()
        cmd = arg if tool in ("execute_command", "run_command", "bash", "shell") else None
        return tool, cmd, m.start("c_arg"), m.end("c_arg")
    tool = m.group("r_tool").strip()
    return tool, None, m.start("r_args"), m.end("r_args")


def text_steps(text: str) -> tuple[TextStep, ...]:
    """The steps of one text, in order, covering it: text before the first marker (and a
    text with no marker) is one step without a command. An XML call in assistant text is
    a step with arguments and no output (its result comes in a later message)."""
    if not text:
        return ()
    out: list[TextStep] = []
    # a fence marker only opens a block: one after an odd number of fences closes one
    matches = [m for m in _MARKERS.finditer(text) if m.group("f_fence") is None or text.count("```", 0, m.start()) % 2 == 0]
    first = matches[0].start() if matches else len(text)
    if text[:first].strip():
        out.append(TextStep(0, 0, 0, first))
    for k, m in enumerate(matches):
        tool, cmd, a0, a1 = _cmd_of(m)
        nxt = matches[k + 1].start() if k + 1 < len(matches) else len(text)
        o0 = m.end()
        if m.group("x_cmd") is not None:
            o1 = o0  # a call: its output arrives later
        else:
            end = _OUT_END.search(text, o0, nxt)
            o1 = end.start() if end else nxt
        out.append(TextStep(a0, a1, o0, o1, tool, cmd))
        if o1 < nxt and text[o1:nxt].strip():
            out.append(TextStep(o1, o1, o1, nxt))  # prose between the output and the next step
    return tuple(out)
