"""What a tool call's classification says (:class:`CallClass`) and the verbs that decide
it, shared by tool names (:mod:`.commands`) and command lines (:mod:`.shell`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

__all__ = [
    "APPEND_VERBS", "CLI_WRITE_VERBS", "CREATE_VERBS", "MODIFY_VERBS", "PHRASAL_VERBS", "READ_VERBS", "WRITE_VERBS", "CallClass",
    "code_verb", "name_words", "phrasal_verb",
]


@dataclass(frozen=True, slots=True)
class CallClass:
    """Result of classifying one tool call.

    ``mutating``: ``True`` mutates state, ``False`` read-only, ``None`` unknown.
    ``command``: the shell command line for shell-like tools, else ``None``.
    ``domains``: resource domains touched (read or written).
    ``reason``: short human explanation (``"git reset"``, ``"verb get_"``).
    """

    mutating: bool | None
    command: str | None = None
    domains: frozenset[str] = frozenset()
    reason: str = ""



READ_VERBS = (
    "get", "list", "read", "search", "view", "show", "describe", "find", "fetch", "query", "lookup",
    "look", "inspect", "check", "status", "grep", "glob", "ls", "cat", "head", "tail", "browse",
    "open", "retrieve", "count", "explain", "diff", "watch", "peek", "preview", "stat", "download",
    "summarize", "analyze", "validate", "info", "is", "has", "can", "print", "web", "lint", "test",
    "plan", "dry", "estimate", "recall", "history", "log", "logs", "ask", "think", "todo_read", "todoread",
)
#: Verbs of a step that makes something new (what it returns is minted: PRINCIPLES §2a) and
#: of one that changes what exists. One vocabulary: the call classifier (a tool's name,
#: an unknown command's words) and the provenance evidence (:mod:`.evidence`) read the
#: same verbs, so a step one calls state-changing the other does not call a read.
CREATE_VERBS = frozenset(
    """create new run launch add insert post make generate mint issue acquire start submit upload
    put allocate provision register open init fork clone copy backup snapshot export grant begin
    initiate reserve claim lease lock receive enqueue send publish push commit tag deploy build
    checkout request order book schedule trigger dispatch spawn login signin authenticate auth
    take""".split()
)
MODIFY_VERBS = frozenset(
    """update modify patch set edit change configure scale restart rename move delete remove destroy
    terminate stop cancel rollback revert reset release unlock disable enable switch promote flip
    resize rotate replace upgrade downgrade apply migrate seek""".split()
)
#: State-changing verbs that are neither creation nor modification verbs above (writing a
#: file, executing, merging, paying, the editor tools).
_OTHER_WRITE_VERBS = frozenset(
    """write execute exec upsert drop rollout kill refund charge capture merge rebase install
    uninstall save store approve reject close open_pr assign revoke complete abort invoke attach
    detach untag import transfer pay void finalize confirm multiedit notebookedit str_replace
    todowrite todo_write renew""".split()
)
#: Every state-changing verb: those, and the creation and modification verbs that are not
#: read verbs too (``open`` a file, ``export`` a report read).
WRITE_VERBS = _OTHER_WRITE_VERBS | ((CREATE_VERBS | MODIFY_VERBS) - set(READ_VERBS) - {"export"})

#: Verbs of a change that only adds to a collection (a document inserted, an entry
#: appended, a job enqueued, a record created, a message sent): what was read before it
#: stays valid, so it makes no prior state (PRINCIPLES §2b is about a value a change
#: replaced). Not ``deploy``, ``tag``, ``push``: those re-point what exists.
APPEND_VERBS = frozenset({"add", "insert", "append", "enqueue", "create", "send"})
#: Verbs of a program's own commands and API beyond the tool-name verbs (``restic backup``,
#: ``etcdctl lease grant``, ``rs.stepDown`` … ``failover``).
CLI_WRITE_VERBS = frozenset(
    """backup snapshot grant renew ack promote flip switch rotate issue register provision
    allocate enqueue receive deregister unregister restore failover cutover mint sign put""".split()
)

#: Phrasal verbs — a verb and its particle, which together mean something else than the
#: verb (``spin_up_preview`` makes an environment, ``look_up_order`` reads one): what each
#: does, ``create`` (PRINCIPLES §2a: what it returns is minted), ``modify`` or ``read``.
PHRASAL_VERBS: dict[tuple[str, str], str] = {
    **{pair: "create" for pair in (("spin", "up"), ("stand", "up"), ("set", "up"), ("bring", "up"), ("boot", "up"), ("fire", "up"), ("start", "up"), ("sign", "up"), ("check", "out"))},
    **{pair: "modify" for pair in (
        ("tear", "down"), ("spin", "down"), ("shut", "down"), ("bring", "down"), ("wind", "down"), ("power", "on"), ("power", "off"),
        ("turn", "on"), ("turn", "off"), ("roll", "out"), ("roll", "back"), ("scale", "up"), ("scale", "down"), ("scale", "out"),
        ("scale", "in"), ("clean", "up"), ("shut", "off"), ("wipe", "out"), ("cut", "over"), ("fail", "over"), ("hand", "off"),
    )},
    **{pair: "read" for pair in (("look", "up"), ("check", "in"), ("find", "out"), ("read", "out"), ("list", "out"))},
}


def phrasal_verb(words: list[str]) -> str | None:
    """What the first phrasal verb two adjacent ``words`` form does, if any (the words
    of a tool name: ``mcp__forge__spin_up_preview``)."""
    for pair in pairwise(words):
        kind = PHRASAL_VERBS.get(pair)
        if kind is not None:
            return kind
    return None


_WORD_SPLIT = re.compile(r"[_\-.\s/]+|(?<=[a-z])(?=[A-Z])")


def name_words(name: str) -> list[str]:
    """The lower-cased words of a name, split at ``_ - . / space`` and camel case
    (``mcp__forge__spinUpPreview`` → ``mcp forge spin up preview``)."""
    return [w.lower() for w in _WORD_SPLIT.split(name) if w]


_CALLED = re.compile(r"(?<![\w$])([A-Za-z_$][\w$]*)\s*\(")


def code_verb(code: str, *, bare_methods_act: bool = False) -> str | None:
    """What code given to an interpreter does, by the verbs of its calls (PRINCIPLES §2:
    what ran decides, not the tool's or program's name): the verb of its first call named
    by a state-changing verb and its object (``insertOne`` → insert, ``start_run`` →
    start); ``"read"`` for code whose calls are otherwise named by read verbs
    (``get_run``, ``find``, ``countDocuments``); ``None`` when nothing speaks.

    A bare verb (``set()``, ``x.update()``, ``s.replace()``) is in general code a builtin
    as often as a change, so it leaves the answer unknown — except, with
    ``bare_methods_act``, a method call in code given to a program on its command line
    (``mongosh --eval 'db.orders.drop()'``, ``python -c '…os.remove(p)'``), where the
    program's API is what the code calls; a code-running tool's code gets no such
    presumption (its name decides)."""
    reads = bare_write = False
    for m in _CALLED.finditer(code[:20000]):
        words = name_words(m.group(1))
        if not words:
            continue
        if words[0] in WRITE_VERBS or words[0] in CLI_WRITE_VERBS or phrasal_verb(words[:2]) in ("create", "modify"):
            if len(words) > 1 or (bare_methods_act and code[m.start() - 1 : m.start()] == "."):
                return words[0]
            bare_write = True
        reads = reads or words[0] in READ_VERBS
    return "read" if reads and not bare_write else None
