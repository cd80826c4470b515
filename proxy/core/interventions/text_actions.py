"""Actions proposed in text.

An agent without a tool role (aider, a chat UI with a "run" button) has the model
propose its next action as a shell command in a fenced code block, and the client offers
to run it. For the tripwire that command is the next action just as a tool call is
(PRINCIPLES §2: the role that carries the text does not matter), so each shell-fenced
block of an assistant reply is read as one call (the tripwire checks it under the name
:data:`SUGGESTED`).

Only blocks whose info string names a shell count (```` ```bash ````, ``sh``, ``console``,
``powershell`` …): an unlabelled fence is as often program output or code as a command.
A fence left open at the end of the reply runs to its end (CommonMark).
"""

from __future__ import annotations

import re

#: The tool name a command suggested in text is checked under.
SUGGESTED = "a command suggested in the reply"

_SHELLS = frozenset(
    {"bash", "sh", "shell", "zsh", "fish", "ksh", "console", "shell-session", "terminal",
     "powershell", "pwsh", "ps1", "ps", "cmd", "bat", "batch"}
)  # fmt: skip
_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`{]*)")


def commands_in_text(text: str) -> list[str]:
    """The bodies of the shell-fenced code blocks of ``text``, in order."""
    out: list[str] = []
    fence: str | None = None
    shell = False
    body: list[str] = []
    for line in text.splitlines():
        if fence is None:
            m = _OPEN.match(line)
            if m:
                fence, shell, body = m.group(1), m.group(2).lower() in _SHELLS, []
            continue
        stripped = line.strip()
        if stripped and stripped[0] == fence[0] and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
            if shell and any(b.strip() for b in body):
                out.append("\n".join(body))
            fence = None
            continue
        body.append(line)
    if fence is not None and shell and any(b.strip() for b in body):
        out.append("\n".join(body))
    return out
